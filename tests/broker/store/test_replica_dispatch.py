"""The batched dispatch of records a store did not write itself (a slave's
appends, recovery): the scan of broker/store/scan_kernel.py (plain Python,
compiled) and its Python twin replica_dispatch.scan_loop against
decode_record; and slave stores dispatching through the scan against a slave
dispatching one decoded record at a time (the scan turned off: every record
takes ``_walk``'s step), fed the same bytes: the same consume queues, index,
queue offsets, long-poll wake-ups and cursor, a failing dispatcher included."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store import DefaultMessageStore, PutMessageStatus, StoreConfig
from broker.store import scan_kernel as plain_kernel
from broker.store.commit_log import END_FILE_MIN_BLANK_LENGTH, SCHEDULE_TOPIC, DispatchRequest
from broker.store.replica_dispatch import (
    MAX_RECORDS,
    SCAN_HEAD,
    ScanResult,
    compiled_scan,
    scan_loop,
)
from protocol.errors import CorruptRecordError
from protocol.hashing import tags_hash_code
from protocol.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from protocol.record import (
    RECORD_HEAD_SIZE,
    RecordStatus,
    check_record,
    decode_record,
    encode_blank,
    encode_record,
)
from tests.broker.store.helpers import make_config, open_store

SCANS: list[Any] = [pytest.param(plain_kernel.scan_records, id="kernel-plain-python"),
                    pytest.param(scan_loop, id="python-loop")]
if compiled_scan() is not None:
    SCANS.append(pytest.param(compiled_scan(), id="kernel-compiled"))

CL_SIZE = 4096
DELAYS = {1: 1000, 2: 5000, 3: 10000}
HOST = b"\x0a\x00\x00\x01\x00\x00\x04\xd2"


def props(*entries: tuple[str, str]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in entries).encode()


class LogBuilder:
    """A commit log's bytes as a master lays them out: records at their
    offsets with their queue's next offset, a BLANK where the next record
    does not fit its file."""

    def __init__(self, file_size: int = CL_SIZE) -> None:
        self.file_size = file_size
        self.data = bytearray()
        self.next_offsets: dict[tuple[bytes, int], int] = {}
        self.offsets: list[int] = []  # each record's

    def add(self, topic: bytes, queue_id: int, body: bytes, properties: bytes = b"",
            store_ms: int = 1_700_000_000_000, sys_flag: int = 0) -> None:
        size = RECORD_HEAD_SIZE + len(body) + 1 + len(topic) + 2 + len(properties)
        room = self.file_size - len(self.data) % self.file_size
        if size + END_FILE_MIN_BLANK_LENGTH > room:
            self.data += encode_blank(room)
        key = (topic, queue_id)
        queue_offset = self.next_offsets.get(key, 0)
        self.next_offsets[key] = queue_offset + 1
        self.offsets.append(len(self.data))
        self.data += encode_record(
            topic=topic, queue_id=queue_id, flag=0, body=body, properties=properties,
            sys_flag=sys_flag, born_timestamp=1, born_host=HOST, store_timestamp=store_ms,
            store_host=HOST, reconsume_times=0, prepared_transaction_offset=0,
            queue_offset=queue_offset, physical_offset=len(self.data))


def reference_request(buf: Any, pos: int) -> DispatchRequest:
    """What the per-record path makes of the record at ``pos`` (the store's
    ``_dispatch_request``, from decode_record)."""
    m = decode_record(buf, pos)
    if m.topic == SCHEDULE_TOPIC:
        tags_code = m.store_timestamp + DELAYS.get(m.queue_id + 1, 0)
    else:
        tags_code = tags_hash_code(m.properties.get(PROPERTY_TAGS))
    return DispatchRequest(m.topic, m.queue_id, m.commit_log_offset, m.store_size, tags_code,
                           m.store_timestamp, m.queue_offset, m.properties.get(PROPERTY_KEYS),
                           m.properties.get(PROPERTY_UNIQ_KEY), m.sys_flag)


def reference_scan(buf: Any, pos: int, limit: int) -> tuple[list[DispatchRequest], int]:
    """The requests of the message records from ``pos`` that check_record and
    decode_record take, up to the first they do not, and where that is."""
    out: list[DispatchRequest] = []
    while True:
        check = check_record(buf, pos, limit, verify_crc=False)
        if check.status is not RecordStatus.MESSAGE:
            return out, pos
        try:
            out.append(reference_request(buf, pos))
        except CorruptRecordError:
            return out, pos
        pos += check.size


def run_scan(scan: Callable[..., ScanResult], buf: Any, pos: int, limit: int,
             max_records: int = MAX_RECORDS, topics: dict[bytes, str] | None = None,
             tag_codes: dict[str, int] | None = None) -> ScanResult:
    return scan(buf, pos, limit, max_records, {} if topics is None else topics,
                {} if tag_codes is None else tag_codes, tags_hash_code, SCHEDULE_TOPIC, DELAYS,
                tuple.__new__, DispatchRequest)


def check_groups(groups: list[tuple[list[DispatchRequest], int]], start: int) -> None:
    """Groups hold consecutive records of one queue at consecutive queue
    offsets, end where their last record ends, and no two in a row could be one."""
    at = start
    previous: DispatchRequest | None = None
    for group, end in groups:
        assert group
        first = group[0]
        if previous is not None:
            assert (previous.topic, previous.queue_id, previous.consume_queue_offset + 1) != (
                first.topic, first.queue_id, first.consume_queue_offset)
        for a, b in zip(group, group[1:], strict=False):
            assert (b.topic, b.queue_id, b.consume_queue_offset) == (
                a.topic, a.queue_id, a.consume_queue_offset + 1)
        at += sum(r.msg_size for r in group)
        assert end == at
        previous = group[-1]


# ---- the scan against decode_record ---------------------------------------------------

_TOPICS = st.sampled_from([b"T", b"Topic-2", SCHEDULE_TOPIC.encode(), "Tö".encode(), b"bad topic!",
                           b"", b"\xff\xfe"])
_TEXT = st.sampled_from(["", "a", "ü", "a b", "x\x01y", "  k  ", "日本"])
_ENTRY = st.one_of(
    st.tuples(st.sampled_from([PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, "WAIT", "TAG",
                               "XKEYS", ""]), _TEXT),
)
_PROPS = st.one_of(
    st.lists(_ENTRY, max_size=6).map(lambda es: props(*es)),
    st.just(b"TAGS\x01a\x02\xff\x02"),  # not UTF-8
    st.just(b"TAGS\x01a\x02noseparator\x02KEYS"),  # entries without a value
    st.just(b"TAGS\x01last"),  # no final separator
)
_RECORD = st.tuples(_TOPICS, st.integers(0, 3), st.binary(max_size=60), _PROPS,
                    st.integers(0, 2**45), st.sampled_from([0, 4, 8, 12, -1]))


@pytest.mark.parametrize("scan", SCANS)
@settings(max_examples=300, deadline=None)
@given(records=st.lists(_RECORD, max_size=25), cut=st.integers(0, 200),
       start=st.integers(0, 3))
def test_the_scan_reads_what_decode_record_reads(scan: Callable[..., ScanResult],
                                                 records: list[Any], cut: int,
                                                 start: int) -> None:
    log = LogBuilder(file_size=1 << 20)
    for topic, qid, body, properties, ms, flag in records:
        log.add(topic, qid, body, properties, ms, flag)
    buf = bytes(log.data)
    limit = max(0, len(buf) - cut)  # the last records cut short
    pos = 0
    for _ in range(start):  # from a later record too
        check = check_record(buf, pos, limit, verify_crc=False)
        pos += check.size if check.status is RecordStatus.MESSAGE else 0
    expected, stop = reference_scan(buf, pos, limit)
    groups, got_stop = run_scan(scan, buf, pos, limit)
    assert [r for group, _ in groups for r in group] == expected
    assert got_stop == stop
    check_groups(groups, pos)


@pytest.mark.parametrize("scan", SCANS)
def test_the_scan_reads_a_file_in_place(scan: Callable[..., ScanResult], tmp_path: Path) -> None:
    """An mmap of a file (what the store passes), a bound on the records, the
    caches filled and used."""
    import mmap
    log = LogBuilder(file_size=1 << 20)
    for i in range(40):
        log.add(b"T", i % 3 // 2, b"b" * i, props(("TAGS", f"t{i % 2}"), ("KEYS", f"k{i} x")))
    path = tmp_path / "f"
    path.write_bytes(bytes(log.data) + bytes(100))
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        topics: dict[bytes, str] = {}
        codes: dict[str, int] = {}
        groups, stop = run_scan(scan, mm, 0, len(mm), 7, topics, codes)
        expected, _ = reference_scan(mm, 0, len(log.data))
        assert [r for g, _ in groups for r in g] == expected[:7]
        assert stop == sum(r.msg_size for r in expected[:7])
        assert topics == {b"T": "T"} and codes == {"t0": tags_hash_code("t0"),
                                                   "t1": tags_hash_code("t1")}
        groups, stop = run_scan(scan, mm, stop, len(mm), MAX_RECORDS, topics, codes)
        assert [r for g, _ in groups for r in g] == expected[7:]
        assert stop == len(log.data)  # the zeros after: not a record
    # queue ids 0, 0, 1 over and over: a group for each run of one queue
    assert [len(g) for g, _ in run_scan(scan, bytes(log.data), 0, len(log.data))[0]][:3] == [2, 1, 2]


def test_the_head_is_the_records() -> None:
    assert SCAN_HEAD.size == RECORD_HEAD_SIZE
    rec = encode_record(topic=b"T", queue_id=7, flag=3, body=b"b", properties=b"", sys_flag=9,
                        born_timestamp=11, born_host=HOST, store_timestamp=13, store_host=HOST,
                        reconsume_times=15, prepared_transaction_offset=17, queue_offset=19,
                        physical_offset=21)
    assert SCAN_HEAD.unpack_from(rec) == (len(rec), 0xDAA320A7, 7, 19, 21, 9, 13, 1)
    assert struct.unpack_from(">i", rec, 4)[0] == plain_kernel._MAGIC


# ---- slave stores: batched against one record at a time ------------------------------


def no_scan(buf: Any, pos: int, *args: Any) -> ScanResult:
    """A scan that reads nothing: every record takes ``_walk``'s step (decode_record)."""
    return [], pos


