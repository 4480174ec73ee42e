"""ProcessQueue bookkeeping, offset stores and consumer settings, without sockets."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.consumer_types import ConsumeFromWhere, MessageModel, parse_consume_timestamp
from client.errors import MQClientError
from client.lite_pull_consumer import LitePullConsumer
from client.offset_store import LocalFileOffsetStore, ReadOffsetType
from client.process_queue import ProcessQueue
from client.push_consumer import PushConsumer
from protocol.message import MessageExt, MessageQueue


def msg(offset: int, size: int = 10) -> MessageExt:
    return MessageExt(topic="T", body=b"x" * size, properties={}, queue_offset=offset)


def test_commit_offset_is_lowest_unconsumed() -> None:
    pq = ProcessQueue()
    assert pq.remove_messages([]) == -1  # nothing ever cached
    batch = [msg(o) for o in range(10, 20)]
    pq.put_messages(batch)
    assert (pq.msg_count, pq.msg_size, pq.max_span) == (10, 100, 9)
    assert pq.remove_messages([batch[3], batch[5]]) == 10
    assert pq.remove_messages([batch[0], batch[1], batch[2]]) == 14
    assert pq.remove_messages(batch[4:9]) == 19
    assert pq.remove_messages([batch[9]]) == 20  # empty: one past the highest
    assert (pq.msg_count, pq.msg_size) == (0, 0)
    pq.put_messages([msg(20)])
    assert pq.remove_messages([batch[0]]) == 20  # already removed: no double count
    assert pq.msg_count == 1


def test_duplicates_are_not_cached_twice() -> None:
    pq = ProcessQueue()
    pq.put_messages([msg(1), msg(2)])
    pq.put_messages([msg(2), msg(3)])
    assert pq.msg_count == 3 and list(pq.msgs) == [1, 2, 3]


@given(st.lists(st.integers(0, 49), unique=True))
def test_commit_offset_never_passes_an_unconsumed_message(consumed: list[int]) -> None:
    pq = ProcessQueue()
    msgs = [msg(o) for o in range(50)]
    pq.put_messages(msgs)
    offset = pq.remove_messages([msgs[i] for i in consumed])
    missing = sorted(set(range(50)) - set(consumed))
    assert offset == (missing[0] if missing else 50)


def test_orderly_take_commit_and_consume_again() -> None:
    pq = ProcessQueue()
    assert pq.put_messages([msg(o) for o in range(5)]) is True  # start a consume task
    assert pq.put_messages([msg(5)]) is False  # one is running already
    first = pq.take_messages(2)
    assert [m.queue_offset for m in first] == [0, 1]
    pq.make_message_to_consume_again(first)
    assert list(pq.msgs) == [0, 1, 2, 3, 4, 5] and all(m.reconsume_times == 1 for m in first)
    again = pq.take_messages(3)
    assert [m.queue_offset for m in again] == [0, 1, 2]
    assert pq.commit() == 3 and pq.msg_count == 3
    assert [m.queue_offset for m in pq.take_messages(10)] == [3, 4, 5]
    assert pq.commit() == 6
    assert pq.take_messages(10) == [] and pq.consuming_flag is False
    assert pq.commit() == -1


def test_lock_expiry() -> None:
    pq = ProcessQueue()
    pq.last_lock_time = 100.0
    assert not pq.lock_expired(129.0) and pq.lock_expired(131.0)


async def test_local_offset_store_round_trip(tmp_path: Path) -> None:
    path = LocalFileOffsetStore.default_path(tmp_path, "10.0.0.1@DEFAULT", "g")
    assert path == tmp_path / "10.0.0.1@DEFAULT" / "g" / "offsets.json"
    store = LocalFileOffsetStore("g", path)
    await store.load()
    a, b = MessageQueue("T", "broker-a", 0), MessageQueue("%RETRY%x@y", "broker-b", 3)
    assert await store.read_offset(a, ReadOffsetType.READ_FROM_STORE) == -1
    store.update_offset(a, 5)
    store.update_offset(a, 3, increase_only=True)
    store.update_offset(b, 9)
    assert await store.read_offset(a, ReadOffsetType.READ_FROM_MEMORY) == 5
    await store.persist_all({a})
    store.update_offset(a, 7)
    await store.persist_all({a, b})
    again = LocalFileOffsetStore("g", path)
    await again.load()
    assert again.table == {a: 7, b: 9}
    assert json.loads((path.with_name("offsets.json.bak")).read_text())["offsetTable"] == {
        "T@broker-a@0": 5, "%RETRY%x@y@broker-b@3": 9}
    path.write_text("{not json")  # a torn main file: the backup is used
    third = LocalFileOffsetStore("g", path)
    await third.load()
    assert third.table == {a: 5, b: 9}


def test_consume_timestamp_forms() -> None:
    assert parse_consume_timestamp(1234) == 1234
    assert parse_consume_timestamp("20261122103000") == int(
        datetime(2026, 11, 22, 10, 30).timestamp() * 1000)
    assert parse_consume_timestamp(datetime(2026, 1, 1)) == int(datetime(2026, 1, 1).timestamp() * 1000)
    with pytest.raises(MQClientError, match="yyyyMMddHHmmss"):
        parse_consume_timestamp("2026-11-22")
    with pytest.raises(MQClientError):
        parse_consume_timestamp(-1)


def test_consumer_settings_are_checked() -> None:
    with pytest.raises(MQClientError, match="blank"):
        PushConsumer("")
    with pytest.raises(MQClientError, match="pull_batch_size"):
        PushConsumer("g", pull_batch_size=0)
    with pytest.raises(MQClientError, match="consume_thread_max"):
        PushConsumer("g", consume_thread_max=0)
    with pytest.raises(MQClientError, match="message_model"):
        PushConsumer("g", message_model="CLUSTERING")  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="max_reconsume_times"):
        PushConsumer("g", max_reconsume_times=-2)
    c = PushConsumer("g", message_model=MessageModel.BROADCASTING,
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    with pytest.raises(MQClientError, match="expression"):
        c.subscribe("T", "||")
    with pytest.raises(MQClientError, match="callable"):
        c.register_message_listener(42)  # type: ignore[arg-type]
    lite = LitePullConsumer("g")
    lite.subscribe("T")
    with pytest.raises(MQClientError, match="mixed"):
        lite.set_assignment([MessageQueue("T", "b", 0)])


async def test_push_consumer_start_needs_listener_and_subscription() -> None:
    c = PushConsumer("g")
    with pytest.raises(MQClientError, match="listener"):
        await c.start()
    c.register_message_listener(lambda msgs, ctx: None)
    with pytest.raises(MQClientError, match="subscribe"):
        await c.start()
