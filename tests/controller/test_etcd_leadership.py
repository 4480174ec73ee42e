"""EtcdLeadership's timing without etcd: LeaseTerm and Backoff alone, then whole
campaigns against an in-memory etcd (tests/controller/fake_etcd.py) on trio's
MockClock: one leader at a time, a cut-off leader steps down before another is
elected, a cancelled one frees the key at once."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing

from controller.etcd import Put
from controller.etcd_leadership import Backoff, EtcdLeadership, LeaseTerm, default_margin
from controller.etcd_store import EtcdStateStore, leader_key
from controller.state_store import StateConflict
from tests.controller.fake_etcd import FakeClient, FakeEtcd
from tests.waits import wait_until

PREFIX = "/test/lead"


# --- pure ---------------------------------------------------------------------------------

def test_backoff_grows_to_its_maximum_and_resets() -> None:
    b = Backoff(0.1, 1.0)
    assert [b.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.next() == 0.1


def test_backoff_jitter_only_shortens_within_its_fraction() -> None:
    b = Backoff(1.0, 1.0, jitter=0.25, rng=random.Random(7))
    waits = [b.next() for _ in range(200)]
    assert all(0.75 <= w <= 1.0 for w in waits)
    assert len(set(waits)) > 100  # not all the same
    with pytest.raises(ValueError):
        Backoff(0.0, 1.0)
    with pytest.raises(ValueError):
        Backoff(2.0, 1.0)
    with pytest.raises(ValueError):
        Backoff(0.1, 1.0, jitter=1.0)


def test_lease_term_deadline_counts_from_the_last_renewal_sent() -> None:
    term = LeaseTerm(7, ttl=3.0, margin=0.6, started_at=100.0)
    assert term.deadline == pytest.approx(102.4)
    assert term.next_keepalive == pytest.approx(101.0)
    assert term.wake_at() == pytest.approx(101.0)
    term.renewed(sent_at=101.0, granted_ttl=3)
    assert term.deadline == pytest.approx(103.4) and term.next_keepalive == pytest.approx(102.0)
    # etcd granting more than asked does not move the deadline further
    term.renewed(sent_at=102.0, granted_ttl=10)
    assert term.deadline == pytest.approx(104.4)
    # an answer to an older keep-alive arriving late never moves the deadline back
    term.renewed(sent_at=101.5, granted_ttl=3)
    assert term.deadline == pytest.approx(104.4)
    assert not term.expired(104.39) and term.expired(104.4)


def test_lease_term_failed_keepalive_retries_soon_but_not_past_the_deadline() -> None:
    term = LeaseTerm(7, ttl=3.0, margin=0.6, started_at=0.0)
    term.failed(1.0)
    assert term.next_keepalive == pytest.approx(1.3)
    term.failed(2.35)
    assert term.next_keepalive == pytest.approx(2.4) == term.deadline
    with pytest.raises(ValueError):
        term.renewed(2.0, 0)


def test_lease_term_margin_must_leave_room() -> None:
    with pytest.raises(ValueError):
        LeaseTerm(1, ttl=3.0, margin=2.0, started_at=0.0)
    with pytest.raises(ValueError):
        LeaseTerm(1, ttl=3.0, margin=0.0, started_at=0.0)
    assert default_margin(3) == 0.6 and default_margin(2) == 0.5 and default_margin(10) == 2.0


def test_leadership_refuses_bad_settings() -> None:
    client = FakeClient(FakeEtcd())
    with pytest.raises(ValueError):
        EtcdLeadership(client, "a", ttl=1)
    with pytest.raises(ValueError):
        EtcdLeadership(client, "")
    with pytest.raises(ValueError):
        EtcdLeadership(client, "a", ttl=3, margin=2.5)


# --- against the in-memory etcd, on MockClock --------------------------------------------

@dataclass
class Recorder:
    """Every candidate's elections and losses, in order, with the virtual time."""

    candidates: list[EtcdLeadership] = field(default_factory=list)
    events: list[tuple[float, str, str]] = field(default_factory=list)
    one_at_a_time: bool = True  # assert it at each election

    def callbacks(self, name: str, lead: EtcdLeadership):  # type: ignore[no-untyped-def]
        self.candidates.append(lead)

        async def on_elected() -> None:
            # the invariant: nobody else believes it leads when one is elected
            others = [c.identity for c in self.candidates if c is not lead and c.is_leader]
            assert not (self.one_at_a_time and others), f"{name} elected while {others} lead"
            self.events.append((trio.current_time(), name, "elected"))

        async def on_lost() -> None:
            assert not lead.is_leader
            self.events.append((trio.current_time(), name, "lost"))

        return on_elected, on_lost

    def of(self, name: str, what: str) -> list[float]:
        return [t for t, n, w in self.events if n == name and w == what]

    def leaders(self) -> list[bytes]:
        return [c.identity for c in self.candidates if c.is_leader]