class Slave:
    def __init__(self, root: Path, batched: bool) -> None:
        cfg = make_config(root, cl_size=CL_SIZE, cq_entries=10)
        cfg.message_delay_level = "1s 5s 10s"
        self.store = open_store(cfg)
        if not batched:
            self.store._scan_records = no_scan
        self.woken: list[tuple[str, int, int]] = []
        self.store.dispatch_listeners.append(lambda t, q, o: self.woken.append((t, q, o)))

    def append(self, offset: int, data: bytes) -> PutMessageStatus:
        return self.store.append_replica(offset, data).put_message_status


def files(path: Path) -> list[tuple[str, bytes]]:
    return [(str(p.relative_to(path)), p.read_bytes())
            for p in sorted(path.rglob("*")) if p.is_file()]


def state(slave: Slave) -> dict[str, Any]:
    """Everything the dispatch builds (index files by their order: their
    names are the time they were made)."""
    s = slave.store
    index = s.index_service
    assert index is not None
    s.flush_consume_queues()
    keys = {k for t, qs in s.consume_queue_table.items() for k in ("k1", "k2", "a", "b", "late")}
    return {
        "queues": files(s.root / "consumequeue"),
        "index": [f.read_bytes() for f in sorted((s.root / "index").iterdir())],
        "found": {(t, k): s.query_message(t, k, 100, 0, 2**62)
                  for t in s.consume_queue_table for k in sorted(keys)},
        "table": dict(s.commit_log.topic_queue_table),
        "cursor": s.reput_offset,
        "woken": list(slave.woken),
        "max_offsets": {(t, q): s.get_max_offset_in_queue(t, q)
                        for t, qs in s.consume_queue_table.items() for q in qs},
    }


