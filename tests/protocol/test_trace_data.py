"""protocol.trace_data: RocketMQ's trace records, written as its Java client writes
them, read back from every client version (Java 4.4 to 5.x, the C++ client)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.trace_data import (
    ConsumeReturnType,
    MessageType,
    TraceBean,
    TraceContext,
    TraceType,
    decode,
    encode,
    encode_records,
    trace_views,
)

C, F = "\x01", "\x02"
MSG_ID = "7F0000011F4018B4AAC2573B6D5F0000"
OFFSET_ID = "7F00000100002A9F0000000000000C2E"
TS = 1_700_000_000_123


def rec(*fields: object) -> str:
    return C.join(str(f) for f in fields) + F


def pub(**kw: object) -> TraceContext:
    bean = TraceBean(topic="TopicA", msg_id=MSG_ID, offset_msg_id=OFFSET_ID, tags="TagA",
                     keys="k1 k2", store_host="127.0.0.1:10911", body_length=5,
                     msg_type=MessageType.Normal_Msg)
    ctx = TraceContext(TraceType.Pub, timestamp=TS, region_id="DefaultRegion",
                       group_name="pg", cost_time=3, success=True, beans=[bean])
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


# ---- what RocketMQ's Java encoder writes ------------------------------------------


def test_pub_is_the_java_clients_fourteen_fields() -> None:
    bean = encode(pub())
    assert bean.data == rec("Pub", TS, "DefaultRegion", "pg", "TopicA", MSG_ID, "TagA", "k1 k2",
                            "127.0.0.1:10911", 5, 3, 0, OFFSET_ID, "true")
    # the trace message is indexed under the msgId and the message's keys
    assert bean.keys == [MSG_ID, "k1 k2"]


def test_sub_before_and_after_are_the_java_clients_fields() -> None:
    beans = [TraceBean(msg_id="A" * 32, retry_times=0, keys="k1"),
             TraceBean(msg_id="B" * 32, retry_times=2)]
    before = TraceContext(TraceType.SubBefore, timestamp=TS, region_id="DefaultRegion",
                          group_name="cg", request_id="REQ", beans=beans)
    assert encode(before).data == (rec("SubBefore", TS, "DefaultRegion", "cg", "REQ", "A" * 32,
                                       0, "k1")
                                   + rec("SubBefore", TS, "DefaultRegion", "cg", "REQ", "B" * 32,
                                         2, "null"))
    after = TraceContext(TraceType.SubAfter, timestamp=TS + 7, group_name="cg",
                         request_id="REQ", cost_time=4, success=False,
                         context_code=ConsumeReturnType.FAILED, beans=beans)
    assert encode(after).data == (rec("SubAfter", "REQ", "A" * 32, 4, "false", "k1", 4, TS + 7, "cg")
                                  + rec("SubAfter", "REQ", "B" * 32, 4, "false", "null", 4,
                                        TS + 7, "cg"))
    assert encode(after).keys == ["A" * 32, "k1", "B" * 32]


def test_end_transaction_fields() -> None:
    bean = TraceBean(topic="T", msg_id=MSG_ID, tags="", keys="k", store_host="h:1",
                     msg_type=MessageType.Trans_Msg_Half, transaction_id="TX",
                     transaction_state="COMMIT_MESSAGE", from_transaction_check=True)
    ctx = TraceContext(TraceType.EndTransaction, timestamp=TS, group_name="pg", beans=[bean])
    assert encode(ctx).data == rec("EndTransaction", TS, "DefaultRegion", "pg", "T", MSG_ID,
                                   "null", "k", "h:1", 1, "TX", "COMMIT_MESSAGE", "true")
    (back,) = decode(encode(ctx).data)
    assert back.beans[0] == bean


def java_split(record: str) -> list[str]:
    """Java's ``String.split``: trailing empty strings are dropped."""
    parts = record.split(C)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


@pytest.mark.parametrize("ctx", [
    pub(),
    TraceContext(TraceType.Pub, timestamp=TS, beans=[TraceBean()]),
    TraceContext(TraceType.SubBefore, timestamp=TS, beans=[TraceBean(msg_id="X")]),
    TraceContext(TraceType.SubAfter, timestamp=TS, beans=[TraceBean(msg_id="X")]),
])
def test_java_decoder_finds_every_field(ctx: TraceContext) -> None:
    """RocketMQ's Java decoder indexes fields after ``split``, which drops trailing
    empties: an empty last field (no keys) would make it fail. None is empty."""
    expected = {TraceType.Pub: 14, TraceType.SubBefore: 8, TraceType.SubAfter: 9}[ctx.trace_type]
    for record in encode(ctx).data.split(F)[:-1]:
        assert len(java_split(record)) == expected


def test_separators_in_values_never_split_a_record() -> None:
    ctx = pub(group_name="g\x01x")
    ctx.beans[0].tags = "t\x02y"
    (back,) = decode(encode(ctx).data)
    assert back.group_name == "g x" and back.beans[0].tags == "t y"
    assert back.beans[0].msg_id == MSG_ID


