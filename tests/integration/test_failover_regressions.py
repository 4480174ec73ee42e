"""Regressions from RocketMQ's history of controller mode and HA, each against real
processes: a name server, an ``mqcontroller`` and three brokers of one broker name
(SYNC_MASTER, minInSyncReplicas=2, allAckInSyncStateSet=true; helpers of
failover.py). A partition is made with the chaos checker's loopback proxies
(bench/chaos/proxy.py): the isolated broker binds 127.0.0.1 and advertises
127.0.0.2, where proxies of this process forward its remoting and HA ports, and
it reaches the controller through one more; the test itself reaches it directly.

- #7017: an isolated old master never answers SEND_OK for what it cannot get
  acknowledged, while the new master does (the name server keeps the higher
  masterEpoch, #6316, so the other slave finds the new master); healed, the old
  master steps down and truncates what was never acknowledged.
- #6662: the isolated master's confirm offset does not move: its consumers never
  see, nor commit offsets past, what does not survive.
- #7689: the controller and the master killed together: after the new election,
  queue offsets of new messages never collide with offsets consumers already saw.
- #3015: an HA connection reporting an offset past the master's end is closed,
  and its report never acknowledges a send.
- #1464: a broker restarted while the controller is down never registers as
  master with the name server; once the controller is back it takes the role given.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
import trio

from bench.chaos.proxy import Mode, TcpProxy
from broker.pull_processor import FLAG_SUBSCRIPTION
from broker.store.ha.epochs import LogView
from broker.store.ha.transfer import (
    CHALLENGE,
    GREETING,
    AnswerDecoder,
    encode_hello,
    encode_report,
    make_hello,
)
from client.admin import MQAdmin, MQAdminError
from client.admin_controller import ControllerAdmin
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import ReplicasInfo
from protocol.headers import (
    GetMaxOffsetRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from protocol.record import decode_records
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster, Daemon
from tests.integration.failover import (
    BROKER_NAME,
    TOPIC,
    in_sync,
    replica_props,
    replicas_info,
)
from tests.waits import routed, wait_until

HEARTBEAT_MS = 1500
ADVERTISED = "127.0.0.2"  # the isolated broker's advertised host: its proxies listen there
BIND = "127.0.0.1"
RPC_TIMEOUT = 10.0


@dataclass
class Group:
    ns: Daemon
    controller: Daemon
    replicas: list[Daemon]
    rc: RemotingClient
    ctl: ControllerAdmin
    admin: MQAdmin
    # the isolated broker's proxies (remoting, HA, to the controller); empty: none
    proxies: list[TcpProxy] = field(default_factory=list)

    def addr(self, d: Daemon) -> str:
        """The address ``d`` is known by (the controller's, the name server's)."""
        return f"{ADVERTISED}:{d.port}" if self.proxies and d is self.replicas[0] else d.addr

    def by_addr(self, addr: str | None) -> Daemon | None:
        return next((d for d in self.replicas if self.addr(d) == addr), None)

    def everyone(self) -> set[str]:
        return {self.addr(d) for d in self.replicas}

    async def info(self) -> ReplicasInfo | None:
        return await replicas_info(self.ctl, self.controller.addr)

    async def all_in_sync(self, master: Daemon | None = None) -> ReplicasInfo | None:
        info = await self.info()
        if info is None or info.master_address not in self.everyone() \
                or in_sync(info) != self.everyone():
            return None
        if master is not None and info.master_address != self.addr(master):
            return None
        return info

    def partition(self, mode: Mode) -> None:
        for p in self.proxies:
            p.set_mode(mode)

    async def ask(self, d: Daemon, code: int, fields: dict[str, object],
                  body: bytes | None = None) -> RemotingCommand:
        """A request straight to ``d``'s own port (never through a proxy)."""
        return await self.rc.invoke(d.addr, RemotingCommand.request(code, fields, body),
                                    RPC_TIMEOUT)

    async def send(self, d: Daemon, body: bytes) -> RemotingCommand:
        fields = SendMessageRequestHeader(producer_group="regressions", topic=TOPIC,
                                          queue_id=0).to_fields()
        return await self.ask(d, RequestCode.SEND_MESSAGE, fields, body)

    async def max_offset(self, d: Daemon) -> int:
        r = await self.ask(d, RequestCode.GET_MAX_OFFSET,
                           GetMaxOffsetRequestHeader(topic=TOPIC, queue_id=0).to_fields())
        assert r.code == ResponseCode.SUCCESS, r
        return int(r.ext_fields["offset"])

    async def pull_all(self, d: Daemon) -> list[tuple[int, bytes]]:
        """(queue offset, body) of every message ``d`` serves in queue 0."""
        out: list[tuple[int, bytes]] = []
        offset = 0
        for _ in range(10_000):
            fields = PullMessageRequestHeader(consumer_group="regressions-check", topic=TOPIC,
                                              queue_id=0, queue_offset=offset, max_msg_nums=32,
                                              sys_flag=FLAG_SUBSCRIPTION).to_fields()
            r = await self.ask(d, RequestCode.PULL_MESSAGE, fields)
            if r.code != ResponseCode.SUCCESS or not r.body:
                break
            records = decode_records(r.body, verify_crc=True)
            out.extend((m.queue_offset, m.body) for m in records)
            offset = int(r.ext_fields["nextBeginOffset"])
        return out

    async def commit_offset(self, d: Daemon, group: str, offset: int) -> RemotingCommand:
        fields = UpdateConsumerOffsetRequestHeader(consumer_group=group, topic=TOPIC, queue_id=0,
                                                   commit_offset=offset).to_fields()
        return await self.ask(d, RequestCode.UPDATE_CONSUMER_OFFSET, fields)

    async def query_offset(self, d: Daemon, group: str) -> int | None:
        fields = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=TOPIC, queue_id=0,
                                                  set_zero_if_not_found=False).to_fields()
        r = await self.ask(d, RequestCode.QUERY_CONSUMER_OFFSET, fields)
        return int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else None

    async def acked_sends(self, master: Daemon, tag: str, count: int) -> list[bytes]:
        bodies = [f"{tag}-{i}".encode() for i in range(count)]
        for body in bodies:
            r = await self.send(master, body)
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        return bodies


