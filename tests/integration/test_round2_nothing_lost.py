"""Issue 48: the second hardening round's attacks lose nothing.

One broker and name server (``hostile.Guard``, ``RTSeed`` seeded), then, one
after another: the hostile 16 MiB frames of docs/security/decoding-limits.md
against both daemons, a flood of bogus hellos and of connections that never
read on the HA port, hundreds of idle connections from other loopback
addresses, and offsets committed for a flood of fresh groups. Afterwards the
daemons serve, the seeded messages read back exactly once, nothing outside the
store changed, and the same holds after an orderly restart and after kill -9.
"""

from __future__ import annotations

import trio

from broker.store.ha.transfer import GREETING
from client.admin import MQAdmin
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import UpdateConsumerOffsetRequestHeader
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.integration.decode_cost import FRAMES, framed, send_frame
from tests.integration.hostile import SEED_TOPIC, TIMEOUT, Guard
from tests.integration.test_hostile_requests import make_guard
from tests.waits import routed, wait_until

HA_HELLOS = 500  # bogus hellos, each on a connection of its own
HA_SILENT = 100  # HA connections that never read
IDLE = 300  # idle connections to the broker's port, from 127.0.0.2 on
GROUPS = 500  # fresh groups committing an offset


async def _frames(guard: Guard) -> list[str]:
    """Each hostile frame to each daemon; what each answered."""
    seen = []
    for name, make in FRAMES.items():
        frame = framed(make())
        for daemon in (guard.ns, guard.broker):
            answer = await send_frame(daemon.port, frame)
            seen.append(f"{name}@{daemon.name}: "
                        f"{'closed' if answer is None else answer.code}")
            assert answer is None or answer.code != ResponseCode.SUCCESS, seen[-1]
    return seen


async def _ha_flood(ns: str, broker: str, port: int) -> None:
    """Bogus hellos on connections of their own, then connections that never
    read held open together (until the master counts them), then all closed."""
    for i in range(HA_HELLOS):
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            continue  # refused past the bound: what the bound is for
        async with stream:
            try:
                await stream.send_all(GREETING + i.to_bytes(4, "big") * 8)
            except trio.BrokenResourceError:
                pass
    held = []
    try:
        for _ in range(HA_SILENT):
            try:
                held.append(await trio.open_tcp_stream("127.0.0.1", port))
            except OSError:
                pass
        async with MQAdmin(ns) as admin:
            async def master_holds_them() -> bool:
                ha = (await admin.broker_runtime_info(broker))["ha"]
                return bool(ha.get("connections"))
            await wait_until(master_holds_them, TIMEOUT, "the master holds the silent connections")
    finally:
        for s in held:
            await s.aclose()


async def _idle(port: int) -> None:
    socks = []
    try:
        for i in range(IDLE):
            s = trio.socket.socket()
            await s.bind((f"127.0.0.{2 + i % 200}", 0))
            try:
                await s.connect(("127.0.0.1", port))
            except OSError:
                s.close()
                continue  # refused by maxConnectionsPerAddress: fine
            socks.append(s)
        # a well-behaved request is served while they are open
        async with RemotingClient() as rc:
            r = await rc.invoke(f"127.0.0.1:{port}", RemotingCommand.request(
                RequestCode.GET_BROKER_RUNTIME_INFO), TIMEOUT)
            assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        for s in socks:
            s.close()


async def _offsets(addr: str) -> None:
    async with RemotingClient() as rc:
        for i in range(GROUPS):
            h = UpdateConsumerOffsetRequestHeader(consumer_group=f"RT2Flood{i}",
                                                  topic=SEED_TOPIC, queue_id=0,
                                                  commit_offset=i % 5)
            await rc.invoke(addr, RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET, h.to_fields()), TIMEOUT)


async def test_round_two_attacks_lose_nothing(cluster: Cluster) -> None:
    guard = await make_guard(cluster)
    with trio.fail_after(240):
        answered = await _frames(guard)
        assert len(answered) == 2 * len(FRAMES)
        # haListenPort: listenPort + 1
        await _ha_flood(guard.ns.addr, guard.broker.addr, guard.broker.port + 1)
        await _idle(guard.broker.port)
        await _offsets(guard.broker.addr)
    await guard.verify(restart=True)  # serving, seed exactly once, before and after a restart
    # and after kill -9
    guard.broker.kill()
    guard.broker.start()
    async with MQAdmin(guard.ns.addr) as admin:
        await wait_until(routed(admin, SEED_TOPIC), TIMEOUT, "RTSeed routed after kill -9")
    await guard.check_seed()
    await guard.served()
    guard.alive()