def chunks(data: bytes, rng: random.Random, most: int) -> Iterator[tuple[int, bytes]]:
    at = 0
    while at < len(data):
        n = rng.randint(1, most)
        yield at, data[at:at + n]
        at += n


def mixed_log(rng: random.Random, n: int) -> LogBuilder:
    """Batches and single records over three queues of two topics, fixed and
    variable sizes, tags (non-ASCII too), keys, the schedule topic, a record
    with an invalid topic and one with properties that are not UTF-8 in the
    middle; padding at file ends (4 KiB files)."""
    log = LogBuilder()
    i = 0
    while i < n:
        r = rng.random()
        topic, qid = rng.choice([(b"T", 0), (b"T", 1), (b"U", 0)])
        if r < 0.3:  # a batch: fixed size, one queue
            for _ in range(rng.randint(2, 12)):
                log.add(topic, qid, b"x" * 100, props(("UNIQ_KEY", f"u{i}")), sys_flag=0)
                i += 1
        elif r < 0.35:
            log.add(SCHEDULE_TOPIC.encode(), rng.randrange(4), b"later",
                    props(("DELAY", "2"), ("KEYS", "late")))
            i += 1
        elif r < 0.37:
            log.add(b"bad topic!", 0, b"invalid", props(("KEYS", "a")))
            i += 1
        elif r < 0.38:
            log.add(topic, qid, b"undecodable", b"TAGS\x01\xff\xfe\x02")
            i += 1
        else:
            log.add(topic, qid, rng.randbytes(rng.randint(0, 300)),
                    props(("TAGS", rng.choice(["A", "ü", ""])), ("KEYS", rng.choice(["k1 k2", "a", "b"])),
                          ("UNIQ_KEY", f"u{i}")), sys_flag=rng.choice([0, 0, 4, 8]))
            i += 1
    return log