async def test_exactly_one_of_two_leads(autojump_clock: trio.testing.MockClock) -> None:
    etcd = FakeEtcd()
    rec = Recorder()
    a = EtcdLeadership(FakeClient(etcd), "a", PREFIX, ttl=3)
    b = EtcdLeadership(FakeClient(etcd), "b", PREFIX, ttl=3)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.run, *rec.callbacks("a", a))
        nursery.start_soon(b.run, *rec.callbacks("b", b))
        await wait_until(rec.leaders, 5, "a leader")
        await trio.sleep(30)  # virtual: many keep-alive rounds
        assert len(rec.leaders()) == 1
        assert [w for _, _, w in rec.events] == ["elected"]
        leader = a if a.is_leader else b
        assert etcd.get(leader_key(PREFIX)).value == leader.identity  # type: ignore[union-attr]
        assert await leader.current_leader() == leader.identity
        nursery.cancel_scope.cancel()
    # cancelled: the lease is revoked, the key gone
    assert etcd.get(leader_key(PREFIX)) is None and not etcd.leases


async def test_cut_off_leader_steps_down_before_the_other_is_elected(
        autojump_clock: trio.testing.MockClock) -> None:
    etcd = FakeEtcd()
    rec = Recorder()
    ca, cb = FakeClient(etcd), FakeClient(etcd)
    a = EtcdLeadership(ca, "a", PREFIX, ttl=3)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.run, *rec.callbacks("a", a))
        await wait_until(lambda: a.is_leader, 5, "a leads")
        b = EtcdLeadership(cb, "b", PREFIX, ttl=3)
        nursery.start_soon(b.run, *rec.callbacks("b", b))
        await trio.sleep(10)
        assert a.is_leader and not b.is_leader

        kept = ca.keepalives
        await wait_until(lambda: ca.keepalives > kept, 5, "one more keep-alive")
        last_ok = trio.current_time()  # the answer came now; it was sent just before
        ca.cut = True
        await wait_until(lambda: rec.of("b", "elected"), 10, "b elected after a's lease expired")
        lost, elected = rec.of("a", "lost")[0], rec.of("b", "elected")[0]
        # a stopped within TTL - margin of its last renewal; the key went only at expiry
        assert lost <= last_ok + 3 - a.margin
        assert lost + a.margin <= elected
        assert elected <= last_ok + 3 + b.poll_max + 0.1

        # a back: it does not lead again while b holds the key
        ca.cut = False
        await trio.sleep(20)
        assert rec.leaders() == [b"b"]
        nursery.cancel_scope.cancel()


async def test_lease_gone_at_etcd_ends_the_term_at_the_next_keepalive(
        autojump_clock: trio.testing.MockClock) -> None:
    etcd = FakeEtcd()
    rec = Recorder()
    a = EtcdLeadership(FakeClient(etcd), "a", PREFIX, ttl=3)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.run, *rec.callbacks("a", a))
        await wait_until(lambda: a.is_leader, 5, "a leads")
        first = a.lease_id
        assert first is not None
        etcd.revoke(first)  # say an operator revoked it
        gone = trio.current_time()
        await wait_until(lambda: rec.of("a", "lost"), 5, "a lost")
        assert rec.of("a", "lost")[0] <= gone + a.ttl / 3 + 0.1
        # and it campaigns again: the key is free, so it leads on a new lease
        await wait_until(lambda: a.is_leader, 5, "a leads again")
        assert a.lease_id != first and a.terms == 2
        nursery.cancel_scope.cancel()


