"""SEND_MESSAGE_V2 and RocketMQ's one-letter send header (SendMessageRequestHeaderV2),
and which of the three send codes is a batch, as RocketMQ's Java and C++ clients send them."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import BrokerConfig, BrokerRole, FlushDiskType
from broker.controller import BrokerController
from broker.message_rewrite import build_batch_inners, build_inner
from broker.service import send as send_service
from broker.store.commit_log import SCHEDULE_TOPIC
from broker.subscription_group_manager import SubscriptionGroupConfig
from protocol.batch import encode_batch
from protocol.codecs import ROCKETMQ_BINARY, ROCKETMQ_JSON
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.hashing import java_string_hash
from protocol.headers import (
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
    is_v2_send_header,
)
from protocol.message import properties_to_string, string_to_properties
from protocol.record import decode_records
from protocol.route import PERM_WRITE, TopicConfig
from tests.broker.fakes import FakeConn
from tests.waits import wait_until

PROPS = properties_to_string({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AC1100000001",
                              "WAIT": "true"})


def v2_fields(**over: Any) -> dict[str, Any]:
    """A V2 header as the Java client writes it: every value a string."""
    fields = {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0",
              "g": "1700000000123", "h": "7", "i": PROPS, "j": "0", "k": "false", "m": "false",
              "n": "broker-a"}
    fields.update(over)
    return {k: v for k, v in fields.items() if v is not None}


# ---- the header --------------------------------------------------------------------------


def test_v2_header_reads_java_and_cpp_values() -> None:
    h = SendMessageRequestHeaderV2.from_fields(v2_fields())
    assert h.to_v1() == SendMessageRequestHeader(
        producer_group="pg", topic="T", queue_id=1, sys_flag=0, born_timestamp=1700000000123,
        flag=7, properties=PROPS, reconsume_times=0, default_topic="TBW102",
        default_topic_queue_nums=4, unit_mode=False, batch=False, max_reconsume_times=None)
    # the C++ client: numbers as JSON numbers, booleans as "0"/"1", l always sent
    cpp = v2_fields(d=4, e=1, f=0, h=7, k="0", m="1", l="16", n=None)
    v1 = SendMessageRequestHeaderV2.from_fields(cpp).to_v1()
    assert (v1.queue_id, v1.flag, v1.batch, v1.unit_mode, v1.max_reconsume_times) == \
        (1, 7, True, False, 16)


def test_v2_header_round_trips_through_v1() -> None:
    v1 = SendMessageRequestHeader(producer_group="pg", topic="T", queue_id=3, sys_flag=4,
                                  born_timestamp=5, flag=6, properties="a\x01b\x02",
                                  reconsume_times=2, max_reconsume_times=16, batch=True)
    v2 = SendMessageRequestHeaderV2.from_v1(v1, "broker-a")
    fields = v2.to_fields()
    assert sorted(fields) == list("abcdefghijklmn")
    assert SendMessageRequestHeaderV2.from_fields(fields).to_v1() == v1


@pytest.mark.parametrize("missing", list("abcdefgh"))
def test_v2_header_requires_what_rocketmq_requires(missing: str) -> None:
    with pytest.raises(RemoteProtocolError, match=f"missing field '{missing}'"):
        SendMessageRequestHeaderV2.from_fields(v2_fields(**{missing: None}))


@pytest.mark.parametrize("field,value,what", [
    ("e", "one", "'e' must be an integer"),
    ("g", "-1", "'g' must be a non-negative 64-bit integer"),
    ("a", "bad group!", "'a'"),
    ("c", "", "'c'"),
    ("m", "maybe", "'m' must be bool"),
    ("l", "-1", "'l'"),
])
def test_v2_header_names_the_bad_field(field: str, value: str, what: str) -> None:
    with pytest.raises(RemoteProtocolError, match=what):
        SendMessageRequestHeaderV2.from_fields(v2_fields(**{field: value}))


def test_which_batch_header_is_v2() -> None:
    assert is_v2_send_header(v2_fields())
    assert not is_v2_send_header(SendMessageRequestHeader("pg", "T", 0, batch=True).to_fields())


# ---- the broker ----------------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerController]:
    c = BrokerController(BrokerConfig(
        store_path_root_dir=str(tmp_path), listen_port=0, maped_file_size_commit_log=1 << 20,
        maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64, max_index_num=256))
    c._load()
    c.topic_config_manager.update(TopicConfig("T", 2, 2))
    try:
        yield c
    finally:
        c._persist_and_close()


def send(c: BrokerController, code: int, fields: dict[str, Any], body: bytes,
         codec: Any = ROCKETMQ_JSON, oneway: bool = False) -> RemotingCommand | None:
    """``code`` as it arrives from a RocketMQ client, its answer as the client reads it."""
    cmd = codec.decode(codec.encode(RemotingCommand.request(code, fields, body, oneway=oneway)))
    handler, _ = c._handler_table().lookup(code)
    assert handler is not None
    conn = FakeConn()
    response = handler(conn, cmd)  # type: ignore[arg-type]
    if response is None:
        if oneway and not conn.sent:
            return None
        assert len(conn.sent) == 1
        response = conn.sent[0]
    decoded: RemotingCommand = codec.decode(codec.encode(response))
    return decoded


def stored(c: BrokerController, topic: str, queue_id: int) -> list[Any]:
    result = c.message_store.get_message("g", topic, queue_id, 0, 64, None)
    return decode_records(b"".join(result.buffers), verify_crc=True)


@pytest.mark.parametrize("codec", [ROCKETMQ_JSON, ROCKETMQ_BINARY])
def test_send_message_v2_stores_one_message(broker: BrokerController, codec: Any) -> None:
    r = send(broker, RequestCode.SEND_MESSAGE_V2, v2_fields(), b"hello", codec)
    assert r is not None and r.code == ResponseCode.SUCCESS, r.remark
    # every response header value is text in RocketMQ's format
    assert all(isinstance(v, str) for v in r.ext_fields.values())
    h = SendMessageResponseHeader.from_fields(r.ext_fields)
    [msg] = stored(broker, "T", 1)
    assert (h.queue_id, h.queue_offset, h.msg_id) == (1, 0, msg.msg_id)
    assert (msg.body, msg.flag, msg.born_timestamp, msg.tags, msg.keys) == \
        (b"hello", 7, 1700000000123, "TagA", "k1 k2")
    assert msg.properties["UNIQ_KEY"] == "AC1100000001"
    # the offset msgId names the broker's address and the record's commit-log offset
    assert msg.msg_id[:16] == "7F000001" + f"{broker.config.listen_port:08X}"
    assert int(msg.msg_id[16:], 16) == msg.commit_log_offset


def test_batches_whichever_code_carries_them(broker: BrokerController) -> None:
    body = encode_batch([(0, b"b0", properties_to_string({"TAGS": "x", "UNIQ_KEY": "u0"})),
                         (3, b"b1", properties_to_string({"UNIQ_KEY": "u1"}))])
    cases = [
        # Java: SEND_BATCH_MESSAGE with the V2 header, m=true
        (RequestCode.SEND_BATCH_MESSAGE, v2_fields(e="0", m="true", i="")),
        # the C++ client: SEND_MESSAGE_V2 with m=1
        (RequestCode.SEND_MESSAGE_V2, v2_fields(e="0", m="1", i="")),
        # this project's producer: SEND_BATCH_MESSAGE with the long names
        (RequestCode.SEND_BATCH_MESSAGE,
         SendMessageRequestHeader("pg", "T", 0, batch=True).to_fields()),
        # SEND_MESSAGE with batch=true is a batch too (RocketMQ decides by the header)
        (RequestCode.SEND_MESSAGE, SendMessageRequestHeader("pg", "T", 0, batch=True).to_fields()),
    ]
    for n, (code, fields) in enumerate(cases):
        r = send(broker, code, fields, body)
        assert r is not None and r.code == ResponseCode.SUCCESS, (code, r and r.remark)
        h = SendMessageResponseHeader.from_fields(r.ext_fields)
        assert h.queue_offset == 2 * n and len(h.msg_id.split(",")) == 2
    msgs = stored(broker, "T", 0)
    assert [(m.body, m.flag) for m in msgs] == [(b"b0", 0), (b"b1", 3)] * len(cases)
    assert [m.msg_id for m in msgs[-2:]] == h.msg_id.split(",")


def test_a_bad_batch_body_is_refused(broker: BrokerController) -> None:
    handler, _ = broker._handler_table().lookup(RequestCode.SEND_MESSAGE_V2)
    assert handler is not None
    with pytest.raises(RemoteProtocolError, match="batch entry 0"):
        handler(FakeConn(), RemotingCommand.request(  # type: ignore[arg-type]
            RequestCode.SEND_MESSAGE_V2, v2_fields(m="true"), b"\x00\x00\x00\x05x"))


def test_batch_entries_are_checked_before_anything_is_stored(
        broker: BrokerController) -> None:
    ok = (0, b"fine", properties_to_string({"UNIQ_KEY": "u0"}))
    big = b"x" * (broker.config.max_message_size + 1)
    cases = [
        ([ok, (0, b"", "")], ResponseCode.MESSAGE_ILLEGAL, "body is empty"),
        ([ok, (0, big, "")], ResponseCode.MESSAGE_ILLEGAL, "exceeds maxMessageSize"),
        ([ok, (0, b"half", properties_to_string({"TRAN_MSG": "true"}))],
         ResponseCode.MESSAGE_ILLEGAL, "cannot be transactional"),
    ]
    fields = SendMessageRequestHeader("pg", "T", 0, batch=True).to_fields()
    for items, code, remark in cases:
        r = send(broker, RequestCode.SEND_BATCH_MESSAGE, fields, encode_batch(items))
        assert r is not None and r.code == code and remark in (r.remark or ""), r
    assert stored(broker, "T", 0) == []
    assert broker.message_store.get_max_phy_offset() == 0


def test_batch_messages_keep_their_tags_keys_and_ids(broker: BrokerController) -> None:
    items = [(0, b"a", properties_to_string({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ua"})),
             (0, b"b", properties_to_string({"UNIQ_KEY": "ub", "TAGS": ""})),
             (0, b"c", properties_to_string({"KEYS": "k1", "WAIT": "true"}))]
    fields = SendMessageRequestHeader("pg", "T", 1, batch=True).to_fields()
    r = send(broker, RequestCode.SEND_BATCH_MESSAGE, fields, encode_batch(items))
    assert r is not None and r.code == ResponseCode.SUCCESS, r.remark
    store = broker.message_store
    entries = store.find_consume_queue("T", 1).get_entries(0, 10)
    assert [tags for _, _, tags in entries] == [java_string_hash("TagA"), 0, 0]
    msgs = stored(broker, "T", 1)
    assert [m.tags for m in msgs] == ["TagA", "", None]
    for key, want in [("k1", [b"c", b"a"]), ("k2", [b"a"]), ("ua", [b"a"]), ("ub", [b"b"])]:
        found = [decode_records(r)[0].body for r in store.query_message("T", key, 10, 0, 2**62)]
        assert sorted(found) == sorted(want), key


_PIECES = st.sampled_from(["TAGS\x01", "KEYS\x01", "UNIQ_KEY\x01", "\x02", "\x01", "a", "b c",
                           "XTAGS\x01", "ü", ""])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(min_size=1, max_size=8),
                          st.lists(_PIECES, max_size=10).map("".join)), min_size=1, max_size=5),
       st.integers(0, 2**40))
def test_batch_inners_are_build_inner_of_each_message(
        items: list[tuple[int, bytes, str]], born: int) -> None:
    got = build_batch_inners("T", 3, items, sys_flag=4, born_timestamp=born,
                             born_host="10.0.0.1:9", reconsume_times=2)
    want = [build_inner("T", 3, body, string_to_properties(text), props_text=text, flag=flag,
                        sys_flag=4, born_timestamp=born, born_host="10.0.0.1:9",
                        reconsume_times=2) for flag, body, text in items]
    if not born:  # both stamp the time of the call
        for g, w in zip(got, want, strict=True):
            assert abs(g.born_timestamp - w.born_timestamp) < 5000
            g.born_timestamp = w.born_timestamp
    assert got == want


def test_unknown_topic_is_created_from_tbw102(broker: BrokerController) -> None:
    assert broker.topic_config_manager.get("TBW102") is not None
    r = send(broker, RequestCode.SEND_MESSAGE_V2, v2_fields(b="BrandNew", e="0", d="3"), b"x")
    assert r is not None and r.code == ResponseCode.SUCCESS, r.remark
    cfg = broker.topic_config_manager.get("BrandNew")
    assert cfg is not None and (cfg.read_queue_nums, cfg.write_queue_nums) == (3, 3)
    # without a default topic that lets topics inherit, nothing is created
    r = send(broker, RequestCode.SEND_MESSAGE_V2, v2_fields(b="Other", c="T"), b"x")
    assert r is not None and r.code == ResponseCode.TOPIC_NOT_EXIST


async def test_oneway_sync_flush_send_is_flushed_not_answered(tmp_path: Path) -> None:
    c = BrokerController(BrokerConfig(
        store_path_root_dir=str(tmp_path), listen_port=0, maped_file_size_commit_log=1 << 20,
        maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64, max_index_num=256,
        flush_disk_type=FlushDiskType.SYNC_FLUSH, broker_role=BrokerRole.ASYNC_MASTER))
    c._load()
    commit = c.group_commit
    assert commit is not None
    try:
        c.topic_config_manager.update(TopicConfig("T", 2, 2))
        handler, _ = c._handler_table().lookup(RequestCode.SEND_MESSAGE_V2)
        assert handler is not None
        conn = FakeConn()
        for oneway in (True, False):
            cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, v2_fields(), b"x",
                                          oneway=oneway)
            assert handler(conn, cmd) is None  # type: ignore[arg-type]
        assert len(commit.waiters) == 2  # the oneway send's bytes are flushed too
        async with trio.open_nursery() as nursery:
            await nursery.start(commit.run)
            with trio.fail_after(10):
                await conn.wait_sent(1)
            await wait_until(lambda: not commit.waiters, 10, "no flush waiter left", interval=0.01)
            nursery.cancel_scope.cancel()
        [answer] = conn.sent  # only the two-way send is answered
        assert answer.code == ResponseCode.SUCCESS and answer.opaque == cmd.opaque
    finally:
        c._persist_and_close()


def test_a_batch_the_fast_put_leaves_alone_is_answered_by_the_general_path(
        broker: BrokerController) -> None:
    """A batch bigger than a commit-log file (1 MiB here): the fast put
    (CommitLog.put_batch) writes nothing and the general path refuses it, so
    the producer hears MESSAGE_ILLEGAL and the log stays empty; a batch that
    fits is stored by the fast put, ids and all."""
    big = [(0, b"x" * 400_000, properties_to_string({"UNIQ_KEY": f"u{i}"})) for i in range(3)]
    fields = SendMessageRequestHeader("pg", "T", 0, batch=True).to_fields()
    r = send(broker, RequestCode.SEND_BATCH_MESSAGE, fields, encode_batch(big))
    assert r is not None and r.code == ResponseCode.MESSAGE_ILLEGAL, r
    assert broker.message_store.get_max_phy_offset() == 0
    r = send(broker, RequestCode.SEND_BATCH_MESSAGE, fields, encode_batch(big[:2]))
    assert r is not None and r.code == ResponseCode.SUCCESS, r.remark
    assert len(broker.message_store.find_consume_queue("T", 0).get_entries(0, 10)) == 2
    assert [m.body for m in stored(broker, "T", 0)][0] == b"x" * 400_000  # a pull's bytes: one
    header = SendMessageResponseHeader.from_fields(r.ext_fields)
    assert len(header.msg_id.split(",")) == 2


_SINGLE_PIECES = st.sampled_from(["TAGS\x01", "KEYS\x01", "UNIQ_KEY\x01", "DELAY\x01",
                                  "TRAN_MSG\x01", "true", "3", "\x02", "\x01", "a", "b c", "ü",
                                  "XDELAY\x01", "WAIT\x01false"])


@settings(max_examples=60, deadline=None)
@given(sends=st.lists(st.tuples(st.lists(_SINGLE_PIECES, max_size=8).map("".join),
                                st.sampled_from(["0", "4", "8"]), st.binary(min_size=1, max_size=64)),
                      min_size=1, max_size=4))
def test_single_sends_store_what_the_general_path_stores(
        sends: list[tuple[str, str, bytes]]) -> None:
    """A single send without delay or transaction goes into the log as a batch
    of one (CommitLog.put_batch); with DELAY_PROBE emptied every send takes the
    general path instead. Both brokers answer alike and hold the same bytes."""
    logs = []
    for probe in (send_service.DELAY_PROBE, ""):
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(send_service, "DELAY_PROBE", probe), \
                mock.patch("broker.store.commit_log.time",
                           SimpleNamespace(time=lambda: 1_700_000_000.5)):
            c = BrokerController(BrokerConfig(
                store_path_root_dir=tmp, listen_port=0, maped_file_size_commit_log=1 << 20,
                maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64,
                max_index_num=256))
            c._load()
            c.topic_config_manager.update(TopicConfig("T", 2, 2))
            try:
                answers = []
                for props, sys_flag, body in sends:
                    r = send(c, RequestCode.SEND_MESSAGE_V2, v2_fields(i=props, f=sys_flag),
                             body)
                    assert r is not None
                    answers.append((r.code, r.remark, r.ext_fields))
                store = c.message_store
                logs.append((answers, store.commit_log.get_data(0, store.commit_log.max_offset),
                             store.find_consume_queue("T", 1).get_entries(0, 10)))
            finally:
                c._persist_and_close()
    assert logs[0] == logs[1]


def test_send_batch_message_with_batch_false_is_one_message(broker: BrokerController) -> None:
    """RocketMQ's broker decides by the header's batch flag, not the code: a
    SEND_BATCH_MESSAGE saying batch=false (or nothing) stores its body as one
    message."""
    body = encode_batch([(0, b"b0", ""), (0, b"b1", "")])
    cases = [
        v2_fields(e="0", m="false"),  # RocketMQ's V2 header (what 320 carries), batch false
        v2_fields(e="0", m=None),  # the flag left out
        SendMessageRequestHeader("pg", "T", 0).to_fields(),  # the long names, batch false
    ]
    for n, fields in enumerate(cases):
        r = send(broker, RequestCode.SEND_BATCH_MESSAGE, fields, body)
        assert r is not None and r.code == ResponseCode.SUCCESS, r and r.remark
        h = SendMessageResponseHeader.from_fields(r.ext_fields)
        assert h.queue_offset == n and "," not in h.msg_id
    assert [m.body for m in stored(broker, "T", 0)] == [body] * len(cases)


# ---- a send to a retry topic past the group's retry limit ----------------------------------

RETRY, DLQ = "%RETRY%cg", "%DLQ%cg"


def retry_send(c: BrokerController, body: bytes, j: int, l: int | None = None,  # noqa: E741
               props: dict[str, str] | None = None) -> SendMessageResponseHeader:
    """A send to ``%RETRY%cg`` as RocketMQ's producer makes it (V2 header,
    reconsumeTimes ``j``, maxReconsumeTimes ``l``)."""
    text = properties_to_string({"UNIQ_KEY": body.decode(), **(props or {})})
    r = send(c, RequestCode.SEND_MESSAGE_V2,
             v2_fields(b=RETRY, e="0", i=text, j=str(j), l=None if l is None else str(l)), body)
    assert r is not None and r.code == ResponseCode.SUCCESS, r and r.remark
    return SendMessageResponseHeader.from_fields(r.ext_fields)


def test_a_send_to_a_retry_topic_at_the_retry_limit_goes_to_the_dlq(
        broker: BrokerController) -> None:
    broker.topic_config_manager.update(TopicConfig(RETRY, 1, 1))
    retry_send(broker, b"r15", 15)  # below the group's retryMaxTimes (16): the retry topic
    h = retry_send(broker, b"r16", 16, props={"DELAY": "3"})  # at it: the DLQ, undelayed
    [dead] = stored(broker, DLQ, 0)
    assert (h.queue_id, h.queue_offset, h.msg_id) == (0, 0, dead.msg_id)
    assert (dead.topic, dead.body, dead.reconsume_times) == (DLQ, b"r16", 16)
    assert "DELAY" not in dead.properties and dead.properties["UNIQ_KEY"] == "r16"
    cfg = broker.topic_config_manager.get(DLQ)
    assert cfg is not None and (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == \
        (1, 1, PERM_WRITE)
    assert broker.message_store.get_max_offset_in_queue(SCHEDULE_TOPIC, 2) == 0  # not delayed
    # the header's maxReconsumeTimes (RocketMQ's clients since 3.4.9) rules over the group's
    retry_send(broker, b"l2-j1", 1, l=2)
    retry_send(broker, b"l2-j2", 2, l=2)
    # the group's retryMaxTimes otherwise
    cfg_g = broker.subscription_group_manager.find("cg")
    assert cfg_g is not None
    broker.subscription_group_manager.update(dataclasses.replace(cfg_g, retry_max_times=3))
    retry_send(broker, b"g3-j2", 2)
    retry_send(broker, b"g3-j3", 3)
    assert [(m.body, m.reconsume_times) for m in stored(broker, RETRY, 0)] == \
        [(b"r15", 15), (b"l2-j1", 1), (b"g3-j2", 2)]
    assert [m.body for m in stored(broker, DLQ, 0)] == [b"r16", b"l2-j2", b"g3-j3"]


def test_retry_sends_need_the_group_and_no_batch(tmp_path: Path) -> None:
    c = BrokerController(BrokerConfig(
        store_path_root_dir=str(tmp_path), listen_port=0, maped_file_size_commit_log=1 << 20,
        maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64, max_index_num=256,
        auto_create_subscription_group=False))
    c._load()
    try:
        c.topic_config_manager.update(TopicConfig(RETRY, 1, 1))
        r = send(c, RequestCode.SEND_MESSAGE_V2, v2_fields(b=RETRY, e="0", j="16"), b"x")
        assert r is not None and r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, r
        assert "cg" in (r.remark or "")
        c.subscription_group_manager.update(SubscriptionGroupConfig("cg"))
        # a batch to a retry topic is refused, as RocketMQ 5's broker does
        r = send(c, RequestCode.SEND_BATCH_MESSAGE, v2_fields(b=RETRY, e="0", m="true", j="16"),
                 encode_batch([(0, b"a", ""), (0, b"b", "")]))
        assert r is not None and r.code == ResponseCode.MESSAGE_ILLEGAL
        assert r.remark == f"batch request does not support retry group {RETRY}"
        assert c.topic_config_manager.get(DLQ) is None
        assert c.message_store.get_max_phy_offset() == 0
    finally:
        c._persist_and_close()