@pytest.mark.parametrize("seed", range(4))
def test_a_batched_slave_builds_what_one_record_at_a_time_builds(tmp_path: Path,
                                                                  seed: int) -> None:
    rng = random.Random(seed)
    log = mixed_log(rng, 400)
    data = bytes(log.data)
    assert len(data) > 10 * CL_SIZE  # many files, padded at their ends
    batched, single = Slave(tmp_path / "b", True), Slave(tmp_path / "s", False)
    for offset, piece in chunks(data, rng, 3000):  # records cut anywhere
        assert batched.append(offset, piece) is PutMessageStatus.PUT_OK
        assert single.append(offset, piece) is PutMessageStatus.PUT_OK
        assert batched.store.reput_offset == single.store.reput_offset
        assert batched.woken == single.woken
    assert batched.store.reput_offset == len(data) and not batched.store.dispatch_behind
    got = state(batched)
    assert got == state(single)
    # what was built: every valid record in its queue, the invalid ones nowhere
    assert set(got["max_offsets"]) >= {("T", 0), ("T", 1), ("U", 0)}
    assert ("bad topic!", 0) not in got["max_offsets"]
    for (topic, qid), n in log.next_offsets.items():
        if topic != b"bad topic!":
            assert got["max_offsets"][(topic.decode(), qid)] == n
    assert any(got["found"].values())
    batched.store.shutdown()
    single.store.shutdown()


def test_a_record_cut_at_the_end_waits_for_its_rest(tmp_path: Path) -> None:
    log = LogBuilder()
    for i in range(5):
        log.add(b"T", 0, b"x" * 100, props(("KEYS", f"k{i}")))
    data = bytes(log.data)
    at = log.offsets
    slave = Slave(tmp_path, True)
    for cut, whole in ((at[2] + 3, at[2]), (at[3] + 50, at[3]), (len(data) - 1, at[4])):
        offset = slave.store.get_max_phy_offset()
        assert slave.append(offset, data[offset:cut]) is PutMessageStatus.PUT_OK
        assert slave.store.reput_offset == whole  # the whole records
    assert slave.append(slave.store.get_max_phy_offset(),
                        data[slave.store.get_max_phy_offset():]) is PutMessageStatus.PUT_OK
    assert slave.store.reput_offset == len(data)
    assert slave.store.get_max_offset_in_queue("T", 0) == 5
    assert slave.woken == [("T", 0, 2), ("T", 0, 3), ("T", 0, 4), ("T", 0, 5)]
    slave.store.shutdown()


