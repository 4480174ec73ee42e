"""A consume queue with no entry at the pulled offset: the next offset is the
start of the queue's next file (its own file size, not the commit log's)."""

from __future__ import annotations

from pathlib import Path

from broker.store import GetMessageStatus
from protocol.record import decode_records
from tests.broker.store.helpers import inner, make_config, open_store

PER_FILE = 10  # consume-queue entries per file


def test_pull_across_a_missing_consume_queue_file(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=PER_FILE))
    for i in range(35):
        store.put_message(inner("T", 0, b"m%d" % i))
    cq = store.find_consume_queue("T", 0)
    assert [mf.file_from_offset // 20 for mf in cq.mapped_file_queue.files] == [0, 10, 20, 30]
    lost = cq.mapped_file_queue.files.pop(1)  # entries 10..19 are gone
    lost.destroy()

    for offset in (10, 15, 19):
        r = store.get_message("g", "T", 0, offset, 32, None)
        assert r.status is GetMessageStatus.OFFSET_FOUND_NULL
        assert r.next_begin_offset == 2 * PER_FILE  # the next file's first entry
        assert (r.min_offset, r.max_offset) == (0, 35)

    got: list[bytes] = []
    offset = 0
    while offset < 35:
        r = store.get_message("g", "T", 0, offset, 32, None)
        assert r.next_begin_offset > offset
        got += [m.body for m in decode_records(b"".join(r.buffers), verify_crc=True)]
        offset = r.next_begin_offset
    assert offset == 35
    assert got == [b"m%d" % i for i in range(35) if not 10 <= i < 20]
    store.shutdown()


def test_roll_next_file_uses_the_queue_file_size(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=PER_FILE))
    store.put_message(inner("T", 0, b"x"))
    cq = store.find_consume_queue("T", 0)
    assert [cq.roll_next_file(i) for i in (0, 9, 10, 11, 299_999)] == [10, 10, 20, 20, 300_000]
    store.shutdown()