@asynccontextmanager
async def replica_group(cluster: Cluster, isolate_first: bool = False,
                        **extra: object) -> AsyncIterator[Group]:
    """Three replicas in sync, the first of them the master, a topic of one queue on
    every replica. ``isolate_first``: the first one behind proxies (see above)."""
    ns = cluster.namesrv()
    controller = cluster.controller(brokerHeartbeatTimeout=HEARTBEAT_MS,
                                    scanNotActiveBrokerInterval=200)
    props = {**replica_props(controller.addr, HEARTBEAT_MS), **extra}
    async with RemotingClient() as rc, ControllerAdmin() as ctl, MQAdmin(ns.addr) as admin, \
            trio.open_nursery() as nursery:
        proxies: list[TcpProxy] = []
        first_props = dict(props)
        if isolate_first:
            to_ctl = TcpProxy("replica-0->controller", BIND, 0, BIND, controller.port)
            await nursery.start(to_ctl.run)
            first_props.update(brokerIP1=ADVERTISED, bindAddress=BIND,
                               controllerAddr=f"{BIND}:{to_ctl.listen_port}")
        first = cluster.broker("replica-0", ns.addr, start=False, **first_props)
        if isolate_first:
            remoting = TcpProxy("remoting", ADVERTISED, first.port, BIND, first.port)
            ha = TcpProxy("ha", ADVERTISED, first.port + 1, BIND, first.port + 1)
            for p in (remoting, ha):
                await nursery.start(p.run)
            proxies = [remoting, ha, to_ctl]
        await trio.to_thread.run_sync(first.start)
        g = Group(ns, controller, [first], rc, ctl, admin, proxies)

        async def first_is_master() -> ReplicasInfo | None:
            info = await g.info()
            return info if info is not None and info.master_address == g.addr(first) else None

        await wait_until(first_is_master, 60, "the first replica elected master")
        for i in (1, 2):
            d = cluster.broker(f"replica-{i}", ns.addr, start=False, **props)
            await trio.to_thread.run_sync(d.start)
            g.replicas.append(d)
        await wait_until(lambda: g.all_in_sync(first), 60, "all three in the SyncStateSet")
        await admin.create_topic(TOPIC, broker_addr=first.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 20, "topic routed")

        async def everywhere() -> bool:
            for d in g.replicas:
                try:
                    await admin.topic_config(d.addr, TOPIC)
                except MQAdminError:
                    return False
            return True

        await wait_until(everywhere, 30, "the topic on every replica")
        try:
            yield g
        finally:
            g.partition(Mode.PASS)
            nursery.cancel_scope.cancel()


