"""TimerService over a real store in a tmp dir: enqueue, delivery, checkpoint and
recovery at every crash point; the run loop on trio's MockClock. No sockets."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.message_rewrite import build_inner, to_timer
from broker.store.status import GetMessageStatus
from broker.timer.service import RecallStatus, TimerService
from broker.timer.timer_log import TimerCheckpoint
from protocol.record import decode_record
from tests.broker.store.helpers import make_config, open_store

NOW = 1_700_000_000_000


class Env:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = make_config(root, cl_size=1 << 20, cq_entries=1000)
        self.store = open_store(self.config)
        self.clock_ms = NOW
        self.service = self.new_service()

    def new_service(self) -> TimerService:
        svc = TimerService(self.config, self.store, now_ms=lambda: self.clock_ms)
        svc.load()
        svc.running = True
        return svc

    def restart(self) -> TimerService:
        """A new service on the same files (the old one's memory is gone)."""
        self.service.close()
        self.service = self.new_service()
        return self.service

    def send(self, key: str, due: int, topic: str = "T") -> None:
        props = {"UNIQ_KEY": key, "TIMER_DELIVER_MS": str(due)}
        inner = build_inner(topic, 0, key.encode(), props)
        to_timer(inner, props, due)
        assert self.store.put_message(inner).put_message_status.name == "PUT_OK"

    def delivered(self, topic: str = "T") -> list[str]:
        r = self.store.get_message("check", topic, 0, 0, 10_000, None)
        if r.status is not GetMessageStatus.FOUND:
            return []
        out = []
        for raw in r.buffers:
            msg = decode_record(raw)
            assert "REAL_TOPIC" not in msg.properties and "TIMER_DELIVER_MS" not in msg.properties
            assert msg.properties["UNIQ_KEY"] == msg.body.decode()
            out.append(msg.body.decode())
        return out

    def checkpoint_now(self) -> None:
        svc = self.service
        cp = svc._snapshot()
        svc.log_files.write_checkpoint(cp)
        svc.last_checkpoint = cp


@pytest.fixture
def env(tmp_path: Path) -> Env:
    e = Env(tmp_path)
    yield e
    e.service.close()
    e.store.shutdown()


def test_delivered_at_due_time_with_key_and_real_topic(env: Env) -> None:
    env.send("a", NOW + 1500)
    env.send("b", NOW + 500)
    env.send("c", NOW - 10_000)  # past: due at once
    assert env.service.enqueue() == 3 and env.service.wheel.pending == 3
    assert env.service.deliver(NOW) == 1 and env.delivered() == ["c"]
    assert env.service.deliver(NOW + 999) == 0  # b's slot is NOW + 1000: never early
    assert env.service.deliver(NOW + 1000) == 1 and env.delivered() == ["c", "b"]
    assert env.service.deliver(NOW + 2000) == 1 and env.delivered() == ["c", "b", "a"]
    status = env.service.status()
    assert status["timerDeliveredCount"] == "3" and status["timerPendingCount"] == "0"
    assert int(status["timerLatenessMaxMs"]) == 10_000  # c was 10 s late when sent


@pytest.mark.parametrize("crash_at", ["before-checkpoint", "after-checkpoint",
                                      "mid-slot", "clean"])
def test_recovery_loses_nothing_and_repeats_at_most_the_unsaved(env: Env, crash_at: str) -> None:
    keys = [f"m{i}" for i in range(30)]
    for i, key in enumerate(keys):
        env.send(key, NOW + 1000 + (i % 3) * 1000)  # 10 per slot
    svc = env.service
    while svc.enqueue(7):
        pass
    if crash_at != "before-checkpoint":
        env.checkpoint_now()
    svc.deliver(NOW + 1000, limit=4)  # 4 of slot 1
    if crash_at in ("mid-slot", "clean"):
        env.checkpoint_now()
    svc.deliver(NOW + 1000, limit=3)  # 3 more, never checkpointed unless clean
    if crash_at == "clean":
        env.checkpoint_now()
    before = env.delivered()
    assert len(before) == 7
    svc = env.restart()
    while svc.enqueue():
        pass
    svc.deliver(NOW + 10_000, limit=1000)
    after = env.delivered()
    assert set(after) == set(keys)  # nothing lost
    repeats = len(after) - len(keys)
    expected = {"before-checkpoint": 7, "after-checkpoint": 7, "mid-slot": 3, "clean": 0}
    assert repeats == expected[crash_at]


def test_torn_log_tail_past_the_checkpoint_is_rebuilt(env: Env) -> None:
    for i in range(5):
        env.send(f"k{i}", NOW + 1000)
    svc = env.service
    svc.enqueue(2)
    env.checkpoint_now()
    svc.enqueue()  # 3 more records, not counted by any checkpoint
    svc.log_files.sync()
    seg = next((env.root / "timer" / "log").iterdir())
    with seg.open("ab") as f:
        f.write(b"\x01" * 13)  # a torn record
    svc = env.restart()
    assert svc.log_files.records == 2 and svc.wheel.pending == 2
    while svc.enqueue():
        pass
    svc.deliver(NOW + 1000)
    assert sorted(env.delivered()) == [f"k{i}" for i in range(5)]


def test_bad_checkpoint_refuses_to_load(env: Env) -> None:
    (env.root / "timer" / "checkpoint.json").write_text('{"cqOffset": -1}')
    with pytest.raises(ValueError, match="not a timer checkpoint"):
        env.service.log_files.load()
    assert TimerCheckpoint.decode(TimerCheckpoint(1, 2, 3, 4).encode()) == TimerCheckpoint(1, 2,
                                                                                          3, 4)


def test_recall_by_key_survives_restart(env: Env) -> None:
    env.send("keep", NOW + 1000)
    env.send("gone", NOW + 1000)
    svc = env.service
    assert svc.recall("gone").status == RecallStatus.OK  # enqueues what was sent first
    again = svc.recall("gone")
    assert again.status == RecallStatus.NOT_FOUND and "no pending timer message" in again.remark
    assert svc.recall("never-sent").status == RecallStatus.NOT_FOUND
    svc = env.restart()  # no checkpoint: the marker comes back from the timer topic
    while svc.enqueue():
        pass
    svc.deliver(NOW + 1000)
    assert env.delivered() == ["keep"] and svc.wheel.recalled_skipped == 1
    assert svc.recall("keep").status == RecallStatus.NOT_FOUND  # delivered already


def test_segments_behind_the_cursor_are_deleted(env: Env) -> None:
    svc = env.service
    svc.log_files.segment_records = 4
    for i in range(10):
        env.send(f"s{i}", NOW + 1000 * (1 + i))
    while svc.enqueue():
        pass
    assert len(list((env.root / "timer" / "log").iterdir())) == 3
    svc.deliver(NOW + 9000, limit=100)
    env.checkpoint_now()
    for path in svc.log_files.deletable(svc.last_checkpoint.done_slot):
        path.unlink()
    assert len(list((env.root / "timer" / "log").iterdir())) == 1  # the last: written to
    svc = env.restart()
    svc.deliver(NOW + 20_000)
    assert len(env.delivered()) == 10


async def test_run_loop_delivers_on_time_on_a_mock_clock(
        tmp_path: Path, autojump_clock: trio.testing.MockClock, no_threads: None) -> None:
    e = Env(tmp_path)
    try:
        e.service.now_ms = lambda: NOW + int(trio.current_time() * 1000)
        for i in range(3):
            e.send(f"r{i}", NOW + 2500 + i * 1000)
        async with trio.open_nursery() as nursery:
            await nursery.start(e.service.run)
            await trio.sleep(2.9)
            assert e.delivered() == []  # r0's slot is NOW + 3000
            await trio.sleep(0.2)
            assert e.delivered() == ["r0"]
            await trio.sleep(2.0)
            assert e.delivered() == ["r0", "r1", "r2"]
            nursery.cancel_scope.cancel()
        assert e.service.last_checkpoint.cq_offset == 3  # shutdown checkpoint
        assert e.service.lateness_max_ms <= 600
    finally:
        e.service.close()
        e.store.shutdown()


def test_recall_refuses_while_a_burst_is_not_in_the_wheel(env: Env,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import broker.timer.service as service_module
    monkeypatch.setattr(service_module, "ENQUEUE_BATCH", 1)
    monkeypatch.setattr(service_module, "RECALL_ENQUEUE_STEPS", 2)
    for i in range(40):
        env.send(f"b{i}", NOW + 1000)
    out = env.service.recall("b39")
    assert out.status == RecallStatus.BUSY and "try again" in out.remark
    while env.service.enqueue():
        pass
    assert env.service.recall("b39").status == RecallStatus.OK


def test_recall_handle_checks_topic_and_broker(env: Env) -> None:
    from protocol.recall_handle import build_handle, parse_handle
    env.send("h", NOW + 1000)
    broker = env.config.broker_name
    assert env.service.recall_handle("T", "%%%").status == RecallStatus.ILLEGAL
    assert "topic" in env.service.recall_handle("U", build_handle("T", broker, NOW, "h")).remark
    assert "broker" in env.service.recall_handle("T", build_handle("T", "other", NOW, "h")).remark
    assert env.service.recall_handle("T", build_handle("T", broker, NOW + 1000, "h")).status \
        == RecallStatus.OK
    import base64

    def raw(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    assert parse_handle(raw(f"v1 T {broker} 5 h")).timestamp_ms == 5  # padding is optional
    with pytest.raises(ValueError, match="not a number"):
        parse_handle(raw(f"v1 T {broker} -5 h"))
    with pytest.raises(ValueError, match="v1 topic"):
        parse_handle(raw("v2 T b 5 h"))
    with pytest.raises(ValueError, match="1..1024"):
        parse_handle("A" * 2000)
    env.service.running = False
    assert env.service.recall("h").status == RecallStatus.OFF


def test_a_checkpoint_waits_for_the_commit_log_flush(env: Env) -> None:
    """A staged checkpoint is written only once the commit log is flushed past
    the messages it covers: a power loss never leaves it ahead of the log."""
    svc = env.service
    flushed = [0]
    svc.flushed_offset = lambda: flushed[0]  # type: ignore[method-assign]
    env.send("f", NOW + 1000)
    svc.enqueue()
    assert svc.stage() is None  # staged now, for the next round
    assert svc.stage() is None  # not flushed yet: still waiting
    flushed[0] = env.store.get_max_phy_offset()
    ready = svc.stage()
    assert ready is not None and ready.cq_offset == 1 and ready.records == 1


def test_one_bad_message_among_due_ones_is_dropped_alone(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Due messages go in one append; when the store refuses it for one message,
    they go one by one and only that one is dropped."""
    from broker.store import PutMessageResult
    from broker.store.status import PutMessageStatus
    for key in ("a", "bad", "c"):
        env.send(key, NOW + 1000)
    real_put, real_together = env.store.put_message, env.store.put_together
    calls = []

    def put_message(inner: Any) -> Any:
        if inner.body == b"bad":
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        return real_put(inner)

    def put_together(inners: list[Any]) -> Any:
        calls.append(len(inners))
        if any(i.body == b"bad" for i in inners):
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL), []
        return real_together(inners)

    monkeypatch.setattr(env.store, "put_message", put_message)
    monkeypatch.setattr(env.store, "put_together", put_together)
    svc = env.service
    while svc.enqueue():
        pass
    svc.deliver(NOW + 1000)
    assert calls == [3] and env.delivered() == ["a", "c"] and svc.dropped == 1
    assert svc.delivered == 2


async def test_a_promoted_slave_skips_what_its_old_master_delivered(
        env: Env, no_threads: None) -> None:
    """The old master delivered the first slots and checkpointed; a broker with
    the same timer topic but no timer state of its own (a slave) copied that
    checkpoint. Promoted, it delivers only what was due from ``margin`` before
    the checkpoint's cursor on: nothing lost, the old deliveries not repeated."""
    import time
    wall = int(time.time() * 1000)  # store times are wall-clock: due times near them
    for i in range(10):
        env.send(f"p{i}", wall + 10_000 + i * 10_000)  # due in 10 s .. 100 s
    master = env.service
    while master.enqueue():
        pass
    master.deliver(wall + 55_000)  # p0..p4 delivered by the old master
    env.checkpoint_now()
    cp = master.last_checkpoint
    master.close()
    shutil.rmtree(env.root / "timer")  # the slave has a store, no timer state
    slave = env.new_service()
    await slave.follow_master(cp)
    env.service = promoted = env.new_service()  # restarted later: the copy is on disk
    slave.close()
    assert promoted.master_checkpoint == cp
    promoted.start_following(margin_ms=10_000)
    while promoted.enqueue():
        pass
    promoted.deliver(wall + 200_000)
    delivered = env.delivered()
    assert sorted(set(delivered)) == [f"p{i}" for i in range(10)]  # nothing lost
    again = [k for k in delivered if delivered.count(k) > 1]
    assert sorted(set(again)) == ["p4"]  # within the margin of the cursor: once more
    assert promoted.skipped_as_delivered == 4


def test_every_recall_status_has_a_code_on_each_transport() -> None:
    from broker.grpc.recall import RECALL_CODES
    from broker.timer.recall_processor import RECALL_STATUS_TO_CODE
    assert set(RECALL_STATUS_TO_CODE) == set(RECALL_CODES) == set(RecallStatus)
