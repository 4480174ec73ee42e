"""Long polling through the pull processor and a real store, without sockets:
what a held pull keeps (its tags codes, the max offset it saw), which puts
re-run it, the bounds answered at once, deadlines in virtual time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.pull_processor import FLAG_SUBSCRIPTION, FLAG_SUSPEND
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.hashing import java_string_hash
from protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from protocol.record import decode_records
from protocol.route import TopicConfig
from tests.broker.fakes import FakeConn
from tests.broker.store.helpers import inner

GROUP = "g"


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[BrokerController]]:
    made: list[BrokerController] = []
    yield made
    for c in made:
        c._persist_and_close()


def broker(root: Path, made: list[BrokerController], **props: Any) -> BrokerController:
    cfg = BrokerConfig(
        store_path_root_dir=str(root), listen_port=0,
        maped_file_size_commit_log=1 << 20, maped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64, max_index_num=256, **props,
    )
    c = BrokerController(cfg)
    c._load()
    made.append(c)
    c.topic_config_manager.update(TopicConfig("T", 1, 1))
    return c


def put(c: BrokerController, tags: str, n: int = 1) -> None:
    for _ in range(n):
        assert c.message_store.put_message(inner("T", 0, tags.encode(), tags=tags)).ok


def pull(c: BrokerController, conn: FakeConn, offset: int, tags: str = "*",
         suspend_ms: int = 60_000) -> RemotingCommand | None:
    handler, _ = c._handler_table().lookup(RequestCode.PULL_MESSAGE)
    assert handler is not None
    h = PullMessageRequestHeader(consumer_group=GROUP, topic="T", queue_id=0,
                                 queue_offset=offset, max_msg_nums=32,
                                 sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION,
                                 suspend_timeout_millis=suspend_ms, subscription=tags)
    return handler(conn, RemotingCommand.request(  # type: ignore[arg-type]
        RequestCode.PULL_MESSAGE, h.to_fields()))


def next_offset(r: RemotingCommand) -> int:
    return PullMessageResponseHeader.from_fields(r.ext_fields).next_begin_offset


async def test_puts_re_run_only_the_holds_they_match(
        tmp_path: Path, brokers: list[BrokerController],
        autojump_clock: trio.testing.MockClock) -> None:
    c = broker(tmp_path, brokers)
    put(c, "Old", 5)
    svc = c.pull_hold_service
    many = FakeConn()
    for _ in range(300):
        assert pull(c, many, 5, "NoSuch") is None  # held
    assert pull(c, many, 3, "NoSuch") is None  # scanned 3..4, nothing: held too
    tagged, star = FakeConn(), FakeConn()
    assert pull(c, tagged, 5, "TagA || TagB") is None
    assert pull(c, star, 5) is None
    hold = next(iter(svc.held[("T", 0)].by_code[java_string_hash("TagA")]))
    assert hold.tag_codes == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert svc.held[("T", 0)].seen == 5  # the max offset the pulls saw
    put(c, "Other", 60)
    assert svc.retries == 1  # the wildcard hold, answered with the first message
    assert [m.body for m in decode_records(star.sent[0].body or b"")] == [b"Other"]
    assert svc.held[("T", 0)].seen == 65
    put(c, "TagB")
    assert svc.retries == 2 and [r.code for r in tagged.sent] == [ResponseCode.SUCCESS]
    assert [m.body for m in decode_records(tagged.sent[0].body or b"")] == [b"TagB"]
    assert many.sent == [] and svc.index.total == 301


async def test_a_pull_over_a_bound_is_answered_at_once(
        tmp_path: Path, brokers: list[BrokerController],
        autojump_clock: trio.testing.MockClock) -> None:
    c = broker(tmp_path, brokers, max_held_pulls_per_connection=2, max_held_pulls=3)
    put(c, "Old", 5)
    one, two = FakeConn(), FakeConn()
    assert pull(c, one, 5) is None and pull(c, one, 5) is None
    r = pull(c, one, 5)  # the connection's third: as if its suspend time were over
    assert r is not None and r.code == ResponseCode.PULL_NOT_FOUND and next_offset(r) == 5
    assert pull(c, two, 5) is None
    r = pull(c, two, 0, "NoSuch")  # the broker's fourth, after scanning 0..4
    assert r is not None and r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and next_offset(r) == 5
    assert c.pull_hold_service.refused == 2
    c.pull_hold_service.connection_closed(one)  # what the server's close callback does
    assert pull(c, two, 5) is None  # one's places are free again
    put(c, "New")
    assert [x.code for x in two.sent] == [ResponseCode.SUCCESS] * 2  # both holds answered
    assert one.sent == []


async def test_held_no_longer_than_the_client_or_the_broker_allows(
        tmp_path: Path, brokers: list[BrokerController],
        autojump_clock: trio.testing.MockClock) -> None:
    c = broker(tmp_path, brokers, long_polling_max_suspend_millis=15_000)
    short, long = FakeConn(), FakeConn()
    async with trio.open_nursery() as nursery:
        await nursery.start(c.pull_hold_service.run)
        start = trio.current_time()
        assert pull(c, short, 0, suspend_ms=2_000) is None
        assert pull(c, long, 0, suspend_ms=60_000) is None
        await short.wait_sent(1)
        assert trio.current_time() - start == 2.0
        await long.wait_sent(1)
        assert trio.current_time() - start == 15.0
        nursery.cancel_scope.cancel()
    assert [r.code for r in short.sent + long.sent] == [ResponseCode.PULL_NOT_FOUND] * 2


def test_tags_codes_are_read_across_consume_queue_files(
        tmp_path: Path, brokers: list[BrokerController]) -> None:
    c = broker(tmp_path, brokers)  # 100 entries per consume-queue file
    for i in range(250):
        put(c, f"Tag{i}")
    read = c.pull_service.queue_tags_codes
    assert read("T", 0, 90, 50) == [java_string_hash(f"Tag{i}") for i in range(90, 140)]
    assert read("T", 0, 240, 50) == [java_string_hash(f"Tag{i}") for i in range(240, 250)]
    assert read("T", 0, 250, 10) == [] and read("Nope", 0, 0, 10) == []