# ---- #3015 -------------------------------------------------------------------------------


async def fake_slave_reports(g: Group, master: Daemon, broker_id: int, offset: int
                             ) -> tuple[RemotingCommand, bool]:
    """A hand-made slave claiming ``broker_id`` (an empty log) reports ``offset`` on
    the master's HA port; then a send to the master while the connection may still
    be open. Returns the send's answer and whether the master closed the connection."""
    stream = await trio.open_tcp_stream(BIND, master.port + 1)
    async with stream:
        await stream.send_all(GREETING)
        got = b""
        while len(got) < CHALLENGE.size:
            data = await stream.receive_some(CHALLENGE.size - len(got))
            assert data, "the master closed before its challenge"
            got += data
        empty = LogView(secrets.token_hex(16), [], 0, 0, None)
        hello = make_hello(BROKER_NAME, "DefaultCluster", int(time.time() * 1000),
                           secrets.token_hex(8), log=empty, broker_id=broker_id,
                           challenge=got[5:].hex(), controller_mode=True)
        await stream.send_all(encode_hello(hello))
        answers = AnswerDecoder()
        answered = None
        with trio.fail_after(RPC_TIMEOUT):
            while answered is None:
                data = await stream.receive_some(65536)
                assert data, "the master closed before its answer"
                answered = answers.feed(data)
        assert answered[0].answer.verdict == "accept", answered[0].answer
        await stream.send_all(encode_report(offset))
        r = await g.send(master, b"unacknowledged-1")
        with trio.move_on_after(RPC_TIMEOUT):
            try:
                while await stream.receive_some(65536):
                    pass  # transfers, heart-beats: the master took the report
            except trio.BrokenResourceError:
                pass
            return r, True
    return r, False


async def test_issue_3015_ha_report_past_the_master_end_is_dropped(cluster: Cluster) -> None:
    # no shrink of the SyncStateSet during the test: the frozen slave stays a member
    async with replica_group(cluster, haMaxTimeSlaveNotCatchup=120_000,
                             syncFlushTimeout=2000) as g:
        master, frozen, _ = g.replicas
        await g.acked_sends(master, "before", 5)
        info = await g.info()
        assert info is not None
        frozen_id = next(r.broker_id for r in info.in_sync_replicas
                         if r.broker_address == frozen.addr)
        frozen.freeze()  # its acknowledgements stop: every send now waits for it
        try:
            r = await g.send(master, b"unacknowledged-0")
            assert r.code != ResponseCode.SUCCESS, "sent with a frozen SyncStateSet member"
            # a fake slave under the frozen one's id reports far past the master's end
            # (the send after its report: the report acknowledged nothing)
            r, closed = await fake_slave_reports(g, master, frozen_id, 1 << 40)
            assert r.code != ResponseCode.SUCCESS, \
                "SEND_OK released by an acknowledgement past the master's end"
            assert closed, "the master kept an HA connection reporting past its end"
            assert "slave log longer than master" in master.log_text()
        finally:
            frozen.thaw()
        # the real slave back: sends are acknowledged again
        async def ok() -> bool:
            return (await g.send(master, b"after")).code == ResponseCode.SUCCESS
        await wait_until(ok, 60, "sends acknowledged once the slave is back")


# ---- #1464 -------------------------------------------------------------------------------


