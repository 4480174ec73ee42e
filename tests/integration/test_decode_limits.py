"""The frames of the finding against a live name server and broker: each is
refused (a clear error answer, or the connection closed), the daemon
stays up and answers another client, and its peak memory grows by about
what the frame's bytes take, not the gigabytes its containers took before (a
16 MiB remark of empty arrays: +2.3 GiB)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from protocol.codes import ResponseCode
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.integration.decode_cost import (
    json_header_frame,
    json_heartbeat_frame,
    msgpack_ext_frame,
    msgpack_heartbeat_frame,
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


CLOSED = None
NOT_SUPPORTED = "request code 34 not supported"  # a name server takes no heart-beat


@pytest.mark.parametrize(("make", "namesrv_answer", "broker_answer"), [
    (msgpack_remark_frame, "remark too large or not a scalar", "remark too large or not a scalar"),
    (msgpack_ext_frame, "ext_fields value of 'k' too large or not a scalar",
     "ext_fields value of 'k' too large or not a scalar"),
    (json_header_frame, CLOSED, CLOSED),
    (msgpack_heartbeat_frame, NOT_SUPPORTED, "undecodable body"),
    (json_heartbeat_frame, NOT_SUPPORTED, "undecodable body"),
], ids=["msgpack-remark", "msgpack-extFields", "json-header", "msgpack-heartbeat-body",
        "json-heartbeat-body"])
async def test_attack_frame_is_refused_cheaply(cluster: Cluster, make: Callable[[], bytes],
                                               namesrv_answer: str | None,
                                               broker_answer: str | None) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    frame = make()
    async with RemotingClient() as rc:
        for daemon, d, answer in (("namesrv", ns, namesrv_answer),
                                  ("broker", broker, broker_answer)):
            assert d.proc is not None
            await probe(rc, d.addr, probe_code(daemon))  # connected, warmed up
            before = reset_peak(d.proc.pid)
            with trio.fail_after(60):
                got = await send_frame(d.port, frame)
            if answer is None:
                assert got is None, got  # closed: nothing in it to answer
            else:
                assert got is not None and got.code != ResponseCode.SUCCESS
                assert got.opaque == 1 and answer in (got.remark or ""), got
            # another client is answered, and the daemon is up
            await probe(rc, d.addr, probe_code(daemon))
            growth = peak_kib(d.proc.pid) - before
            assert growth < MAX_GROWTH_KIB, f"{daemon} peaked {growth // MiB} MiB higher"
            assert d.proc.poll() is None
    if make in (msgpack_remark_frame, msgpack_ext_frame):
        assert "malformed request answered SYSTEM_ERROR" in ns.log_text() + broker.log_text()
    if make is json_header_frame:
        assert "undecodable frame, closing connection" in ns.log_text() + broker.log_text()
