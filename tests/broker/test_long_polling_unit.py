"""PullRequestHoldService in virtual time, without sockets: a fake consume
queue (its tags codes), a fake retry that counts its calls and held pulls'
waiters that collect their outcomes."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

from broker.long_polling import PullRequestHoldService
from broker.service.pull import PullOutcome, PullRequest, PullStatus
from protocol.hashing import java_string_hash
from tests.broker.fakes import FakeOwner as FakeConn
from tests.broker.test_guarded_service import FakeLog

FOUND, NO_NEW_MSG = PullStatus.FOUND, PullStatus.NO_NEW_MSG


def code(tag: str) -> int:
    return java_string_hash(tag)


class FakeQueue:
    """One consume queue ("T", 0) as the hold service sees it: tags codes by
    offset; ``retry`` stands for the pull processor's re-run of a held pull."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.reads: list[tuple[int, int]] = []  # (offset, count) asked for
        self.retried: list[PullRequest] = []
        self.fail_reads = False

    def read_tags(self, topic: str, queue_id: int, offset: int, count: int) -> Sequence[int]:
        assert (topic, queue_id) == ("T", 0)
        self.reads.append((offset, count))
        if self.fail_reads:
            raise OSError("consume queue unreadable")
        return self.codes[offset:offset + count]

    def retry(self, req: PullRequest, final: bool) -> PullOutcome | None:
        """FOUND when an entry at or past the pull's offset matches its tags."""
        self.retried.append(req)
        offset, tags = req.queue_offset, req.expression or "*"
        wanted = None if tags == "*" else {code(t) for t in tags.split("||")}
        if any(wanted is None or c in wanted for c in self.codes[offset:]):
            return PullOutcome(FOUND)
        return PullOutcome(NO_NEW_MSG) if final else None

    def put(self, svc: PullRequestHoldService, *tags: str) -> None:
        self.codes.extend(code(t) for t in tags)
        svc.notify_message_arriving("T", 0, len(self.codes))


def hold(svc: PullRequestHoldService, q: FakeQueue, conn: FakeConn, tags: str,
         timeout_s: float = 100.0, offset: int | None = None) -> bool:
    at = len(q.codes) if offset is None else offset
    req = PullRequest("g", "T", 0, at, 32, expression=tags)
    codes = None if tags == "*" else {code(t) for t in tags.split("||")}
    return svc.suspend(req, conn.waiter(), timeout_s, tag_codes=codes, max_offset=len(q.codes))


def service(q: FakeQueue, **kw: int) -> PullRequestHoldService:
    svc = PullRequestHoldService(q.retry, "b", read_tags=q.read_tags, **kw)
    svc.guard.log = FakeLog()
    return svc


async def test_timeout_and_arrival(autojump_clock: trio.testing.MockClock) -> None:
    state = {"has_data": False}

    def retry(req: PullRequest, final: bool) -> PullOutcome | None:
        if state["has_data"]:
            return PullOutcome(FOUND)
        return PullOutcome(NO_NEW_MSG) if final else None

    svc = PullRequestHoldService(retry)  # no tags reader: every new entry may match
    conn = FakeConn()
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        start = trio.current_time()
        svc.suspend(PullRequest("g", "T", 0, 5, 32), conn.waiter(), 15)
        svc.suspend(PullRequest("g", "T", 1, 0, 32), conn.waiter(), 2)
        await trio.sleep(1)
        svc.notify_message_arriving("T", 0, 5)  # not past the held offset: keep holding
        assert conn.sent == []
        await trio.sleep(1.5)  # queue 1's hold expires at 2 s, empty
        assert len(conn.sent) == 1 and conn.sent[0][1].status is NO_NEW_MSG
        assert conn.sent[0][0] - start == 2
        state["has_data"] = True
        svc.notify_message_arriving("T", 0, 6)
        assert len(conn.sent) == 2 and conn.sent[1][1].status is FOUND
        await trio.sleep(20)
        assert len(conn.sent) == 2  # answered once only
        assert svc.held == {}
        nursery.cancel_scope.cancel()


async def test_only_matching_holds_are_re_run(autojump_clock: trio.testing.MockClock) -> None:
    q = FakeQueue()
    q.codes = [code("Old")] * 10
    svc = service(q)
    conn = FakeConn()
    for _ in range(500):
        assert hold(svc, q, conn, "NoSuch||Nothing")
    tagged, star = FakeConn(), FakeConn()
    assert hold(svc, q, tagged, "TagA||TagB")
    assert hold(svc, q, star, "*")
    reads = len(q.reads)
    for _ in range(50):
        q.put(svc, "Other")
    # the wildcard hold was re-run once (and answered); no other hold was re-run
    assert len(q.retried) == 1 and star.statuses() == [FOUND]
    # one read per notification of just the new entries, not one per hold
    assert q.reads[reads:] == [(i, 1) for i in range(10, 60)]
    q.put(svc, "TagB")
    assert len(q.retried) == 2 and tagged.statuses() == [FOUND]
    assert conn.sent == [] and svc.index.total == 500 and svc.retries == 2