async def test_issue_1464_restart_with_controller_down_never_registers_master(
        cluster: Cluster) -> None:
    async with replica_group(cluster) as g:
        master = g.replicas[0]
        await g.acked_sends(master, "before", 5)
        g.controller.stop()
        master.kill()

        async def listed_master() -> str | None:
            info = await g.admin.cluster_info()
            data = info["brokerAddrTable"].get(BROKER_NAME)
            return None if data is None else data.broker_addrs.get(0)

        # the name server drops the dead master (its connection closed)
        async def unlisted() -> bool:
            return await listed_master() != master.addr

        await wait_until(unlisted, 30, "the killed master unlisted")
        sightings: list[str | None] = []
        fenced_seen = trio.Event()

        async def watch() -> None:
            while True:
                sightings.append(await listed_master())
                await trio.sleep(0.05)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            seen = master.log_text().count("failed; trying again")
            await trio.to_thread.run_sync(master.start)  # "broker started"

            def tried() -> bool:  # or a registration as master already seen
                return master.log_text().count("failed; trying again") > seen \
                    or master.addr in sightings

            await wait_until(tried, 30, "the controller tried and unreachable")
            # a broker registers with the name servers at start: 40 more looks at them
            n = len(sightings)
            await wait_until(lambda: len(sightings) >= n + 40, 30, "40 more looks")
            fenced_seen.set()
            nursery.cancel_scope.cancel()
        assert fenced_seen.is_set()
        assert master.addr not in sightings, \
            f"listed as master (brokerId 0) with the controller down: {set(sightings)}"
        assert "fenced: the controller gives it" in master.log_text()
        r = await g.send(master, b"while fenced")
        assert r.code != ResponseCode.SUCCESS, "a fenced broker took a write"

        # the controller back (same port, same state): the broker takes the role given
        await trio.to_thread.run_sync(g.controller.start)

        async def role_taken() -> str | None:
            info = await g.all_in_sync()
            if info is None:
                return None
            listed = await listed_master()
            return listed if listed == info.master_address else None

        m = await wait_until(role_taken, 90, "the controller's master listed, all in sync")
        new_master = g.by_addr(m)
        assert new_master is not None

        # listed and all in sync (the SyncStateSet may be the stored one) can come
        # before the new master's start wait for its slaves' hellos has ended
        async def writable() -> bool:
            ha = (await g.admin.broker_runtime_info(new_master.addr)).get("ha")
            return isinstance(ha, dict) and ha.get("writable") is True

        await wait_until(writable, 30, "the new master takes writes")
        await g.acked_sends(new_master, "after", 3)



# ---- #7017 and #6662: the old master isolated ----------------------------------------


# Found by these tests: the isolated old master still reaches the name server and kept
# brokerId 0 there (REGISTER_BROKER of the new master was refused: "id 0 is registered
# at ... by another live connection"). A slave learns its master's HA address from its
# registration's answer, so the other slave never connected to the new master, and with
# minInSyncReplicas=2 the new master refused writes until the partition healed. Fixed as
# RocketMQ did (#6316): registrations carry the masterEpoch and the name server keeps the
# higher one, so the new master takes writes during the partition.


@dataclass
class Isolation:
    answers: list[tuple[bytes, int]]  # the isolated old master's answers to direct sends
    new_master: Daemon
    new_epoch: int


async def isolate_until_new_master(g: Group, old_epoch: int, after_election: int = 3
                                   ) -> Isolation:
    """Cut the first replica (the master) off the controller and its slaves, and send
    to it directly until the controller named a new master and ``after_election``
    more sends were answered."""
    g.partition(Mode.DROP)
    old = g.replicas[0]
    slaves = {g.addr(d) for d in g.replicas[1:]}

    async def new_master() -> ReplicasInfo | None:
        info = await g.info()
        if info is not None and info.master_address in slaves \
                and info.master_epoch > old_epoch:
            return info
        return None

    answers: list[tuple[bytes, int]] = []
    seen_at: int | None = None
    info: ReplicasInfo | None = None
    with trio.fail_after(180):
        while seen_at is None or len(answers) < seen_at + after_election:
            body = f"isolated-{len(answers)}".encode()
            answers.append((body, (await g.send(old, body)).code))
            if seen_at is None:
                info = await new_master()
                if info is not None:
                    seen_at = len(answers)
    assert info is not None
    new = g.by_addr(info.master_address)
    assert new is not None
    return Isolation(answers, new, info.master_epoch)


async def send_ok(g: Group, d: Daemon, tag: str, count: int) -> list[bytes]:
    """``count`` sends to ``d`` answered SEND_OK (a refused one is tried again under
    a new body); the bodies acknowledged."""
    acked: list[bytes] = []
    attempt = 0
    with trio.fail_after(90):
        while len(acked) < count:
            body = f"{tag}-{attempt}".encode()
            attempt += 1
            r = await g.send(d, body)
            if r.code == ResponseCode.SUCCESS:
                acked.append(body)
            else:
                await trio.sleep(0.1)
    return acked


