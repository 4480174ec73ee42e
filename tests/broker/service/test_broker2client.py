"""Broker2ClientService with fakes: an offset reset's rules (which queues, which
offsets, force or only backwards, committed as an admin's reset, the members
told) and the running-info relay's bounds (not online, not reading, too large,
refused, failed, a silent member, MAX_RELAYS in flight)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing

from broker.client_manager import ClientGroups
from broker.service.broker2client import (
    MAX_RELAYED_BODY,
    MAX_RELAYS,
    RELAY_TIMEOUT_S,
    SKIP_ALL,
    Broker2ClientService,
    RelayFailed,
    RelayOutcome,
    RelayStatus,
    RelayTimeout,
    ResetNotice,
    ResetRequest,
    ResetStatus,
    RunningInfoAsk,
    new_offset,
    reset_plan,
)
from broker.service.types import SessionChannel
from protocol.message import MessageQueue
from protocol.route import TopicConfig

T = "ResetTopic"
B = "broker-a"


# ---- the pure rules ----------------------------------------------------------------

@pytest.mark.parametrize(("current", "target", "force", "expected"), [
    (5, 2, False, 2),    # back: always
    (2, 5, False, 2),    # forward without force: stays
    (2, 5, True, 5),     # forward with force
    (-1, 5, False, 5),   # no offset yet: the target
    (3, -1, True, 0),    # a negative target counts as 0
    (3, 3, False, 3),
])
def test_new_offset(current: int, target: int, force: bool, expected: int) -> None:
    assert new_offset(current, target, force) == expected


def test_reset_plan_covers_every_target_queue() -> None:
    assert reset_plan({0: 4, 1: 1}, {0: 2, 1: 3, 2: 7}, force=False) == {0: 2, 1: 1, 2: 7}
    assert reset_plan({0: 4, 1: 1}, {0: 2, 1: 3, 2: 7}, force=True) == {0: 2, 1: 3, 2: 7}


# ---- fakes -----------------------------------------------------------------------------

@dataclass
class Role:
    is_slave: bool = False
    sync_master: bool = False


class Topics:
    def __init__(self, *configs: TopicConfig) -> None:
        self.table = {c.topic_name: c for c in configs}

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)


class Offsets:
    """The group's offsets; ``resets`` records each admin reset (commit)."""

    def __init__(self) -> None:
        self.table: dict[tuple[str, str, int], int] = {}
        self.resets: list[tuple[str, str, int, int]] = []

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.table.get((group, topic, queue_id), -1)

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table[(group, topic, queue_id)] = offset
        self.resets.append((group, topic, queue_id, offset))


class Queues:
    """Queue q holds offsets 0..max[q]; message i of a queue was stored at 1000 + 100 * i."""

    def __init__(self, maxes: dict[int, int]) -> None:
        self.maxes = maxes

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.maxes.get(queue_id, 0)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        top = self.maxes.get(queue_id, 0)
        return next((i for i in range(top) if 1000 + 100 * i >= timestamp_ms), top)


@dataclass(frozen=True)
class Reply:
    ok: bool = True
    size: int = 10


@dataclass
class Channel:
    reading: bool = True
    reply: Reply | None = field(default_factory=Reply)  # None: never answers
    error: Exception | None = None
    told: list[ResetNotice] = field(default_factory=list)
    asked: list[RunningInfoAsk] = field(default_factory=list)


class Link:
    def tell_reset(self, channel: Channel, notice: ResetNotice) -> bool:
        if not channel.reading:
            return False
        channel.told.append(notice)
        return True

    def takes_requests(self, channel: Channel) -> bool:
        return channel.reading

    async def running_info(self, channel: Channel, ask: RunningInfoAsk, timeout: float) -> Reply:
        channel.asked.append(ask)
        if channel.error is not None:
            raise channel.error
        if channel.reply is None:
            await trio.sleep_forever()
        assert channel.reply is not None
        return channel.reply


@dataclass
class World:
    service: Broker2ClientService[Reply]
    offsets: Offsets
    consumers: ClientGroups
    role: Role

    def member(self, channel: Channel, cid: str = "10.0.0.1@1", group: str = "g") -> Channel:
        self.consumers.register(group, cid, channel, 0.0, {})
        return channel


@pytest.fixture
def w() -> World:
    offsets, consumers, role = Offsets(), ClientGroups("consumer"), Role()
    service: Broker2ClientService[Reply] = Broker2ClientService(
        broker_name=B, role=role, topics=Topics(TopicConfig(T, 2, 2)), offsets=offsets,
        queues=Queues({0: 5, 1: 5}), consumers=consumers, link=Link())
    return World(service, offsets, consumers, role)


def by_queue(offsets: dict[MessageQueue, Any]) -> dict[int, Any]:
    assert {(mq.topic, mq.broker_name) for mq in offsets} <= {(T, B)}
    return {mq.queue_id: o for mq, o in offsets.items()}


# ---- resets ------------------------------------------------------------------------------

def test_skip_all_moves_every_queue_to_its_end_as_an_admin_reset(w: World) -> None:
    w.offsets.table[("g", T, 0)] = 2  # queue 1: no offset yet
    out = w.service.reset_offset(ResetRequest(T, "g", SKIP_ALL))
    assert out.status is ResetStatus.OK and by_queue(out.offsets) == {0: 5, 1: 5}
    assert w.offsets.resets == [("g", T, 0, 5), ("g", T, 1, 5)]


