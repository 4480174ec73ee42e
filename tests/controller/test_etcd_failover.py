"""EtcdLeadership and EtcdStateStore against real etcd processes: one leader of
two; a leader whose keep-alives stop (not revoked) steps down, and only then is
the other elected; a deposed leader's save is refused; etcd stopped or killed
gives a bounded error, not a hang; a three-member cluster losing the member a
client talks to."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from controller.etcd import EtcdClient, EtcdUnavailable
from controller.etcd_leadership import EtcdLeadership
from controller.etcd_store import EtcdStateStore
from controller.state_store import StateConflict, StateStoreError, Stored
from tests.controller.etcd_server import EtcdCluster, make_cluster, needs_etcd
from tests.waits import wait_until

pytestmark = needs_etcd

_prefixes = itertools.count()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = make_cluster(tmp_path_factory.mktemp("etcd"), 1)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A member of its own, for tests that stop or kill it."""
    cluster = make_cluster(tmp_path, 1)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def prefix() -> str:
    return f"/test/failover/{next(_prefixes)}"


class CuttableClient(EtcdClient):
    """A real client whose keep-alives can be cut (they hang for their timeout,
    then fail), as if this process alone lost etcd; the lease is not revoked."""

    cut_keepalives = False
    keepalives = 0

    async def keepalive(self, lease_id: int, timeout: float | None = None) -> int:
        if self.cut_keepalives:
            await trio.sleep(self.timeout if timeout is None else timeout)
            raise EtcdUnavailable("keep-alive cut by the test")
        ttl = await super().keepalive(lease_id, timeout)
        self.keepalives += 1
        return ttl


@dataclass
class Events:
    log: list[tuple[float, str, str]] = field(default_factory=list)

    def callbacks(self, name: str):  # type: ignore[no-untyped-def]
        async def on_elected() -> None:
            self.log.append((trio.current_time(), name, "elected"))

        async def on_lost() -> None:
            self.log.append((trio.current_time(), name, "lost"))

        return on_elected, on_lost

    def at(self, name: str, what: str) -> list[float]:
        return [t for t, n, w in self.log if n == name and w == what]


async def test_one_of_two_leads_and_a_cut_leader_steps_down_first(
        etcd: EtcdCluster, prefix: str) -> None:
    events = Events()
    ca, cb = CuttableClient(etcd.endpoints), CuttableClient(etcd.endpoints)
    a = EtcdLeadership(ca, "a:9878", prefix, ttl=2)
    b = EtcdLeadership(cb, "b:9878", prefix, ttl=2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.run, *events.callbacks("a"))
        await wait_until(lambda: a.is_leader, 10, "a leads")
        nursery.start_soon(b.run, *events.callbacks("b"))
        # a keeps its lease through several keep-alives while b campaigns
        await wait_until(lambda: ca.keepalives >= 3, 10, "three keep-alives of a")
        assert a.is_leader and not b.is_leader
        assert await b.current_leader() == b"a:9878"

        ca.cut_keepalives = True
        cut = trio.current_time()
        # on_elected runs just after is_leader turns true: wait for the event itself
        await wait_until(lambda: events.at("b", "elected"), 10, "b elected once a's lease expired")
        assert not a.is_leader
        lost, elected = events.at("a", "lost")[0], events.at("b", "elected")[0]
        assert lost < elected
        # a stepped down within TTL - margin (plus scheduling slack on a busy machine)
        assert lost - cut <= 2 - a.margin + 0.5
        assert await a.current_leader() == b"b:9878"

        # a's keep-alives back: b keeps leading, a campaigns
        ca.cut_keepalives = False
        kept = cb.keepalives
        await wait_until(lambda: cb.keepalives >= kept + 3, 10, "b keeps its lease")
        assert b.is_leader and not a.is_leader
        nursery.cancel_scope.cancel()
    # both cancelled: the leader's lease revoked, so nobody leads
    assert await EtcdLeadership(EtcdClient(etcd.endpoints), "c", prefix).current_leader() is None