async def test_issue_7017_isolated_old_master_never_answers_send_ok(cluster: Cluster) -> None:
    async with replica_group(cluster, isolate_first=True, syncFlushTimeout=2000) as g:
        old = g.replicas[0]
        acked = await g.acked_sends(old, "before", 10)
        info = await g.all_in_sync(old)
        assert info is not None
        iso = await isolate_until_new_master(g, info.master_epoch)
        # two masters now: the isolated one never acknowledges what no slave holds
        assert iso.answers and not [b for b, c in iso.answers if c == ResponseCode.SUCCESS], \
            iso.answers

        # still partitioned: the name server routes to the new master (the higher
        # masterEpoch), the other slave follows it, and it answers SEND_OK
        new_addr = g.addr(iso.new_master)

        async def new_master_routed() -> bool:
            route = await g.admin.topic_route(TOPIC)
            return any(bd.broker_addrs.get(0) == new_addr for bd in route.broker_datas)

        await wait_until(new_master_routed, 60, "the new master routed as brokerId 0")
        acked += await send_ok(g, iso.new_master, "during", 10)
        # and the isolated one, refused by the name server, still acknowledges nothing
        r = await g.send(old, b"isolated-late")
        assert r.code != ResponseCode.SUCCESS, "the isolated old master took a write"

        # healed: the old master steps down, a slave of the new one, in its SyncStateSet
        g.partition(Mode.PASS)
        await wait_until(lambda: g.all_in_sync(iso.new_master), 90,
                         "the old master back in the new master's SyncStateSet")
        acked += await send_ok(g, iso.new_master, "after", 10)
        r = await g.send(old, b"to the old master, healed")
        assert r.code != ResponseCode.SUCCESS, "the old master took a write after the heal"

        # what was never acknowledged is truncated: both serve the same messages,
        # every acknowledged one and none of the isolated ones
        async def same() -> list[tuple[int, bytes]] | None:
            on_new, on_old = await g.pull_all(iso.new_master), await g.pull_all(old)
            return on_new if on_new == on_old and len(on_new) >= len(acked) else None

        served = await wait_until(same, 60, "the old master serving what the new one does")
        bodies = [b for _, b in served]
        assert set(acked) <= set(bodies)
        assert not [b for b in bodies if b.startswith(b"isolated-")], bodies
        assert [o for o, _ in served] == list(range(len(served)))


@pytest.mark.parametrize("fault", ["partition", "stop"])
async def test_issue_51_new_master_takes_writes_soon_after_the_election(
        cluster: Cluster, fault: str) -> None:
    """The master cut off (``partition``: from the controller, its slaves and the
    name server's view of it stays live) or frozen (``stop``: SIGSTOP): the other
    replica learns the new master's HA address from its name-server registration
    answer soon after the election (a slave without its master's HA address asks
    every second; the new master registers as soon as it takes the role), not at
    the next periodic registration (30 s), so the new master has its second
    in-sync replica and answers SEND_OK (minInSyncReplicas=2) well within 15 s."""
    async with replica_group(cluster, isolate_first=True, syncFlushTimeout=2000) as g:
        old = g.replicas[0]
        await g.acked_sends(old, "before", 5)
        info = await g.all_in_sync(old)
        assert info is not None
        slaves = {g.addr(d) for d in g.replicas[1:]}

        async def named() -> ReplicasInfo | None:
            i = await g.info()
            if i is not None and i.master_address in slaves \
                    and i.master_epoch > info.master_epoch:
                return i
            return None

        if fault == "partition":
            g.partition(Mode.DROP)
        else:
            old.freeze()
        try:
            elected = await wait_until(named, 60, "a new master named", interval=0.05)
            named_at = time.monotonic()
            new = g.by_addr(elected.master_address)
            assert new is not None
            sent = 0

            async def took_one() -> bool:
                nonlocal sent
                sent += 1
                r = await g.send(new, f"during-{sent}".encode())
                return r.code == ResponseCode.SUCCESS

            await wait_until(took_one, 15, f"SEND_OK from the new master ({fault})",
                             interval=0.1)
            print(f"{fault}: new master named -> first SEND_OK "
                  f"{time.monotonic() - named_at:.1f} s ({sent} sends)")
        finally:
            if fault == "stop":
                old.thaw()