async def test_leader_key_deleted_by_hand_ends_the_term(
        autojump_clock: trio.testing.MockClock) -> None:
    # no timing protects against a hand-made delete: b may get in before a notices (the
    # fence refuses a's saves meanwhile); a notices at its next keep-alive
    etcd = FakeEtcd()
    rec = Recorder(one_at_a_time=False)
    ca = FakeClient(etcd)
    a = EtcdLeadership(ca, "a", PREFIX, ttl=3)
    b = EtcdLeadership(FakeClient(etcd), "b", PREFIX, ttl=3)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.run, *rec.callbacks("a", a))
        await wait_until(lambda: a.is_leader, 5, "a leads")
        nursery.start_soon(b.run, *rec.callbacks("b", b))
        await trio.sleep(5)
        del etcd.kvs[leader_key(PREFIX)]  # etcdctl del, the lease still alive
        deleted = trio.current_time()
        assert a.is_leader  # not noticed yet, but its saves are refused
        with pytest.raises(StateConflict, match="held by nobody"):
            await EtcdStateStore(ca, PREFIX, fence=a).save(b"x", 0)  # type: ignore[arg-type]
        await wait_until(lambda: rec.of("a", "lost") and rec.of("b", "elected"), 10,
                         "a lost, b elected")
        assert rec.of("a", "lost")[0] <= deleted + a.ttl / 3 + 0.1
        nursery.cancel_scope.cancel()


async def test_cancelled_leader_frees_the_key_at_once(
        autojump_clock: trio.testing.MockClock) -> None:
    etcd = FakeEtcd()
    rec = Recorder()
    a = EtcdLeadership(FakeClient(etcd), "a", PREFIX, ttl=10)
    b = EtcdLeadership(FakeClient(etcd), "b", PREFIX, ttl=10)
    async with trio.open_nursery() as nursery:
        scope_a = trio.CancelScope()

        async def run_a() -> None:
            with scope_a:
                await a.run(*rec.callbacks("a", a))

        nursery.start_soon(run_a)
        await wait_until(lambda: a.is_leader, 5, "a leads")
        nursery.start_soon(b.run, *rec.callbacks("b", b))
        await trio.sleep(5)
        scope_a.cancel()
        stopped = trio.current_time()
        await wait_until(lambda: rec.of("b", "elected"), 5, "b elected")
        # well before a's 10 s lease would have expired: the revoke freed the key
        assert rec.of("b", "elected")[0] - stopped <= b.poll_max + 0.1
        assert rec.of("a", "lost") == []  # cancelling is not losing
        nursery.cancel_scope.cancel()


async def test_deposed_leader_save_is_refused_even_before_it_notices(
        autojump_clock: trio.testing.MockClock) -> None:
    etcd = FakeEtcd()
    ca = FakeClient(etcd)
    a = EtcdLeadership(ca, "a", PREFIX, ttl=3)
    store_a = EtcdStateStore(ca, PREFIX, fence=a)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.run, trio.lowlevel.checkpoint, trio.lowlevel.checkpoint)
        await wait_until(lambda: a.is_leader, 5, "a leads")
        version = await store_a.save(b"one", 0)
        held = a.lease_id
        assert held is not None
        # the lease goes at etcd (as if it expired there) while a still believes it leads
        etcd.revoke(held)
        b_lease = etcd.grant(30)
        etcd.put(Put(leader_key(PREFIX), b"b", b_lease.id))
        assert a.is_leader
        with pytest.raises(StateConflict, match="no longer leads"):
            await store_a.save(b"two", version)
        assert etcd.get(b"/test/lead/state").value == b"one"  # type: ignore[union-attr]
        nursery.cancel_scope.cancel()


async def test_many_candidates_and_random_cuts_never_two_leaders(
        autojump_clock: trio.testing.MockClock) -> None:
    etcd = FakeEtcd()
    rec = Recorder()
    rng = random.Random(51)
    clients = [FakeClient(etcd, latency=rng.uniform(0.001, 0.05)) for _ in range(4)]
    names = "abcd"
    candidates = [EtcdLeadership(c, n, PREFIX, ttl=2, rng=random.Random(i))
                  for i, (c, n) in enumerate(zip(clients, names, strict=True))]
    async with trio.open_nursery() as nursery:
        for n, lead in zip(names, candidates, strict=True):
            nursery.start_soon(lead.run, *rec.callbacks(n, lead))
        for _ in range(200):
            await trio.sleep(rng.uniform(0.1, 3.0))
            victim = rng.choice(clients)
            victim.cut = not victim.cut
            assert len(rec.leaders()) <= 1
        for c in clients:
            c.cut = False
        await wait_until(lambda: len(rec.leaders()) == 1, 10, "a leader once all are back")
        nursery.cancel_scope.cancel()
    elections = [e for e in rec.events if e[2] == "elected"]
    assert len(elections) >= 5, rec.events  # the cuts did move leadership around