async def test_deposed_leader_save_is_refused(etcd: EtcdCluster, prefix: str) -> None:
    ca, cb = CuttableClient(etcd.endpoints), CuttableClient(etcd.endpoints)
    a = EtcdLeadership(ca, "a", prefix, ttl=2)
    b = EtcdLeadership(cb, "b", prefix, ttl=2)
    store_a = EtcdStateStore(ca, prefix, fence=a)
    store_b = EtcdStateStore(cb, prefix, fence=b)
    events = Events()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.run, *events.callbacks("a"))
        await wait_until(lambda: a.is_leader, 10, "a leads")
        nursery.start_soon(b.run, *events.callbacks("b"))
        v1 = await store_a.save(b"by a", 0)
        with pytest.raises(StateConflict, match="does not lead"):
            await store_b.save(b"by b, not leading", v1)
        old_lease = a.lease_id
        assert old_lease is not None

        ca.cut_keepalives = True
        await wait_until(lambda: b.is_leader, 10, "b elected")
        with pytest.raises(StateConflict, match="does not lead"):
            await store_a.save(b"by a, deposed", v1)

        # a's save with the lease it led by, as if it had not noticed: etcd refuses it
        @dataclass
        class Stale:
            key: bytes
            lease_id: int | None

        stale = EtcdStateStore(ca, prefix, fence=Stale(a.key, old_lease))
        with pytest.raises(StateConflict, match="no longer leads .* held by b'b'"):
            await stale.save(b"by a, stale", v1)
        v2 = await store_b.save(b"by b", v1)
        assert await store_a.load() == Stored(b"by b", v2)
        nursery.cancel_scope.cancel()


async def test_etcd_stopped_then_killed_gives_bounded_errors(own_etcd: EtcdCluster,
                                                             prefix: str) -> None:
    member = own_etcd.members[0]
    client = EtcdClient(own_etcd.endpoints, timeout=1.0)
    lead = EtcdLeadership(client, "a", prefix, ttl=2)
    store = EtcdStateStore(client, prefix, fence=lead)
    events = Events()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lead.run, *events.callbacks("a"))
        await wait_until(lambda: lead.is_leader, 10, "a leads")
        version = await store.save(b"s", 0)

        member.pause()  # SIGSTOP: connections are accepted, nothing answers
        stopped = trio.current_time()
        start = trio.current_time()
        with pytest.raises(StateStoreError, match="no answer within"):
            await store.load()
        assert trio.current_time() - start <= 1.0 + 0.5
        await wait_until(lambda: events.at("a", "lost"), 10, "a lost its leadership")
        assert events.at("a", "lost")[0] - stopped <= 2 - lead.margin + 0.5
        with pytest.raises(StateConflict, match="does not lead"):
            await store.save(b"t", version)

        member.kill()  # and gone: connections refused
        start = trio.current_time()
        with pytest.raises(StateStoreError, match="no endpoint answered"):
            await store.load()
        assert trio.current_time() - start <= 1.0 + 0.5
        nursery.cancel_scope.cancel()


async def test_leader_back_after_etcd_resumes(own_etcd: EtcdCluster, prefix: str) -> None:
    member = own_etcd.members[0]
    client = EtcdClient(own_etcd.endpoints, timeout=0.5)
    lead = EtcdLeadership(client, "a", prefix, ttl=2)
    events = Events()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lead.run, *events.callbacks("a"))
        await wait_until(lambda: lead.is_leader, 10, "a leads")
        member.pause()
        await wait_until(lambda: events.at("a", "lost"), 10, "a lost")
        member.resume()
        await wait_until(lambda: lead.is_leader, 15, "a leads again after etcd resumed")
        assert lead.terms == 2
        nursery.cancel_scope.cancel()


async def test_three_members_one_killed(tmp_path: Path, prefix: str) -> None:
    cluster = make_cluster(tmp_path, 3)
    try:
        cluster.start()
        client = EtcdClient(cluster.endpoints, timeout=2.0)
        lead = EtcdLeadership(client, "a", prefix, ttl=5)
        store = EtcdStateStore(client, prefix, fence=lead)
        events = Events()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lead.run, *events.callbacks("a"))
            await wait_until(lambda: lead.is_leader, 10, "a leads")
            v1 = await store.save(b"one", 0)
            # the member the client talks to first dies: calls go on to the others
            cluster.members[0].kill()
            v2 = await wait_until(lambda: _try_save(store, b"two", v1), 15,
                                  "a save through the remaining members")
            assert await store.load() == Stored(b"two", v2)
            assert lead.is_leader
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop()


async def _try_save(store: EtcdStateStore, data: bytes, expected: int) -> int | None:
    """One save; None when etcd could not take it yet (its members electing)."""
    try:
        return await store.save(data, expected)
    except StateConflict:
        # an earlier attempt whose answer was lost may have been applied
        stored = await store.load()
        return stored.version if stored is not None and stored.data == data else None
    except StateStoreError:
        return None
