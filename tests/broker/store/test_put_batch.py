"""CommitLog.put_batch / DefaultMessageStore.put_batch: a producer's batch from
the wire into the log without a message object each.

It must write exactly what ``put_messages(build_batch_inners(...))`` writes for
the same arguments (records, results, dispatch requests, queue offsets), and
answer None with nothing written wherever that path refuses or treats the
batch specially, so the caller can take that path and say what is wrong.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.message_rewrite import build_batch_inners
from broker.store import DefaultMessageStore, PutMessageStatus
from broker.store.commit_log import CommitLog, DispatchRequest
from broker.topic_validator import RMQ_SYS_SCHEDULE_TOPIC
from protocol.message import properties_to_string
from protocol.record import MAX_PROPERTIES_BYTES, decode_records
from tests.broker.store.helpers import make_config, open_store

FILE_SIZE = 4096
MAX_BODY = 2048
NOW_MS = 1_700_000_000_123
Item = tuple[int, bytes, str]


@contextmanager
def fixed_clock(ms: int = NOW_MS) -> Iterator[None]:
    """Both paths stamp records with the time of the put: make it one time."""
    fake = SimpleNamespace(time=lambda: ms / 1000, monotonic=time.monotonic)
    with mock.patch("broker.store.commit_log.time", fake):
        yield


def new_log(root: Path) -> CommitLog:
    log = CommitLog(root, FILE_SIZE, "10.0.0.9:10911", MAX_BODY)
    log.load()
    return log


def log_bytes(log: CommitLog) -> list[tuple[str, bytes]]:
    return [(mf.path.name, bytes(mf.mm[:mf.wrote_position]))
            for mf in log.mapped_file_queue.files]


@contextmanager
def two_logs(root: Path, fast_kernel: Any = None) -> Iterator[tuple[CommitLog, CommitLog]]:
    """(general, fast): two fresh logs under ``root``, closed after; the fast
    one runs ``fast_kernel`` as its batch kernel when one is given. After the
    block they must hold the same bytes and queue offsets."""
    general, fast = new_log(root / "general"), new_log(root / "fast")
    if fast_kernel is not None:
        fast.batch_kernel = fast_kernel
    try:
        yield general, fast
        assert log_bytes(fast) == log_bytes(general)
        assert fast.topic_queue_table == general.topic_queue_table
    finally:
        general.close()
        fast.close()


def put_general(log: CommitLog, topic: str, queue_id: int, items: list[Item],
                **kw: Any) -> tuple[Any, list[DispatchRequest]]:
    return log.put_messages(build_batch_inners(topic, queue_id, items, **kw))


def outcome(done: tuple[Any, list[DispatchRequest]]) -> tuple[Any, ...]:
    result, dispatches = done
    ar = result.append_result
    return (result.put_message_status, result.detail,
            None if ar is None else (ar.status, ar.wrote_offset, ar.wrote_bytes, ar.msg_id,
                                     ar.store_timestamp, ar.logics_offset, ar.msg_num),
            dispatches)


KW: dict[str, Any] = dict(sys_flag=0, born_timestamp=1_699_999_999_000, born_host="10.0.0.1:9",
          reconsume_times=2)

_PIECES = st.sampled_from(["TAGS\x01", "KEYS\x01", "UNIQ_KEY\x01", "\x02", "\x01", "a", "b c",
                           "XTAGS\x01", "ü", "", "WAIT\x01true", "€uro"])
_ITEMS = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1),
                            st.binary(min_size=1, max_size=400),
                            st.lists(_PIECES, max_size=10).map("".join)),
                  min_size=1, max_size=6)
_BATCHES = st.lists(st.tuples(st.sampled_from(["T", "Other", "%RETRY%g", "not a topic"]),
                              st.integers(0, 3), _ITEMS), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_BATCHES, st.sampled_from([0, 1, 2, 4, 8, 2**31 - 1, -(2**31)]),
       st.integers(1, 2**40))  # 0 is "now" to build_batch_inners, a value to put_batch
def test_put_batch_writes_what_the_general_path_writes(
        tmp_path_factory: pytest.TempPathFactory,
        batches: list[tuple[str, int, list[Item]]], sys_flag: int, born: int) -> None:
    kw: dict[str, Any] = dict(KW, sys_flag=sys_flag, born_timestamp=born)
    with two_logs(tmp_path_factory.mktemp("logs")) as (general, fast), fixed_clock():
        for topic, queue_id, items in batches:
            want = put_general(general, topic, queue_id, items, **kw)
            got = fast.put_batch(topic, queue_id, items, **kw)
            if got is None:  # left to the general path, which refuses it
                assert want[0].put_message_status is PutMessageStatus.MESSAGE_ILLEGAL
            else:
                assert outcome(got) == outcome(want)


def test_a_batch_that_does_not_fit_goes_to_the_next_file_behind_a_blank(
        tmp_path: Path) -> None:
    general, fast = new_log(tmp_path / "general"), new_log(tmp_path / "fast")
    uniq = properties_to_string({"UNIQ_KEY": "AC11000000010000", "TAGS": "TagA", "KEYS": "k"})
    items = [(7, b"x" * 700, uniq), (0, b"y" * 600, "")]  # about 1.5 KB of records
    try:
        with fixed_clock():
            for queue_id in (0, 1, 0, 2):  # two fill most of a 4 KiB file, the third moves on
                want = put_general(general, "T", queue_id, items, **KW)
                got = fast.put_batch("T", queue_id, items, **KW)
                assert got is not None and outcome(got) == outcome(want)
        files = log_bytes(fast)
        assert files == log_bytes(general)
        assert [len(data) for _, data in files][0] == FILE_SIZE  # padded with a BLANK
        records = decode_records(files[1][1])
        assert [(r.queue_id, r.queue_offset, r.flag, r.tags) for r in records] == [
            (0, 2, 7, "TagA"), (0, 3, 0, None), (2, 0, 7, "TagA"), (2, 1, 0, None)]
        assert {r.born_host for r in records} == {"10.0.0.1:9"}
    finally:
        general.close()
        fast.close()


def _refusals() -> list[tuple[str, dict[str, Any]]]:
    ok = [(0, b"body", properties_to_string({"UNIQ_KEY": "u1"}))]
    return [
        ("the schedule topic", dict(topic=RMQ_SYS_SCHEDULE_TOPIC)),
        ("a bad topic name", dict(topic="a b")),
        ("a topic too long", dict(topic="t" * 300)),
        ("no messages", dict(items=[])),
        ("a negative queue id", dict(queue_id=-1)),
        ("a queue id past int32", dict(queue_id=2**31)),
        ("negative reconsume times", dict(reconsume_times=-1)),
        ("a flag past int32", dict(items=[(2**31, b"body", "")])),
        ("a sysFlag past int32", dict(sys_flag=2**31)),
        ("a born time past int64", dict(born_timestamp=2**63)),
        ("a born host that is not host:port", dict(born_host="nowhere")),
        ("properties too long", dict(items=ok + [(0, b"b", "K\x01" + "v" * MAX_PROPERTIES_BYTES)])),
        ("a body too long", dict(items=ok + [(0, b"b" * (MAX_BODY + 1), "")])),
        ("properties that are not UTF-8", dict(items=ok + [(0, b"b", "K\x01\ud800")])),
        ("a batch bigger than a file", dict(items=[(0, b"b" * 1500, "")] * 3)),
    ]


@pytest.mark.parametrize("why,change", _refusals(), ids=[w for w, _ in _refusals()])
def test_put_batch_leaves_the_unusual_to_the_general_path(
        tmp_path: Path, why: str, change: dict[str, Any]) -> None:
    args: dict[str, Any] = dict(topic="T", queue_id=1,
                                items=[(0, b"body", properties_to_string({"UNIQ_KEY": "u1"}))],
                                **KW)
    args.update(change)
    fast = new_log(tmp_path / "fast")
    try:
        assert fast.put_batch(args.pop("topic"), args.pop("queue_id"), args.pop("items"),
                              **args) is None, why
        assert all(mf.wrote_position == 0 for mf in fast.mapped_file_queue.files)
        assert fast.topic_queue_table == {}
    finally:
        fast.close()


def test_the_general_path_refuses_what_put_batch_leaves_to_it(tmp_path: Path) -> None:
    """So a None from put_batch is never a batch the general path would take
    as it is (the schedule topic aside: it is stored, with its own tag codes)."""
    for why, change in _refusals():
        args: dict[str, Any] = dict(topic="T", queue_id=1,
                                    items=[(0, b"body", properties_to_string({"UNIQ_KEY": "u"}))],
                                    **KW)
        args.update(change)
        log = new_log(tmp_path / why.replace(" ", "-"))
        try:
            result, _ = log.put_messages(build_batch_inners(
                args.pop("topic"), args.pop("queue_id"), args.pop("items"), **args))
            if why == "the schedule topic":
                assert result.put_message_status is PutMessageStatus.PUT_OK
            else:
                assert result.put_message_status in (
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED), why
        finally:
            log.close()


def _store_state(store: DefaultMessageStore) -> tuple[Any, ...]:
    cq = store.find_consume_queue("T", 1)
    entries = cq.get_entries(0, 100)
    found = {key: sorted(store.query_message("T", key, 10, 0, 2**62))
             for key in ("k1", "k2", "ua", "ub", "uc")}
    data = store.commit_log.get_data(0, store.commit_log.max_offset)
    return entries, found, data


def test_the_store_indexes_a_fast_batch_as_a_general_one(tmp_path: Path) -> None:
    items = [(0, b"a", properties_to_string({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ua"})),
             (3, b"b", properties_to_string({"UNIQ_KEY": "ub", "TAGS": ""})),
             (0, b"c", properties_to_string({"KEYS": "k1", "WAIT": "true", "UNIQ_KEY": "uc"}))]
    general = open_store(make_config(tmp_path / "general"))
    fast = open_store(make_config(tmp_path / "fast"))
    try:
        with fixed_clock(int(time.time() * 1000)):  # the index files' clock is the real one
            for _ in range(3):
                want = general.put_messages(build_batch_inners("T", 1, items, **KW))
                got = fast.put_batch("T", 1, items, **KW)
                assert got is not None
                assert outcome((got, [])) == outcome((want, []))
        assert _store_state(fast) == _store_state(general)
        assert len(_store_state(fast)[1]["k1"]) == 6
    finally:
        general.shutdown()
        fast.shutdown()


def test_a_store_that_cannot_take_writes_refuses_a_fast_batch(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path))
    items = [(0, b"a", "")]
    try:
        store.disk_full = True
        result = store.put_batch("T", 0, items, **KW)
        assert result is not None
        assert result.put_message_status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        store.disk_full = False
        assert store.put_batch("T", 0, [], **KW) is None  # the general path says why
        result = store.put_batch("T", 0, items, **KW)
        assert result is not None and result.put_message_status is PutMessageStatus.PUT_OK
    finally:
        store.shutdown()