async def test_issue_6662_isolated_confirm_offset_moves_no_consumer_offset(
        cluster: Cluster) -> None:
    group = "regressions-6662"
    async with replica_group(cluster, isolate_first=True, syncFlushTimeout=2000) as g:
        old = g.replicas[0]
        acked = await g.acked_sends(old, "before", 10)
        info = await g.all_in_sync(old)
        assert info is not None
        # a consumer of the old master reads everything and commits
        seen = await g.pull_all(old)
        assert [b for _, b in seen] == acked
        assert (await g.commit_offset(old, group, len(seen))).code == ResponseCode.SUCCESS

        iso = await isolate_until_new_master(g, info.master_epoch)
        written = [b for b, c in iso.answers if c != ResponseCode.SUCCESS]
        assert written  # in the old master's commit log, never acknowledged
        # its confirm offset did not move: consumers of the isolated master see
        # nothing new, so commit nothing past what survives
        assert await g.max_offset(old) == len(acked)
        assert await g.pull_all(old) == seen
        assert (await g.commit_offset(old, group, len(seen))).code == ResponseCode.SUCCESS

        g.partition(Mode.PASS)
        await wait_until(lambda: g.all_in_sync(iso.new_master), 90,
                         "the old master back in the new master's SyncStateSet")
        # the new master takes writes; the group reads them there and commits
        after = await send_ok(g, iso.new_master, "after", 5)
        on_new = await g.pull_all(iso.new_master)
        assert [b for _, b in on_new] == acked + after
        assert (await g.commit_offset(iso.new_master, group, len(on_new))).code \
            == ResponseCode.SUCCESS
        # the group's offsets are valid on the new master and copied to the old one
        new_max = await g.max_offset(iso.new_master)
        assert await g.query_offset(iso.new_master, group) == len(on_new) <= new_max

        async def copied() -> bool:
            return await g.query_offset(old, group) == len(on_new)

        await wait_until(copied, 60, "the group's offset copied to the old master")
        assert await g.max_offset(old) == new_max


# ---- #7689 -------------------------------------------------------------------------------


async def test_issue_7689_controller_and_master_killed_together_reuse_no_queue_offset(
        cluster: Cluster) -> None:
    async with replica_group(cluster, haMaxTimeSlaveNotCatchup=120_000,
                             syncFlushTimeout=2000) as g:
        master, s1, s2 = g.replicas
        acked = await g.acked_sends(master, "before", 10)
        seen = await g.pull_all(master)  # a consumer saw queue offsets 0..9
        assert [b for _, b in seen] == acked
        # writes past the confirm offset: no slave acknowledges, the master appends them
        # (queue offsets 10.. handed out) and cannot confirm them
        s1.freeze()
        s2.freeze()
        try:
            for i in range(3):
                r = await g.send(master, f"unconfirmed-{i}".encode())
                assert r.code != ResponseCode.SUCCESS, "acknowledged with every slave frozen"
            assert await g.max_offset(master) == len(acked)
            # the controller and the master die together, and are restarted at once;
            # the master is named again (the slaves still frozen, it is the one alive)
            g.controller.kill()
            master.kill()
            await trio.to_thread.run_sync(g.controller.start)
            await trio.to_thread.run_sync(master.start)

            async def named() -> bool:
                info = await g.info()
                return info is not None and info.master_address == master.addr

            await wait_until(named, 90, "the restarted master named again")
        finally:
            s1.thaw()
            s2.thaw()
        # writes go to it as soon as its slaves acknowledge again
        after = await send_ok(g, master, "after", 5)
        info = await wait_until(g.all_in_sync, 90, "all three in sync again")
        m = g.by_addr(info.master_address)
        assert m is not None
        after += await send_ok(g, m, "later", 5)

        # every replica serves the same queue: offsets 0.. once each, the first ten
        # those the consumer saw, every acknowledged message once
        async def agreed() -> list[tuple[int, bytes]] | None:
            served = [await g.pull_all(d) for d in g.replicas]
            ok = all(s == served[0] for s in served) and \
                set(acked + after) <= {b for _, b in served[0]}
            return served[0] if ok else None

        served = await wait_until(agreed, 60, "every replica serving every acknowledged message")
        assert [o for o, _ in served] == list(range(len(served))), served
        assert served[:len(seen)] == seen
        bodies = [b for _, b in served]
        assert len(bodies) == len(set(bodies)), bodies