def test_schedule_topic_tags_are_due_times(tmp_path: Path) -> None:
    log = LogBuilder()
    for level in (1, 2, 3, 4):
        log.add(SCHEDULE_TOPIC.encode(), level - 1, b"d", props(("TAGS", "ignored")),
                store_ms=1000 * level)
    slave = Slave(tmp_path, True)
    assert slave.append(0, bytes(log.data)) is PutMessageStatus.PUT_OK
    tags = [slave.store.find_consume_queue(SCHEDULE_TOPIC, q).get_entries(0, 1)[0][2]
            for q in range(4)]
    assert tags == [1000 + 1000, 2000 + 5000, 3000 + 10000, 4000]  # level 4: no delay
    slave.store.shutdown()


class Failing:
    """A dispatcher that fails at one commit-log offset until told otherwise
    (a batch holding it fails before it does anything)."""

    def __init__(self, at: int) -> None:
        self.at: int | None = at

    def dispatch(self, req: DispatchRequest) -> None:
        if req.commit_log_offset == self.at:
            raise OSError(5, "Input/output error")

    def dispatch_batch(self, reqs: list[DispatchRequest]) -> None:
        if any(r.commit_log_offset == self.at for r in reqs):
            raise OSError(5, "Input/output error")


def test_a_failing_dispatch_leaves_the_cursor_at_its_record(tmp_path: Path) -> None:
    log = LogBuilder(file_size=1 << 16)
    for i in range(20):
        log.add(b"T", i // 10, b"x" * 50, props(("KEYS", f"k{i}")))
    data = bytes(log.data)
    bad = log.offsets[13]  # the fourth record of queue 1's run
    slaves = [Slave(tmp_path / "b", True), Slave(tmp_path / "s", False)]
    for slave, queued in zip(slaves, (10, 4), strict=True):
        failing = Failing(bad)
        slave.store.dispatchers.append(failing)
        assert slave.append(0, data) is PutMessageStatus.DISPATCH_BEHIND
        assert slave.store.reput_offset == bad
        # the consume queue's dispatch_batch ran before the failing one: the
        # group's entries are in (as a master's put leaves them); one at a
        # time, those up to the failing record's
        assert slave.store.get_max_offset_in_queue("T", 1) == queued
        assert slave.store.commit_log.topic_queue_table == {"T-0": 10, "T-1": 3}
        assert slave.woken == [("T", 0, 10), ("T", 1, 3)]
        failing.at = None
        assert slave.store.reput()
        assert slave.store.reput_offset == len(data)
        assert slave.woken[-1] == ("T", 1, 10)
    assert state(slaves[0]) == state(slaves[1])
    for slave in slaves:
        slave.store.shutdown()


@pytest.mark.parametrize("batched", [True, False])
def test_recovery_rebuilds_the_queues_and_index(tmp_path: Path, batched: bool) -> None:
    rng = random.Random(7)
    log = mixed_log(rng, 200)
    slave = Slave(tmp_path, batched)
    assert slave.append(0, bytes(log.data)) is PutMessageStatus.PUT_OK
    slave.woken.clear()
    before = state(slave)
    slave.store.shutdown()
    import shutil
    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    again = Slave(tmp_path, batched)  # dispatch_from(0) at load
    after = state(again)
    assert after == before
    again.store.shutdown()


def test_the_store_scans_with_the_compiled_kernel_when_built(tmp_path: Path) -> None:
    store = DefaultMessageStore(StoreConfig.from_broker(make_config(tmp_path)))
    assert store._scan_records is (compiled_scan() or scan_loop)