def test_by_time_and_only_backwards_without_force(w: World) -> None:
    w.offsets.table.update({("g", T, 0): 1, ("g", T, 1): 4})
    # 1250: offset 3 of each queue is the first stored at or after it
    out = w.service.reset_offset(ResetRequest(T, "g", 1250, force=False))
    assert by_queue(out.offsets) == {0: 1, 1: 3}
    assert w.offsets.resets == [("g", T, 1, 3)]  # what does not move is not committed
    out = w.service.reset_offset(ResetRequest(T, "g", 1250, force=True))
    assert by_queue(out.offsets) == {0: 3, 1: 3}
    assert w.offsets.resets[1:] == [("g", T, 0, 3)]
    # a time after every message: the end
    assert by_queue(w.service.reset_offset(ResetRequest(T, "g", 10**13)).offsets) == {0: 5, 1: 5}


def test_online_members_are_told_and_one_not_reading_is_skipped(w: World) -> None:
    told = [w.member(Channel(), f"c{i}") for i in range(2)]
    deaf = w.member(Channel(reading=False), "c9")
    other = w.member(Channel(), "c0", group="other")
    out = w.service.reset_offset(ResetRequest(T, "g", 0, force=False))
    assert out.told == 2
    for ch in told:
        [notice] = ch.told
        assert notice.request == ResetRequest(T, "g", 0, force=False)
        assert by_queue(notice.offsets) == {0: 0, 1: 0}
    assert deaf.told == [] and other.told == []


def test_reset_refusals(w: World) -> None:
    member = w.member(Channel())
    out = w.service.reset_offset(ResetRequest("NoSuchTopic", "g", SKIP_ALL))
    assert out.status is ResetStatus.TOPIC_NOT_EXIST and "NoSuchTopic" in (out.remark or "")
    w.role.is_slave = True
    out = w.service.reset_offset(ResetRequest(T, "g", SKIP_ALL))
    assert out.status is ResetStatus.NOT_ON_SLAVE and "master" in (out.remark or "")
    assert w.offsets.resets == [] and member.told == []


# ---- the running-info relay -----------------------------------------------------------

ASK = RunningInfoAsk("g", "10.0.0.1@1", jstack=True)


async def test_relays_the_members_answer(w: World) -> None:
    ch = w.member(Channel(reply=Reply(size=3)))
    out = await w.service.running_info(ASK)
    assert out.status is RelayStatus.OK and out.reply == Reply(size=3)
    assert ch.asked == [ASK] and w.service.relays == 0
    out = await w.service.running_info(RunningInfoAsk("g", "10.0.0.9@9"))
    assert (out.status, out.remark) == (RelayStatus.NOT_ONLINE,
                                        "The Consumer <g> <10.0.0.9@9> not online")


@pytest.mark.parametrize(("channel", "status", "remark"), [
    (Channel(reply=Reply(ok=False)), RelayStatus.REFUSED, None),
    (Channel(reply=Reply(size=MAX_RELAYED_BODY + 1)), RelayStatus.TOO_LARGE, "not relayed"),
    (Channel(reading=False), RelayStatus.NOT_READING, "does not read"),
    (Channel(error=RelayFailed("closed")), RelayStatus.FAILED, "failed: closed"),
    (Channel(error=RelayTimeout("late")), RelayStatus.TIMEOUT, "did not answer"),
])
async def test_relay_refusals(w: World, channel: Channel, status: RelayStatus,
                              remark: str | None) -> None:
    w.member(channel)
    out = await w.service.running_info(ASK)
    assert out.status is status
    if remark is None:
        assert out.reply == channel.reply  # handed back: the transport keeps its code
    else:
        assert remark in (out.remark or "")
    assert channel.asked == ([] if status is RelayStatus.NOT_READING else [ASK])
    assert w.service.relays == 0


async def test_a_silent_member_times_out_and_relays_are_bounded(
        w: World, autojump_clock: trio.testing.MockClock) -> None:
    ids = [f"10.0.0.1@{i}" for i in range(MAX_RELAYS)]
    for cid in ids:
        w.member(Channel(reply=None), cid)
    answers: list[RelayOutcome[Reply]] = []

    async def ask(cid: str) -> None:
        answers.append(await w.service.running_info(RunningInfoAsk("g", cid)))

    async with trio.open_nursery() as nursery:
        for cid in ids:
            nursery.start_soon(ask, cid)
        await trio.testing.wait_all_tasks_blocked()
        assert w.service.relays == MAX_RELAYS
        busy = await w.service.running_info(RunningInfoAsk("g", ids[0]))  # refused at once
        assert busy.status is RelayStatus.BUSY
        started = trio.current_time()
    assert trio.current_time() - started == pytest.approx(RELAY_TIMEOUT_S)
    assert [a.status for a in answers] == [RelayStatus.TIMEOUT] * MAX_RELAYS
    assert w.service.relays == 0


# ---- gRPC clients: never called back ---------------------------------------------------

async def test_a_grpc_member_is_not_asked_for_running_info(w: World) -> None:
    w.consumers.register("g", "grpc-1", SessionChannel("grpc-1", "10.0.0.2:5000"), 0.0, {})
    out = await w.service.running_info(RunningInfoAsk("g", "grpc-1"))
    assert out.status is RelayStatus.UNSUPPORTED
    assert "not supported for gRPC clients" in (out.remark or "")
    assert w.service.relays == 0


def test_a_reset_commits_for_grpc_members_and_tells_only_remoting_ones(w: World) -> None:
    w.consumers.register("g", "grpc-1", SessionChannel("grpc-1", "10.0.0.2:5000"), 0.0, {})
    remoting = w.member(Channel(), "c1")
    out = w.service.reset_offset(ResetRequest(T, "g", SKIP_ALL))
    assert out.status is ResetStatus.OK and out.told == 1 and len(remoting.told) == 1
    assert w.offsets.resets == [("g", T, 0, 5), ("g", T, 1, 5)]
