"""Issue 48, "no byte stream may stall or bloat a daemon before it is trusted": with
aclEnable=true a connection not yet authenticated gets a small read budget, on a live
name server and broker (tests/integration/preauth_cost.py sends the frames and
measures; ``python -m tests.integration.preauth_cost`` prints the figures).

- 20 connections each announcing an unsigned ~16 MiB frame and sending it 1 MiB at a
  time are each refused after their header (NO_PERMISSION, the remark an unsigned
  request gets) and closed: the daemon's peak RSS barely moves (before: +480 MiB);
- 20 connections each sending a signed-looking 4 MiB frame at once hold no more than
  the pre-auth budget (set to 8 MiB here), and each is answered in turn;
- an official-style (RocketMQ JSON header, AclClientRPCHook signature) signed 4 MiB
  SEND_MESSAGE as the first request of a new connection is stored; once it is, the
  connection takes frames past the pre-auth cap and its refusals no longer close it,
  while a new connection whose first frame is past the cap is refused on its header.
"""

from __future__ import annotations

from pathlib import Path

import trio

from acl.plain import SIGNATURE_REFUSED
from client import AclCredentials
from client.admin import MQAdmin
from protocol.acl import sign_fields
from protocol.codecs import ROCKETMQ_JSON
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import SendMessageRequestHeader
from protocol.trio.client import RemotingClient
from protocol.trio.connection import RemotingConnection
from tests.integration.cluster import Cluster, Daemon
from tests.integration.preauth_cost import (
    CONNS,
    KiB,
    MiB,
    attack,
    partial_frames,
    unsigned_frames,
)
from tests.waits import routed, wait_until

TOPIC = "PreAuthTopic"
ADMIN = AclCredentials("rocketmq2", "12345678")
TIMEOUT = 20
ACL = """globalWhiteRemoteAddresses:
  - 10.254.254.254
accounts:
  - accessKey: rocketmq2
    secretKey: '12345678'
    admin: true
"""
BUDGET = 8 * MiB
# What a daemon's peak RSS may grow by. Unsigned 16 MiB frames: a header each, and a
# few reads (before: +480 MiB, each frame read whole). Partial signed-looking 4 MiB
# frames: the 8 MiB budget, the frame of the one completing it, a read per connection
# and that frame's copies while it is checked (measured +21 MiB; before: +125 MiB).
UNSIGNED_GROWTH_KIB = 32 * 1024
PARTIAL_GROWTH_KIB = 40 * 1024


def official_send(body: bytes, opaque_fields: dict[str, str] | None = None) -> RemotingCommand:
    """SEND_MESSAGE as RocketMQ's Java client sends it with AclClientRPCHook: a JSON
    header of text values, signed over the fields and the body, no binding."""
    header = SendMessageRequestHeader(producer_group="PID_preauth", topic=TOPIC, queue_id=0,
                                      born_timestamp=1, properties="WAIT\x01true\x02")
    fields = sign_fields({**header.to_fields(), **(opaque_fields or {})}, body,
                         ADMIN.access_key, ADMIN.secret_key)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body)


async def _closed(conn: RemotingConnection) -> bool:
    return conn.closed


async def refused_unsigned_and_partial(d: Daemon, code: int) -> None:
    assert d.proc is not None
    out = await attack(d.proc.pid, d.port, unsigned_frames(code), MiB)
    assert len(out.sent) == CONNS
    for sent in out.sent:
        assert sent.answer is not None and sent.closed, sent
        assert sent.answer.code == ResponseCode.NO_PERMISSION
        assert sent.answer.remark == "No accessKey is configured", sent.answer.remark
    assert out.rss_growth_kib < UNSIGNED_GROWTH_KIB, f"{d.name} grew {out.rss_growth_kib} KiB"

    out = await attack(d.proc.pid, d.port, partial_frames(code), 64 * KiB)
    assert len(out.sent) == CONNS
    for sent in out.sent:  # read whole (a signature needs its body), then refused
        assert sent.answer is not None, sent
        assert sent.answer.code == ResponseCode.NO_PERMISSION
        assert sent.answer.remark == SIGNATURE_REFUSED
    assert out.rss_growth_kib < PARTIAL_GROWTH_KIB, f"{d.name} grew {out.rss_growth_kib} KiB"
    assert d.proc.poll() is None


async def test_connections_not_yet_authenticated_get_a_small_read_budget(
        cluster: Cluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv(aclEnable="true", aclPlainFile=acl, aclPreAuthReadBudgetBytes=BUDGET)
    # the broker's signed registration is the first request of its connections
    broker = cluster.broker("broker-preauth", ns.addr, brokerAccessKey=ADMIN.access_key,
                            brokerSecretKey=ADMIN.secret_key, aclEnable="true",
                            aclPlainFile=acl, aclPreAuthReadBudgetBytes=BUDGET)
    async with MQAdmin(ns.addr, credentials=ADMIN) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), TIMEOUT, f"a route for {TOPIC}")

    await refused_unsigned_and_partial(ns, RequestCode.GET_ROUTEINFO_BY_TOPIC)
    await refused_unsigned_and_partial(broker, RequestCode.SEND_MESSAGE)

    async with RemotingClient(codec=ROCKETMQ_JSON) as rc:
        # a signed 4 MiB message (maxMessageSize) as the first request: stored
        conn = await rc.get_connection(broker.addr)
        first = await rc.invoke(broker.addr, official_send(b"m" * (4 * MiB)), TIMEOUT)
        assert first.code == ResponseCode.SUCCESS, first.remark
        assert conn.codec is ROCKETMQ_JSON
        # authenticated: a frame past the pre-auth cap is read (and refused by the
        # send's own size check), an unsigned request refused, the connection lives on
        big = await rc.invoke(broker.addr, official_send(b"m" * (5 * MiB)), TIMEOUT)
        assert big.code != ResponseCode.SUCCESS and "4194304" in (big.remark or ""), big
        unsigned = await rc.invoke(broker.addr, RemotingCommand.request(
            RequestCode.GET_BROKER_RUNTIME_INFO), TIMEOUT)
        assert unsigned.code == ResponseCode.NO_PERMISSION
        again = await rc.invoke(broker.addr, official_send(b"m"), TIMEOUT)
        assert again.code == ResponseCode.SUCCESS, again.remark
        assert not conn.closed and await rc.get_connection(broker.addr) is conn

    # a new connection whose first frame is past the pre-auth cap: refused on its header
    async with RemotingClient(codec=ROCKETMQ_JSON) as rc:
        conn = await rc.get_connection(broker.addr)
        big = await rc.invoke(broker.addr, official_send(b"m" * (5 * MiB)), TIMEOUT)
        assert big.code == ResponseCode.SYSTEM_ERROR
        assert "aclPreAuthMaxFrameBytes" in (big.remark or ""), big.remark
        await wait_until(lambda: _closed(conn), TIMEOUT, "the broker closing the connection")

    # the name server: a signed look-up as the first request is answered
    async with RemotingClient(credentials=ADMIN) as rc:
        route = await rc.invoke(ns.addr, RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}), TIMEOUT)
        assert route.code == ResponseCode.SUCCESS, route.remark
    assert "request refused by ACL" in broker.log_text()
    with trio.fail_after(TIMEOUT):  # both daemons still serve
        async with MQAdmin(ns.addr, credentials=ADMIN) as admin:
            await admin.topic_route(TOPIC)