# ---- reading every version ----------------------------------------------------------


def test_decode_pub_versions() -> None:
    v44 = rec("Pub", TS, "R", "pg", "T", MSG_ID, "TagA", "null", "h:1", 9, 2, 3, "false")
    (c,) = decode(v44)  # RocketMQ 4.4: no offsetMsgId
    assert (c.success, c.beans[0].offset_msg_id, c.beans[0].keys) == (False, "", "")
    assert c.beans[0].msg_type is MessageType.Delay_Msg and c.cost_time == 2
    v5 = rec("Pub", TS, "R", "pg", "T", MSG_ID, "null", "k", "h:1", 9, 2, 0, OFFSET_ID, "true",
             "10.0.0.7")
    (c,) = decode(v5)  # 5.x: clientHost appended
    assert c.beans[0].client_host == "10.0.0.7" and c.beans[0].offset_msg_id == OFFSET_ID
    assert c.beans[0].tags == "" and c.success


def test_decode_sub_after_versions() -> None:
    (v44,) = decode(rec("SubAfter", "REQ", MSG_ID, 5, "true", "k"))
    assert (v44.has_timestamp, v44.timestamp, v44.context_code, v44.group_name) == (False, 0, 0, "")
    (v490,) = decode(rec("SubAfter", "REQ", MSG_ID, 5, "true", "k", 2, TS))
    assert (v490.has_timestamp, v490.timestamp, v490.context_code) == (True, TS, 2)
    (v49x,) = decode(rec("SubAfter", "REQ", MSG_ID, 5, "false", "k", 4, TS, "cg"))
    assert (v49x.group_name, v49x.success, v49x.cost_time) == ("cg", False, 5)


# The official C++ client's TraceUtil::CovertTraceContextToTransferBean (rocketmq-client-cpp
# 2.x): Pub as Java's 14 fields (msgType as the enum's number), SubBefore as Java's,
# SubAfter with 6 fields only, and "dKey" where a message has no keys.
CPP_PUB = rec("Pub", TS, "DefaultRegion", "cpp-pg", "TopicA", MSG_ID, "TagA", "dKey",
              "127.0.0.1:10911", 11, 4, 0, OFFSET_ID, "true")
CPP_BEFORE = rec("SubBefore", TS + 10, "DefaultRegion", "cpp-cg", "CPPREQ", MSG_ID, 0, "dKey")
CPP_AFTER = rec("SubAfter", "CPPREQ", MSG_ID, 6, "true", "dKey")


def test_decode_cpp_client_records() -> None:
    p, b, a = decode(CPP_PUB + CPP_BEFORE + CPP_AFTER)
    assert (p.trace_type, p.group_name, p.beans[0].keys, p.beans[0].body_length) == (
        TraceType.Pub, "cpp-pg", "", 11)
    assert (b.trace_type, b.group_name, b.request_id, b.beans[0].keys) == (
        TraceType.SubBefore, "cpp-cg", "CPPREQ", "")
    assert (a.trace_type, a.request_id, a.cost_time, a.success, a.has_timestamp) == (
        TraceType.SubAfter, "CPPREQ", 6, True, False)
    views = trace_views(MSG_ID, [("10.0.0.9", p), ("10.0.0.9", b), ("10.0.0.9", a)])
    assert [v.trace_type for v in views] == ["Pub", "SubBefore", "SubAfter"]
    after = views[2]
    # the SubAfter takes its group from the SubBefore, its time from it plus the cost
    assert (after.group_name, after.timestamp, after.topic) == ("cpp-cg", TS + 10 + 6, "TopicA")


def test_unreadable_records_are_skipped() -> None:
    good = encode(pub()).data
    junk = [
        rec("Pub", "notanumber", "R", "pg"),
        rec("Pub", TS, "R", "pg", "T", MSG_ID, "t", "k", "h", "x9", 2, 0, "", "true"),
        rec("Pub", TS, "R", "pg", "T", MSG_ID, "t", "k", "h", 9, 2, 77, "", "true"),  # msgType
        rec("SubBefore", TS, "R", "cg"),
        rec("SubAfter", "REQ"),
        rec("Unknown", 1, 2),
        rec("SubAfter", "REQ", MSG_ID, "٣", "true", "k"),  # a non-ASCII digit
        F, "",
    ]
    assert decode("".join(junk) + good) == decode(good)
    assert decode("") == []


def test_decode_only_one_message_and_at_most_a_limit() -> None:
    other = pub()
    other.beans[0].msg_id = "OTHER"
    after = decode(rec("SubAfter", "Q", MSG_ID, 8, "true", "null"))[0]
    body = encode(other).data + encode(pub()).data + rec("SubAfter", "Q", MSG_ID, 8, "true",
                                                          "null") + encode(other).data
    assert decode(body, MSG_ID) == [pub(), after]
    assert decode(body, "OTHER") == [other, other]
    assert decode(body, limit=3) == decode(body)[:3]
    assert decode(body, MSG_ID, limit=1) == [pub()]


