"""The frames of the finding against a live name server and broker: each is
refused (a clear SYSTEM_ERROR answer, or the connection closed), the daemon
stays up and answers another client, and its peak memory grows by about
what the frame's bytes take, not the gigabytes its containers took before (a
16 MiB remark of empty arrays: +2.3 GiB)."""

from __future__ import annotations

import pytest
import trio

from protocol.codes import ResponseCode
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.integration.decode_cost import (
    json_header_frame,
    msgpack_ext_frame,
    msgpack_remark_frame,
    peak_kib,
    probe,
    probe_code,
    reset_peak,
    send_frame,
)

MiB = 1024

# what a daemon may grow by for one 16 MiB frame: the frame (held while it
# arrives, then joined) a few times over, and the allocator's slack
MAX_GROWTH_KIB = 160 * MiB


@pytest.mark.parametrize(("make", "answer"), [
    (msgpack_remark_frame, "remark too large or not a scalar"),
    (msgpack_ext_frame, "ext_fields too large or not a scalar"),
    (json_header_frame, None),
], ids=["msgpack-remark", "msgpack-extFields", "json-header"])
async def test_attack_frame_is_refused_cheaply(cluster: Cluster, make: object,
                                               answer: str | None) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    frame = make()  # type: ignore[operator]
    async with RemotingClient() as rc:
        for daemon, d in (("namesrv", ns), ("broker", broker)):
            assert d.proc is not None
            await probe(rc, d.addr, probe_code(daemon))  # connected, warmed up
            before = reset_peak(d.proc.pid)
            with trio.fail_after(60):
                got = await send_frame(d.port, frame)
            if answer is None:
                assert got is None, got  # closed: nothing in it to answer
            else:
                assert got is not None and got.code == ResponseCode.SYSTEM_ERROR
                assert got.opaque == 1 and answer in (got.remark or "")
            # another client is answered, and the daemon is up
            await probe(rc, d.addr, probe_code(daemon))
            growth = peak_kib(d.proc.pid) - before
            assert growth < MAX_GROWTH_KIB, f"{daemon} peaked {growth // MiB} MiB higher"
            assert d.proc.poll() is None
    log = ns.log_text() + broker.log_text()
    assert ("malformed request answered SYSTEM_ERROR" if answer else
            "undecodable frame, closing connection") in log
