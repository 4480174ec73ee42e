"""protocol/records_kernel.py's pull functions (a pull's walk over its
consume-queue entries and its CRC checks), run as plain Python and compiled
(deploy/speedups.py): get_message with it must answer what get_message's own loop answers, and the
two functions must agree with reference loops on any entries and bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.store.consume_queue import CQ_ENTRY
from broker.store.message_store import DefaultMessageStore, PullKernel, compiled_pull_kernel
from broker.store.status import GetMessageResult
from protocol import records_kernel as plain
from protocol.crc import crc32
from protocol.hashing import tags_hash_code
from protocol.record import (
    OFF_BODY_CRC,
    OFF_BODY_LEN,
    RECORD_HEAD_SIZE,
    check_run,
    encode_record,
    pack_host,
)
from tests.broker.store.helpers import inner, make_config, open_store

COMPILED = compiled_pull_kernel()
KERNELS: list[Any] = [pytest.param(PullKernel(plain.scan_entries, plain.check_records),
                                   id="plain-python")]
if COMPILED is not None:
    KERNELS.append(pytest.param(COMPILED, id="compiled"))

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)


def reference_scan(entries: list[tuple[int, int, int]], max_count: int, max_bytes: int,
                   tags: set[int] | None, start: int, end: int, file_size: int
                   ) -> tuple[int, int, bool, list[list[int]]]:
    """get_message's loop over entries in a log without gaps: (scanned, last
    offset, gone before the first pick, runs as lists of entry indexes)."""
    scanned = picked = total = 0
    last = entries[0][0] if entries else 0
    removing = False
    runs: list[list[int]] = []
    run_end = run_file = None
    for i, (phys, size, tag) in enumerate(entries):
        if picked and (picked >= max_count or total + size > max_bytes):
            break
        scanned += 1
        last = phys
        if size <= 0 or (tags is not None and tag not in tags):
            run_end = None
            continue
        if phys < start or phys + size > end or phys % file_size + size > file_size:
            removing = removing or not picked
            run_end = None
            continue
        if run_end is None or phys != run_end or phys // file_size != run_file:
            runs.append([])
        runs[-1].append(i)
        run_end, run_file = phys + size, phys // file_size
        picked += 1
        total += size
    return scanned, last, removing, runs


ENTRY = st.tuples(st.one_of(st.integers(0, 5000), INT64), st.one_of(st.integers(-5, 400), INT32),
                  st.integers(0, 3))


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(ENTRY, max_size=40), max_count=st.integers(1, 40),
       max_bytes=st.integers(1, 3000), tags=st.one_of(st.none(), st.sets(st.integers(0, 3))),
       start=st.integers(0, 2000), length=st.integers(0, 4000),
       file_size=st.sampled_from([1, 100, 1024, 4096]))
def test_scan_matches_the_reference_loop(kernel: PullKernel, entries: list[tuple[int, int, int]],
                                         max_count: int, max_bytes: int, tags: set[int] | None,
                                         start: int, length: int, file_size: int) -> None:
    data = b"".join(CQ_ENTRY.pack(*e) for e in entries)
    scanned, last, removing, runs = kernel.scan_entries(
        data, max_count, max_bytes, tags, start, start + length, file_size)
    want_scanned, want_last, want_removing, want_runs = reference_scan(
        entries, max_count, max_bytes, tags, start, start + length, file_size)
    assert (scanned, last, removing) == (want_scanned, want_last, want_removing)
    assert [list(range(first, after)) for _, _, first, after in runs] == want_runs
    for (lo, hi, first, after) in runs:
        assert lo == entries[first][0] and hi == entries[after - 1][0] + entries[after - 1][1]


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_run_ends_at_a_file_end(kernel: PullKernel) -> None:
    """Records back to back across a file boundary (a log never has them: a
    file ends with a BLANK) are two runs, each read from its own file."""
    entries = [(40, 60, 0), (100, 30, 0), (130, 20, 0), (150, 80, 0)]
    data = b"".join(CQ_ENTRY.pack(*e) for e in entries)
    assert kernel.scan_entries(data, 32, 1 << 20, None, 0, 1000, 100) == (
        4, 150, False, [(40, 100, 0, 1), (100, 150, 1, 3)])  # 150+80 runs past its file


@pytest.mark.parametrize("kernel", KERNELS)
def test_scan_refuses_a_log_that_is_not_one(kernel: PullKernel) -> None:
    for args in ((0, 100, 0), (-1, 100, 64), (10, 5, 64)):
        with pytest.raises(ValueError, match="not a log"):
            kernel.scan_entries(b"", 1, 1, None, *args)
    assert kernel.scan_entries(b"\x00" * 19, 1, 1, None, 0, 0, 64) == (0, 0, False, [])


def record_bytes(body: bytes, damage: int | None) -> bytes:
    rec = bytearray(encode_record(
        topic=b"T", queue_id=0, flag=0, body=body, properties=b"k\x01v\x02", sys_flag=0,
        born_timestamp=1, born_host=pack_host("10.0.0.7:40000"), store_timestamp=2,
        store_host=pack_host("10.0.0.1:10911"), reconsume_times=0, prepared_transaction_offset=0,
        queue_offset=1, physical_offset=1000))
    if damage is not None:
        rec[damage % len(rec)] ^= 0x5A
    return bytes(rec)


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.tuples(st.binary(max_size=300), st.one_of(st.none(), st.integers(0, 500)),
                                st.integers(-3, 3)), max_size=8),
       cut=st.integers(0, 40), garbage=st.binary(max_size=30))
def test_check_matches_check_run(kernel: PullKernel, parts: list[tuple[bytes, int | None, int]],
                                 cut: int, garbage: bytes) -> None:
    """Records back to back, some damaged, some entries' sizes off, the
    buffer cut short or followed by garbage: the same views and offsets."""
    buf = b""
    run: list[tuple[int, int]] = []
    for k, (body, damage, size_off) in enumerate(parts):
        rec = record_bytes(body, damage)
        run.append((1000 + 10_000 * k, len(rec) + size_off))
        buf += rec
    buf = (buf[:-cut] if cut and cut < len(buf) else buf) + garbage
    entries = b"".join(CQ_ENTRY.pack(phys, size, 0) for phys, size in run)
    good, count, bad = kernel.check_records(buf, entries, 0, len(run), crc32, RECORD_HEAD_SIZE,
                                            OFF_BODY_CRC, OFF_BODY_LEN)
    want_good, want_count, want_bad = check_run(buf, run)
    assert [bytes(v) for v in good] == [bytes(v) for v in want_good]
    assert (count, bad) == (want_count, want_bad)
    assert (good[0] is buf) == (want_good[0] is buf) if good else not want_good


@pytest.mark.parametrize("kernel", KERNELS)
def test_check_refuses_entries_it_was_not_given(kernel: PullKernel) -> None:
    entries = CQ_ENTRY.pack(0, 100, 0)
    for first, last in ((0, 2), (-1, 1), (1, 0)):
        with pytest.raises(ValueError, match="not in the 20 bytes"):
            kernel.check_records(b"", entries, first, last, crc32, RECORD_HEAD_SIZE,
                                 OFF_BODY_CRC, OFF_BODY_LEN)
    with pytest.raises(ValueError, match="cannot hold its fields"):
        kernel.check_records(b"", entries, 0, 1, crc32, 8, OFF_BODY_CRC, OFF_BODY_LEN)


# ---- get_message with and without it ----------------------------------------------------


def answer(r: GetMessageResult) -> tuple[Any, ...]:
    records = [bytes(b) for b in r.buffers]
    assert r.message_count == len(records)
    assert b"".join(r.pieces) == b"".join(records)  # what a pull's answer carries
    return (r.status, r.next_begin_offset, r.min_offset, r.max_offset, records,
            r.suggest_pulling_from_slave)


def both(store: DefaultMessageStore, kernel: PullKernel, *args: Any) -> GetMessageResult:
    """get_message through the kernel, after checking the general loop answers
    the same (and logs the same CRC failures)."""
    store.pull_kernel = None
    with structlog.testing.capture_logs() as want_logs:
        want = store.get_message(*args)
    store.pull_kernel = kernel
    with structlog.testing.capture_logs() as logs:
        got = store.get_message(*args)
    assert answer(got) == answer(want)
    assert logs == want_logs
    return got


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(sends=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 6), st.integers(0, 600),
                                st.sampled_from(["A", "B", None])), min_size=1, max_size=25),
       damaged=st.sets(st.integers(0, 60), max_size=4), expire=st.integers(0, 2),
       pulls=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 70), st.integers(1, 40),
                                st.sampled_from([None, {"A"}, {"B", "A"}, {"C"}])),
                      min_size=1, max_size=12),
       max_bytes=st.sampled_from([600, 5000, 1 << 20]))
def test_get_message_answers_as_its_own_loop(
        tmp_path_factory: pytest.TempPathFactory, kernel: PullKernel,
        sends: list[tuple[int, int, int, str | None]], damaged: set[int], expire: int,
        pulls: list[tuple[int, int, int, set[str] | None]], max_bytes: int) -> None:
    """Batches and single sends over three queues into 4 KiB files, some
    records damaged, the oldest files deleted: every pull (any offset, count,
    tag filter and byte limit) gets the same answer both ways."""
    config = make_config(tmp_path_factory.mktemp("pull"), cl_size=4096, cq_entries=200)
    config.max_transfer_bytes_on_message_in_memory = max_bytes
    store = open_store(config)
    try:
        for queue_id, count, size, tag in sends:
            msgs = [inner("T", queue_id, bytes([65 + i % 26]) * size + b"%d" % i, tags=tag)
                    for i in range(count)]
            if count == 1 or size * count > 1500:
                for m in msgs:
                    store.put_message(m)
            else:
                store.put_messages(msgs)
        for n in sorted(damaged):
            phys = store.get_commit_log_offset_in_queue("T", n % 3, n // 3)
            mf = store.commit_log.mapped_file_queue.find_by_offset(phys)
            if phys and mf is not None:
                at = phys - mf.file_from_offset + RECORD_HEAD_SIZE
                mf.mm[at] ^= 0xFF  # the body's first byte (or the topic's length)
        for _ in range(expire):
            store.commit_log.delete_expired_files(0, 0, True, 1)
        for queue_id, offset, max_nums, tags in pulls:
            codes = None if tags is None else {tags_hash_code(t) for t in tags}
            both(store, kernel, "g", "T", queue_id, offset, max_nums, codes)
    finally:
        store.shutdown()


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_run_outside_its_file_goes_to_the_general_loop(tmp_path: Path, kernel: PullKernel,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(make_config(tmp_path, cl_size=4096, cq_entries=200))
    store.pull_kernel = kernel
    try:
        for i in range(30):
            store.put_message(inner("T", 0, b"m" * 300 + b"%d" % i))
        mfq = store.commit_log.mapped_file_queue
        assert len(mfq.files) >= 3
        gone = mfq.files[1]
        find = mfq.find_by_offset
        # a file missing in the middle of the log (as a half-done deletion might leave)
        monkeypatch.setattr(mfq, "find_by_offset",
                            lambda off: None if find(off) is gone else find(off))
        reads: list[int] = []
        pread = type(gone).pread
        monkeypatch.setattr(type(gone), "pread",
                            lambda self, pos, size: reads.append(size) or pread(self, pos, size))
        r = both(store, kernel, "g", "T", 0, 0, 32, None)
        assert reads and r.buffers  # the general loop read the files it found
        assert all(bytes(b)[RECORD_HEAD_SIZE:RECORD_HEAD_SIZE + 1] == b"m" for b in r.buffers)
    finally:
        store.shutdown()


def test_a_store_takes_the_compiled_kernel_where_built(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path))
    try:
        assert store.pull_kernel == COMPILED  # None where not built: the loop of get_message
    finally:
        store.shutdown()