async def test_a_hold_ignores_entries_before_its_offset(
        autojump_clock: trio.testing.MockClock) -> None:
    q = FakeQueue()
    q.codes = [code("TagA")] * 3
    svc = service(q)
    conn = FakeConn()
    assert hold(svc, q, conn, "TagA", offset=5)  # e.g. a slave not there yet
    q.put(svc, "TagA", "TagA")  # offsets 3 and 4
    assert q.retried == [] and conn.sent == []
    q.put(svc, "TagA")  # offset 5
    assert len(q.retried) == 1 and conn.sent[0][1].status is FOUND


async def test_many_new_entries_are_read_in_capped_steps(
        autojump_clock: trio.testing.MockClock) -> None:
    q = FakeQueue()
    svc = service(q, max_entries_per_step=10)
    conn = FakeConn()
    assert hold(svc, q, conn, "TagA")
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        q.put(svc, *["Other"] * 34, "TagA")  # one notification for 35 entries (a batch)
        assert q.reads == [(0, 10)] and conn.sent == []  # the dispatcher read 10
        await trio.testing.wait_all_tasks_blocked()  # the task reads the rest, 10 at a time
        assert q.reads == [(0, 10), (10, 10), (20, 10), (30, 5)]
        assert conn.statuses() == [FOUND]
        assert len(q.retried) == 1 and svc.held == {}
        nursery.cancel_scope.cancel()


async def test_unreadable_entries_wake_every_hold(autojump_clock: trio.testing.MockClock) -> None:
    q = FakeQueue()
    svc = service(q)
    conns = [FakeConn() for _ in range(3)]
    for c in conns:
        assert hold(svc, q, c, "NoSuch")
    q.fail_reads = True
    q.put(svc, "Other")  # the dispatcher's call does not raise
    assert len(q.retried) == 3 and svc.index.total == 3  # re-run, still nothing for them
    q.put(svc, "Other")
    log = svc.guard.log
    assert isinstance(log, FakeLog)
    assert [line[1] for line in log.lines] == ["reading consume-queue tags failed"]  # once


async def test_bounds_answer_at_once_and_closed_connections_free_their_places(
        autojump_clock: trio.testing.MockClock) -> None:
    q = FakeQueue()
    svc = service(q, max_held=5, max_held_per_connection=3)
    one, two, three = FakeConn(), FakeConn(), FakeConn()
    assert [hold(svc, q, one, "NoSuch") for _ in range(4)] == [True, True, True, False]
    assert [hold(svc, q, two, "NoSuch") for _ in range(3)] == [True, True, False]
    assert not hold(svc, q, three, "*")  # 5 held in all
    assert svc.refused == 3 and svc.index.total == 5
    log = svc.guard.log
    assert isinstance(log, FakeLog)
    assert [(lvl, kw["bound"]) for lvl, _, kw in log.lines] == [
        ("warning", "maxHeldPullsPerConnection"), ("warning", "maxHeldPulls")]  # rate-limited
    closed_conn = FakeConn()
    svc.connection_closed(one)
    assert svc.index.total == 2 and hold(svc, q, three, "*")
    closed_conn.closed = True
    assert not hold(svc, q, closed_conn, "*")  # a closed connection's pull is not held
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        await trio.sleep(200)  # every deadline passed
        nursery.cancel_scope.cancel()
    assert one.sent == []  # dropped, never answered
    assert two.statuses() == [NO_NEW_MSG] * 2
    assert svc.held == {} and svc.index.total == 0


async def test_a_hold_on_a_closed_connection_is_dropped_without_a_re_run(
        autojump_clock: trio.testing.MockClock) -> None:
    q = FakeQueue()
    svc = service(q)
    gone = FakeConn()
    assert hold(svc, q, gone, "*")
    gone.closed = True  # closed before the server's callback ran
    q.put(svc, "TagA")
    assert q.retried == [] and gone.sent == [] and svc.held == {}


@pytest.mark.parametrize("timeouts", [(2.0, 7.5, 15.0)])
async def test_deadlines_in_virtual_time(autojump_clock: trio.testing.MockClock,
                                         timeouts: tuple[float, ...]) -> None:
    q = FakeQueue()
    svc = service(q)
    conns = [FakeConn() for _ in timeouts]
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        start = trio.current_time()
        for c, t in zip(conns, reversed(timeouts), strict=True):  # latest deadline first
            assert hold(svc, q, c, "NoSuch", timeout_s=t)
        q.put(svc, "Other")  # matches nobody: no early answer
        await trio.sleep(max(timeouts) + 1)
        nursery.cancel_scope.cancel()
    answered = sorted((c.sent[0][0] - start, c.sent[0][1].status) for c in conns)
    assert answered == [(t, NO_NEW_MSG) for t in timeouts]
    assert all(len(c.sent) == 1 for c in conns) and svc.held == {}