def test_hostile_bodies_cost_a_scan() -> None:
    """A body anyone wrote: separators by the million build nothing, a record of a
    million fields is read as far as its type's fields go."""
    assert decode(F * 1_000_000) == [] and decode(C * 1_000_000) == []
    long = encode(pub()).data[:-1] + C * 1_000_000 + "tail" + F
    (c,) = decode(long)
    assert c.beans[0].msg_id == MSG_ID and c.success
    many = encode(pub()).data * 10_000
    assert len(decode(many, MSG_ID, limit=100)) == 100


# ---- round trips ----------------------------------------------------------------------

word = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]),
               min_size=1, max_size=20).filter(lambda s: s not in ("null", "dKey"))
ms = st.integers(0, 2**62)
small = st.integers(0, 2**31 - 1)


@given(ts=ms, region=word, group=word, topic=word, msg_id=word, tags=word | st.just(""),
       keys=word | st.just(""), host=word, length=small, cost=small,
       mtype=st.sampled_from(list(MessageType)), offset_id=word, ok=st.booleans())
def test_pub_round_trip(ts: int, region: str, group: str, topic: str, msg_id: str, tags: str,
                        keys: str, host: str, length: int, cost: int, mtype: MessageType,
                        offset_id: str, ok: bool) -> None:
    bean = TraceBean(topic=topic, msg_id=msg_id, offset_msg_id=offset_id, tags=tags, keys=keys,
                     store_host=host, body_length=length, msg_type=mtype)
    ctx = TraceContext(TraceType.Pub, timestamp=ts, region_id=region, group_name=group,
                       cost_time=cost, success=ok, beans=[bean])
    assert decode(encode(ctx).data) == [ctx]


@given(ts=ms, region=word, group=word, req=word,
       beans=st.lists(st.tuples(word, small, word | st.just("")), min_size=1, max_size=5),
       cost=small, ok=st.booleans(), code=st.sampled_from(list(ConsumeReturnType)))
def test_sub_round_trip(ts: int, region: str, group: str, req: str,
                        beans: list[tuple[str, int, str]], cost: int, ok: bool,
                        code: ConsumeReturnType) -> None:
    tb = [TraceBean(msg_id=m, retry_times=r, keys=k) for m, r, k in beans]
    before = TraceContext(TraceType.SubBefore, timestamp=ts, region_id=region, group_name=group,
                          request_id=req, beans=tb)
    got = decode(encode(before).data)
    assert [(c.timestamp, c.region_id, c.group_name, c.request_id) for c in got] == [
        (ts, region, group, req)] * len(tb)
    assert [c.beans[0] for c in got] == tb
    after = TraceContext(TraceType.SubAfter, timestamp=ts, region_id="", group_name=group,
                         request_id=req, cost_time=cost, success=ok, context_code=int(code),
                         beans=tb)
    got = decode(encode(after).data)
    assert [(c.timestamp, c.group_name, c.request_id, c.cost_time, c.success, c.context_code)
            for c in got] == [(ts, group, req, cost, ok, int(code))] * len(tb)
    assert [(c.beans[0].msg_id, c.beans[0].keys) for c in got] == [(b.msg_id, b.keys) for b in tb]


def test_records_one_per_bean_with_their_keys() -> None:
    ctx = TraceContext(TraceType.SubBefore, timestamp=TS, beans=[
        TraceBean(msg_id="A", keys="k1 k2"), TraceBean(msg_id="B")])
    records = encode_records(ctx)
    assert [(r.msg_id, r.keys) for r in records] == [("A", "k1 k2"), ("B", "")]
    assert "".join(r.data for r in records) == encode(ctx).data


# ---- views ----------------------------------------------------------------------------


def test_views_of_one_message_ordered_and_paired() -> None:
    other = pub()
    other.beans[0].msg_id = "OTHER"
    before = TraceContext(TraceType.SubBefore, timestamp=TS + 100, region_id="R",
                          group_name="cg", request_id="Q", beans=[
                              TraceBean(msg_id=MSG_ID), TraceBean(msg_id="OTHER")])
    # RocketMQ 4.4's SubAfter: no group, no timestamp
    after = decode(rec("SubAfter", "Q", MSG_ID, 8, "true", "null"))[0]
    records = [("h2", after), ("h2", before), ("h1", pub()), ("h1", other)]
    views = trace_views(MSG_ID, records)
    assert [(v.trace_type, v.group_name, v.client_host, v.timestamp) for v in views] == [
        ("Pub", "pg", "h1", TS), ("SubBefore", "cg", "h2", TS + 100),
        ("SubAfter", "cg", "h2", TS + 108)]
    assert views[0].to_dict()["msgType"] == "Normal_Msg" and views[0].status == "success"
    assert all(v.topic == "TopicA" and v.msg_id == MSG_ID for v in views)
    assert views[2].region_id == "R"
