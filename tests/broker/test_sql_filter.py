"""SQL92 subscriptions on an in-process broker (no sockets): refused without
``enablePropertyFilter``; with it, pulls return exactly the matching messages
and go on past the others, read only the records whose tags can match,
compile each subscription once; heart-beat subscriptions, CHECK_CLIENT_CONFIG,
and long polling on a property filter in virtual time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import broker.consumer_filter_manager as filter_module
import broker.store.message_store as message_store
from broker.config import BrokerConfig
from broker.consumer_filter_manager import (
    FILTER_WORK_PER_PULL,
    MIN_FILTER_SCAN,
    ConsumerFilterManager,
    sql_filter,
)
from broker.controller import BrokerController
from broker.pull_processor import FLAG_SUBSCRIPTION, FLAG_SUSPEND
from broker.store.message_store import MAX_FILTER_SCAN
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.filter_sql import SqlParseError, compile_sql
from protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from protocol.record import RECORD_HEAD_SIZE, decode_records
from protocol.route import TopicConfig
from tests.broker.fakes import FakeConn, call
from tests.broker.store.helpers import inner

GROUP, TOPIC = "g", "T"
REFUSED = "The broker does not support consumer to filter message by SQL92"


@pytest.fixture
def made(tmp_path: Path) -> Iterator[list[BrokerController]]:
    out: list[BrokerController] = []
    yield out
    for c in out:
        c._persist_and_close()


def broker(root: Path, made: list[BrokerController], **props: Any) -> BrokerController:
    cfg = BrokerConfig(store_path_root_dir=str(root / str(len(made))), listen_port=0,
                       maped_file_size_commit_log=4 << 20, maped_file_size_consume_queue=4000 * 20,
                       max_hash_slot_num=64, max_index_num=256, **props)
    c = BrokerController(cfg)
    c._load()
    made.append(c)
    c.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
    return c


@pytest.fixture
def on(tmp_path: Path, made: list[BrokerController]) -> BrokerController:
    return broker(tmp_path, made, enable_property_filter=True)


def put(c: BrokerController, number: int, /, tags: str | None = None, **properties: str
        ) -> None:
    """The message whose body is ``number``, with ``tags`` and ``properties``."""
    msg = inner(TOPIC, 0, str(number).encode(), tags=tags, properties=properties)
    assert c.message_store.put_message(msg).ok


def pull(c: BrokerController, offset: int, sql: str | None, *, flag: int = FLAG_SUBSCRIPTION,
         conn: FakeConn | None = None, max_nums: int = 32, version: int = 0,
         expression_type: str = "SQL92", suspend_ms: int = 0) -> RemotingCommand | None:
    handler, _ = c._handler_table().lookup(RequestCode.PULL_MESSAGE)
    assert handler is not None
    h = PullMessageRequestHeader(consumer_group=GROUP, topic=TOPIC, queue_id=0,
                                 queue_offset=offset, max_msg_nums=max_nums, sys_flag=flag,
                                 suspend_timeout_millis=suspend_ms,
                                 subscription=sql or "*", sub_version=version,
                                 expression_type=expression_type)
    return handler(conn or FakeConn(), RemotingCommand.request(  # type: ignore[arg-type]
        RequestCode.PULL_MESSAGE, h.to_fields()))


def answered(r: RemotingCommand | None) -> RemotingCommand:
    assert r is not None
    return r


def next_offset(r: RemotingCommand) -> int:
    return PullMessageResponseHeader.from_fields(r.ext_fields).next_begin_offset


def numbers(r: RemotingCommand) -> list[int]:
    return [int(m.body) for m in decode_records(r.body or b"")] if r.body else []


def read_all(c: BrokerController, sql: str, **kw: Any) -> tuple[list[int], list[int]]:
    """Every matching message of the queue, pulling from 0 to the end; and the
    codes of the pulls."""
    got: list[int] = []
    codes: list[int] = []
    offset = 0
    end = c.message_store.get_max_offset_in_queue(TOPIC, 0)
    for _ in range(10_000):  # bounded
        if offset >= end:
            break
        r = answered(pull(c, offset, sql, **kw))
        codes.append(r.code)
        assert r.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), r.remark
        got += numbers(r)
        assert next_offset(r) > offset
        offset = next_offset(r)
    return got, codes


def heartbeat(c: BrokerController, sql: str, version: int, expression_type: str = "SQL92"
              ) -> RemotingCommand:
    """A push consumer's heart-beat subscribing TOPIC with ``sql`` (Java's fields)."""
    body = {"clientID": "10.0.0.1@1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": TOPIC, "subString": sql, "tagsSet": [], "codeSet": [],
                                 "expressionType": expression_type, "subVersion": version,
                                 "classFilterMode": False}]}]}
    return call(c, RequestCode.HEART_BEAT, {}, pack_body(body))


def check_client(c: BrokerController, sql: str, expression_type: str = "SQL92"
                 ) -> RemotingCommand:
    body = {"clientId": "10.0.0.1@1", "group": GROUP, "subscriptionData": {
        "topic": TOPIC, "subString": sql, "expressionType": expression_type, "subVersion": 1}}
    return call(c, RequestCode.CHECK_CLIENT_CONFIG, {}, pack_body(body))


# ---------------------------------------------------------------- refusals


async def test_refused_without_enable_property_filter(tmp_path: Path,
                                                made: list[BrokerController]) -> None:
    off = broker(tmp_path, made)
    put(off, 0, a="1")
    r = answered(pull(off, 0, "a = 1"))
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, REFUSED)
    r = check_client(off, "a = 1")
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, REFUSED)
    assert heartbeat(off, "a = 1", 5).code == ResponseCode.SUCCESS  # joining is allowed
    r = answered(pull(off, 0, None, flag=0, version=5))  # ... pulling by it is not
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, REFUSED)
    # tags still work, and the switch is read at each pull (UPDATE_BROKER_CONFIG)
    assert numbers(answered(pull(off, 0, "*", expression_type="TAG"))) == [0]
    off.config.enable_property_filter = True
    assert numbers(answered(pull(off, 0, "a = 1"))) == [0]
    assert check_client(off, "a = 1").code == ResponseCode.SUCCESS


async def test_unknown_expression_types_are_refused(on: BrokerController) -> None:
    r = answered(pull(on, 0, "a = 1", expression_type="XPATH"))
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "The broker does not support consumer to filter message by XPATH")
    assert check_client(on, "x", "XPATH").code == ResponseCode.SYSTEM_ERROR
    assert check_client(on, "TagA || TagB", "TAG").code == ResponseCode.SUCCESS
    assert check_client(on, "", "").code == ResponseCode.SUCCESS


async def test_bad_expressions_say_where(on: BrokerController) -> None:
    put(on, 0, a="1")
    r = answered(pull(on, 0, "a = 1 AND b >"))
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "parse the consumer's subscription failed" in (r.remark or "")
    assert "column 14" in (r.remark or "")
    r = check_client(on, "a = = 1")
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 5" in (r.remark or "")
    # the heart-beat's expression does not compile: RocketMQ's answer
    assert heartbeat(on, "a >", 7).code == ResponseCode.SUCCESS
    r = answered(pull(on, 0, None, flag=0, version=7))
    assert r.code == ResponseCode.FILTER_DATA_NOT_EXIST
    assert (r.remark or "").startswith("The broker's consumer filter data is not exist!")
    with pytest.raises(RemoteProtocolError):
        call(on, RequestCode.CHECK_CLIENT_CONFIG, {}, pack_body({"subscriptionData": 5}))


# ---------------------------------------------------------------- filtered pulls


async def test_pulls_return_exactly_the_matching_messages(on: BrokerController) -> None:
    n = 1500
    for i in range(n):
        props = {"i": str(i), "mod": str(i % 100)}
        if i % 3:
            props["color"] = "red" if i % 2 else "blue"
        put(on, i, "A" if i % 4 else "B", **props)
    cases = {
        "mod = 42": lambda i: i % 100 == 42,
        "i BETWEEN 100 AND 110 OR mod IN ('7', '8')":
            lambda i: 100 <= i <= 110 or i % 100 in (7, 8),
        "color IS NULL AND i >= 1400": lambda i: i % 3 == 0 and i >= 1400,
        "TAGS = 'B' AND color = 'blue'": lambda i: i % 4 == 0 and i % 3 != 0 and i % 2 == 0,
        "NOT (color = 'red') AND i < 30": lambda i: i % 3 != 0 and i % 2 == 0 and i < 30,
        "i > 1499": lambda i: False,
        "TRUE": lambda i: True,
    }
    for sql, want in cases.items():
        got, codes = read_all(on, sql)
        assert got == [i for i in range(n) if want(i)], sql
        if sql == "i > 1499":  # nothing: every window comes back empty at once
            assert set(codes) == {ResponseCode.PULL_RETRY_IMMEDIATELY} and len(codes) == 4


async def test_a_window_without_a_match_moves_the_next_offset(on: BrokerController) -> None:
    for i in range(MAX_FILTER_SCAN + 50):
        put(on, i, n=str(i))
    r = answered(pull(on, 0, "n = 449", flag=FLAG_SUBSCRIPTION | FLAG_SUSPEND,
                      suspend_ms=15_000))
    # not held although it found nothing: the scan stopped short of the queue's end
    assert (r.code, next_offset(r)) == (ResponseCode.PULL_RETRY_IMMEDIATELY, MAX_FILTER_SCAN)
    r = answered(pull(on, MAX_FILTER_SCAN, "n = 449"))
    assert numbers(r) == [449] and next_offset(r) == MAX_FILTER_SCAN + 50


async def test_a_tag_window_without_a_match_is_answered_at_once(on: BrokerController) -> None:
    for i in range(MAX_FILTER_SCAN + 10):
        put(on, i, tags="Other")
    r = answered(pull(on, 0, "Mine", flag=FLAG_SUBSCRIPTION | FLAG_SUSPEND, suspend_ms=15_000,
                      expression_type="TAG"))
    assert (r.code, next_offset(r)) == (ResponseCode.PULL_RETRY_IMMEDIATELY, MAX_FILTER_SCAN)


async def test_messages_whose_evaluation_fails_are_skipped(on: BrokerController) -> None:
    for i, value in enumerate(["5", "x", "2.5", "9", "", "7"]):
        if value:
            put(on, i, n=value)
        else:
            put(on, i)
    got, _ = read_all(on, "n > 4")  # Integer.valueOf: 'x' and '2.5' throw
    assert got == [0, 3, 5]
    got, _ = read_all(on, "n > 4.0 OR n IS NULL")  # 'x' throws, whatever OR's right says
    assert got == [0, 3, 4, 5]


@pytest.mark.parametrize("read_bytes", [1, 700, 1 << 20])
async def test_records_read_in_runs_and_corrupt_ones_skipped(
        tmp_path: Path, made: list[BrokerController], monkeypatch: pytest.MonkeyPatch,
        read_bytes: int) -> None:
    monkeypatch.setattr(message_store, "FILTER_READ_BYTES", read_bytes)
    c = broker(tmp_path, made, enable_property_filter=True)
    c.topic_config_manager.update(TopicConfig(TOPIC, 2, 2))
    store = c.message_store
    for i in range(120):  # runs of 5 in queue 0, then single records alternating
        queue = (i // 5) % 2 if i < 60 else i % 2
        msg = inner(TOPIC, queue, str(i).encode(), properties={"n": str(i), "mod3": str(i % 3)})
        assert store.put_message(msg).ok
    # the body of the record of message 12 (queue 0) no longer matches its CRC
    phys = store.get_commit_log_offset_in_queue(TOPIC, 0, 7)
    mf = store.commit_log.mapped_file_queue.find_by_offset(phys)
    assert mf is not None
    at = phys - mf.file_from_offset + RECORD_HEAD_SIZE
    mf.mm[at] ^= 0xFF
    want = [i for i in range(120) if ((i // 5) % 2 if i < 60 else i % 2) == 0
            and i % 3 == 0 and i != 12]
    got: list[int] = []
    offset = 0
    while offset < store.get_max_offset_in_queue(TOPIC, 0):
        h = PullMessageRequestHeader(consumer_group=GROUP, topic=TOPIC, queue_id=0,
                                     queue_offset=offset, max_msg_nums=4,
                                     sys_flag=FLAG_SUBSCRIPTION,
                                     subscription="mod3 = 0 AND n BETWEEN 0 AND 200",
                                     expression_type="SQL92")
        r = call(c, RequestCode.PULL_MESSAGE, h.to_fields())
        got += numbers(r)
        offset = next_offset(r)
    assert got == want


async def test_only_records_whose_tags_can_match_are_read(on: BrokerController,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(200):
        put(on, i, tags="A" if i % 10 == 0 else "B", n=str(i))
    read: list[int] = []
    real = filter_module.record_properties

    def counting(record: bytes, pos: int = 0) -> str:
        read.append(1)
        return real(record, pos)

    monkeypatch.setattr(filter_module, "record_properties", counting)
    got, _ = read_all(on, "TAGS = 'A' AND n >= 100")
    assert got == list(range(100, 200, 10))
    assert len(read) == 20  # the A-tagged records only
    read.clear()
    got, _ = read_all(on, "n >= 195")
    assert got == [195, 196, 197, 198, 199] and len(read) == 200


async def test_each_subscription_is_compiled_once(on: BrokerController) -> None:
    for i in range(10):
        put(on, i, n=str(i))
    manager = on.consumer_filter_manager
    for _ in range(3):
        assert numbers(answered(pull(on, 0, "n < 3", version=1))) == [0, 1, 2]
    assert manager.compiled == 1
    pull(on, 0, "n < 3", version=2)  # a new version of the same text keeps it
    assert manager.compiled == 1 and manager.version(GROUP, TOPIC) == 2
    assert numbers(answered(pull(on, 0, "n > 7", version=3))) == [8, 9]
    assert manager.compiled == 2
    for _ in range(2):
        assert answered(pull(on, 0, "n >", version=4)).code == \
            ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert manager.compiled == 3  # the error is kept too
    # the heart-beat path: the group's registered subscription, compiled once too
    assert heartbeat(on, "n = 5", 10).code == ResponseCode.SUCCESS
    assert numbers(answered(pull(on, 0, None, flag=0, version=10))) == [5]
    assert numbers(answered(pull(on, 0, None, flag=0, version=10))) == [5]
    assert manager.compiled == 4
    r = answered(pull(on, 0, None, flag=0, version=11))  # newer than the heart-beat's
    assert r.code == ResponseCode.SUBSCRIPTION_NOT_LATEST


async def test_large_expressions_scan_fewer_entries(on: BrokerController) -> None:
    small = sql_filter(compile_sql("a = 1"))
    assert small.max_scan == MAX_FILTER_SCAN
    big_sql = " OR ".join(f"a = {i}" for i in range(150))
    big = sql_filter(compile_sql(big_sql))
    nodes = compile_sql(big_sql).node_count
    assert big.max_scan == max(MIN_FILTER_SCAN, FILTER_WORK_PER_PULL // nodes) < MAX_FILTER_SCAN
    for i in range(MAX_FILTER_SCAN):
        put(on, i, a="x")
    r = answered(pull(on, 0, big_sql))
    assert (r.code, next_offset(r)) == (ResponseCode.PULL_RETRY_IMMEDIATELY, big.max_scan)


# ---------------------------------------------------------------- the table's bounds


def test_the_filter_table_is_bounded() -> None:
    m = ConsumerFilterManager(max_entries=3)
    for topic in "ABCD":
        m.get("g", topic, "a = 1", 1)
    assert list(m.table) == [("g", "B"), ("g", "C"), ("g", "D")]
    m.get("g", "B", "a = 1", 1)  # used: moves to the end
    m.get("g", "E", "a = 1", 1)
    assert list(m.table) == [("g", "D"), ("g", "B"), ("g", "E")]
    heavy = ConsumerFilterManager(max_weight=5_000)
    for topic in "ABCDEFGH":
        heavy.get("g", topic, "a = 1 AND b = 2", 1)
    assert 0 < heavy.weight <= 5_000 and len(heavy.table) < 8
    with pytest.raises(SqlParseError):
        heavy.get("g", "bad", "a =", 1)
    assert heavy.weight == sum(e.weight for e in heavy.table.values())


# ---------------------------------------------------------------- long polling


async def test_a_held_filtered_pull_answers_only_a_match(
        on: BrokerController, autojump_clock: trio.testing.MockClock) -> None:
    for i in range(5):
        put(on, i, n=str(i))
    conn = FakeConn()
    flag = FLAG_SUBSCRIPTION | FLAG_SUSPEND
    assert pull(on, 0, "n = 100", flag=flag, conn=conn, suspend_ms=10_000) is None  # held
    held = next(iter(on.pull_hold_service.index.by_owner[conn]))
    for i in range(5, 8):
        put(on, i, n=str(i))  # dispatched: the hold is re-run
    assert on.pull_hold_service.retries == 3 and conn.sent == []
    # each re-run went on past what it read: the next one reads only what arrives
    assert held.request.queue_offset == 8
    put(on, 8, n="100")
    r = conn.sent[0]
    assert (r.code, numbers(r), next_offset(r)) == (ResponseCode.SUCCESS, [8], 9)


async def test_a_held_tag_filtered_sql_pull_wakes_on_its_tags(
        on: BrokerController, autojump_clock: trio.testing.MockClock) -> None:
    conn = FakeConn()
    flag = FLAG_SUBSCRIPTION | FLAG_SUSPEND
    async with trio.open_nursery() as nursery:
        await nursery.start(on.pull_hold_service.run)
        assert pull(on, 0, "TAGS = 'A' AND n > 1", flag=flag, conn=conn,
                    suspend_ms=5_000) is None
        retries = on.pull_hold_service.retries
        put(on, 0, tags="B", n="5")
        assert on.pull_hold_service.retries == retries  # another tag: not even re-run
        put(on, 1, tags="A", n="1")
        assert on.pull_hold_service.retries == retries + 1 and conn.sent == []
        await conn.wait_sent(1)  # its deadline: an empty answer past what it read
        r = conn.sent[0]
        assert (r.code, next_offset(r)) == (ResponseCode.PULL_NOT_FOUND, 2)
        nursery.cancel_scope.cancel()
