from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.store import GetMessageStatus, PutMessageStatus
from protocol.hashing import tags_hash_code
from protocol.record import RecordStatus, check_record, decode_records
from tests.broker.store.helpers import inner, make_config, open_store


def pull_all(store, topic: str, queue_id: int, tags: set[int] | None = None) -> list:  # type: ignore[no-untyped-def]
    out = []
    offset = 0
    for _ in range(10_000):
        r = store.get_message("g", topic, queue_id, offset, 32, tags)
        if r.status not in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE):
            break
        out.extend(decode_records(b"".join(r.buffers), verify_crc=True))
        assert r.next_begin_offset > offset
        offset = r.next_begin_offset
    return out


def test_put_get_round_trip(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path))
    r = store.put_message(inner("T", 0, b"hello", tags="TagA", keys="k1 k2"))
    assert r.put_message_status == PutMessageStatus.PUT_OK
    assert r.append_result is not None and r.append_result.logics_offset == 0
    msgs = pull_all(store, "T", 0)
    assert len(msgs) == 1
    m = msgs[0]
    assert (m.topic, m.body, m.tags, m.keys, m.queue_offset, m.commit_log_offset) == (
        "T", b"hello", "TagA", "k1 k2", 0, 0)
    assert m.born_host == "10.0.0.1:1234" and m.store_host == "127.0.0.1:10911"
    assert m.msg_id == r.append_result.msg_id
    store.shutdown()


def test_batch_msg_ids_are_each_records_offset_msg_id(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=64 * 1024, cq_entries=200))
    results = []
    for n in (1, 3, 32, 70, 3):  # the last repeats a count: its format is reused
        batch = [inner("T", 2, bytes([n, j]) * 40) for j in range(n)]
        r = store.put_messages(batch)
        assert r.put_message_status == PutMessageStatus.PUT_OK and r.append_result is not None
        results.append((n, r.append_result.msg_id))
    pulled = pull_all(store, "T", 2)
    assert len(pulled) == 1 + 3 + 32 + 70 + 3
    at = 0
    for n, ids in results:
        expected = [m.msg_id for m in pulled[at:at + n]]
        assert ids.split(",") == expected
        assert all(len(i) == 32 and i == i.upper() for i in expected)
        at += n
    store.shutdown()


def test_msg_ids_of_a_batch_too_big_to_cache_its_format() -> None:
    from broker.store.commit_log import _CACHED_IDS_MAX, msg_ids
    from protocol.message import offset_msg_id

    head = "7F000001000027AF"
    for n in (1, 2, _CACHED_IDS_MAX, _CACHED_IDS_MAX + 1, 3 * _CACHED_IDS_MAX):
        offsets = [i * 1100 + (1 << 40) for i in range(n)]
        assert msg_ids(head, offsets) == ",".join(offset_msg_id(head, o) for o in offsets)


def test_rollover_with_blank_padding_and_batches(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=4096, cq_entries=10))
    sent = []
    for i in range(120):
        body = bytes([i % 256]) * (50 + (i * 37) % 400)
        if i % 5 == 0:
            batch = [inner("T", 1, body + bytes([j]), tags=f"t{j}") for j in range(3)]
            r = store.put_messages(batch)
            sent.extend(b.body for b in batch)
            assert r.append_result is not None and r.append_result.msg_num == 3
            assert len(r.append_result.msg_id.split(",")) == 3
        else:
            r = store.put_message(inner("T", 1, body))
            sent.append(body)
        assert r.put_message_status == PutMessageStatus.PUT_OK
    files = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(files) > 10 and all(len(f) == 20 for f in files)
    # every file but the last ends with a BLANK pad or exactly full
    blanks = 0
    for name in files[:-1]:
        data = (tmp_path / "commitlog" / name).read_bytes()
        pos = 0
        while pos < len(data):
            c = check_record(data, pos, len(data))
            assert c.status in (RecordStatus.MESSAGE, RecordStatus.BLANK)
            if c.status is RecordStatus.BLANK:
                blanks += 1
                assert pos + c.size == len(data)
            pos += c.size
    assert blanks > 0
    assert len(os.listdir(tmp_path / "consumequeue" / "T" / "1")) > 3  # CQ rolled over too
    assert [m.body for m in pull_all(store, "T", 1)] == sent
    store.shutdown()


def test_oversize_and_batch_too_big(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=4096))
    assert store.put_message(inner("T", 0, b"x" * 3000)).put_message_status == PutMessageStatus.MESSAGE_ILLEGAL
    batch = [inner("T", 0, b"y" * 1500) for _ in range(3)]
    assert store.put_messages(batch).put_message_status == PutMessageStatus.MESSAGE_ILLEGAL
    assert store.get_max_offset_in_queue("T", 0) == 0
    store.shutdown()


def test_get_statuses(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 20, cq_entries=1000))
    r = store.get_message("g", "T", 0, 0, 32, None)
    assert r.status == GetMessageStatus.NO_MESSAGE_IN_QUEUE and r.next_begin_offset == 0
    for i in range(10):
        store.put_message(inner("T", 0, b"m%d" % i, tags="A" if i % 2 else "B"))
    r = store.get_message("g", "T", 0, 0, 4, None)
    assert r.status == GetMessageStatus.FOUND and r.message_count == 4 and r.next_begin_offset == 4
    assert (r.min_offset, r.max_offset) == (0, 10)
    r = store.get_message("g", "T", 0, 10, 4, None)
    assert r.status == GetMessageStatus.OFFSET_OVERFLOW_ONE and r.next_begin_offset == 10
    r = store.get_message("g", "T", 0, 15, 4, None)
    assert r.status == GetMessageStatus.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 0
    r = store.get_message("g", "T", 0, 0, 32, {tags_hash_code("A")})
    assert r.status == GetMessageStatus.FOUND and r.message_count == 5
    assert all(m.tags == "A" for m in decode_records(b"".join(r.buffers)))
    r = store.get_message("g", "T", 0, 0, 32, {tags_hash_code("nope")})
    assert r.status == GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == 10
    store.shutdown()


def test_clean_restart_keeps_offsets_and_continues(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=4096, cq_entries=10)
    store = open_store(cfg)
    for i in range(60):
        store.put_message(inner("T", i % 3, b"a" * (100 + i)))
    before = {q: [(m.queue_offset, m.commit_log_offset, m.body) for m in pull_all(store, "T", q)] for q in range(3)}
    end = store.get_max_phy_offset()
    store.shutdown()
    assert not (tmp_path / "abort").exists()

    store = open_store(cfg)
    assert store.get_max_phy_offset() == end
    after = {q: [(m.queue_offset, m.commit_log_offset, m.body) for m in pull_all(store, "T", q)] for q in range(3)}
    assert after == before
    r = store.put_message(inner("T", 0, b"next"))
    assert r.append_result is not None
    assert r.append_result.logics_offset == 20 and r.append_result.wrote_offset >= end
    store.shutdown()


def _last_file(root: Path) -> Path:
    return sorted((root / "commitlog").iterdir())[-1]


def test_abort_recovery_truncates_torn_tail(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=100)
    store = open_store(cfg)
    for _ in range(20):
        store.put_message(inner("T", 0, b"z" * 200))
    good_end = store.get_max_phy_offset()
    store.put_message(inner("T", 0, b"torn" * 50))
    store.flush_commit_log()
    store.flush_consume_queues()
    # simulate a crash: files closed without shutdown, abort file left behind
    store.commit_log.close()
    for cq in store._all_consume_queues():
        cq.close()
    store.store_lock.release()  # a crashed broker's lock goes with its process
    assert (tmp_path / "abort").exists()
    f = _last_file(tmp_path)
    data = bytearray(f.read_bytes())
    data[good_end + 150 : good_end + 160] = b"\xee" * 10  # corrupt the body of the last record
    f.write_bytes(bytes(data))

    store = open_store(cfg)
    assert store.get_max_phy_offset() == good_end
    assert store.get_max_offset_in_queue("T", 0) == 20
    assert len(pull_all(store, "T", 0)) == 20
    r = store.put_message(inner("T", 0, b"after"))
    assert r.append_result is not None and r.append_result.wrote_offset == good_end
    assert r.append_result.logics_offset == 20
    assert [m.body for m in pull_all(store, "T", 0)][-1] == b"after"
    store.shutdown()


def test_garbage_after_last_record_is_cut(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=100)
    store = open_store(cfg)
    for _ in range(5):
        store.put_message(inner("T", 0, b"ok"))
    end = store.get_max_phy_offset()
    store.shutdown()
    f = _last_file(tmp_path)
    data = bytearray(f.read_bytes())
    data[end : end + 64] = os.urandom(64)
    f.write_bytes(bytes(data))
    (tmp_path / "abort").touch()
    store = open_store(cfg)
    assert store.get_max_phy_offset() == end
    assert f.read_bytes()[end : end + 64] == bytes(64)  # stale bytes zeroed
    assert len(pull_all(store, "T", 0)) == 5
    store.shutdown()


def test_lost_consume_queue_tail_is_rebuilt_from_commit_log(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=100)
    store = open_store(cfg)
    for i in range(30):
        store.put_message(inner("T", i % 2, b"q%d" % i))
    store.shutdown()
    # the last two entries of each queue never reached disk
    for q in (0, 1):
        f = sorted((tmp_path / "consumequeue" / "T" / str(q)).iterdir())[-1]
        data = bytearray(f.read_bytes())
        data[13 * 20 : 15 * 20] = bytes(40)
        f.write_bytes(bytes(data))
    (tmp_path / "abort").touch()
    store = open_store(cfg)
    for q in (0, 1):
        assert store.get_max_offset_in_queue("T", q) == 15
        assert [m.body for m in pull_all(store, "T", q)] == [b"q%d" % i for i in range(q, 30, 2)]
    store.shutdown()


def test_consume_queue_truncated_past_commit_log_end(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=100)
    store = open_store(cfg)
    for i in range(10):
        store.put_message(inner("T", 0, b"v%d" % i))
    keep_end = store.get_commit_log_offset_in_queue("T", 0, 6)
    store.shutdown()
    # cut the commit log after 6 records (as if the tail never reached disk)
    f = _last_file(tmp_path)
    data = bytearray(f.read_bytes())
    data[keep_end:] = bytes(len(data) - keep_end)
    f.write_bytes(bytes(data))
    (tmp_path / "abort").touch()
    store = open_store(cfg)
    assert store.get_max_offset_in_queue("T", 0) == 6
    assert [m.body for m in pull_all(store, "T", 0)] == [b"v%d" % i for i in range(6)]
    r = store.put_message(inner("T", 0, b"new"))
    assert r.append_result is not None and r.append_result.logics_offset == 6
    store.shutdown()


def test_delete_topics(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16))
    store.put_message(inner("Gone", 0, b"x"))
    store.put_message(inner("Kept", 0, b"y"))
    assert store.delete_topics({"Gone"}) == 1
    assert not (tmp_path / "consumequeue" / "Gone").exists()
    assert store.get_max_offset_in_queue("Gone", 0) == 0
    assert store.get_max_offset_in_queue("Kept", 0) == 1
    r = store.put_message(inner("Gone", 0, b"again"))
    assert r.append_result is not None and r.append_result.logics_offset == 0
    store.shutdown()


def test_store_time_and_lookup_by_offset(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16))
    r = store.put_message(inner("T", 0, b"look"))
    assert r.append_result is not None
    assert store.get_message_store_timestamp("T", 0, 0) == r.append_result.store_timestamp
    m = store.look_message_by_offset(r.append_result.wrote_offset)
    assert m is not None and m.body == b"look"
    assert store.look_message_by_offset(10**9) is None
    store.shutdown()


def test_record_with_bad_crc_is_never_served(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=100)
    store = open_store(cfg)
    for i in range(3):
        store.put_message(inner("T", 0, b"payload-%d" % i))
    bad = store.get_commit_log_offset_in_queue("T", 0, 1)
    mf = store.commit_log.mapped_file_queue.find_by_offset(bad)
    assert mf is not None
    mf.mm[bad + 90] ^= 0xFF  # flip a body byte in place
    bodies = [m.body for m in pull_all(store, "T", 0)]
    assert bodies == [b"payload-0", b"payload-2"]
    store.shutdown()


def test_abnormal_recovery_starts_at_checkpoint_file(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=4096, cq_entries=100)
    store = open_store(cfg)
    for _ in range(40):
        store.put_message(inner("T", 0, b"a" * 300))
    store.flush_commit_log()
    store.flush_consume_queues()
    for _ in range(10):
        store.put_message(inner("T", 0, b"b" * 300))
    end = store.get_max_phy_offset()
    files_before = len(store.commit_log.mapped_file_queue.files)
    store.commit_log.close()
    for cq in store._all_consume_queues():
        cq.close()
    store.store_lock.release()  # a crashed broker's lock goes with its process
    # the queue lost its last entries, the commit log kept everything
    cq_file = sorted((tmp_path / "consumequeue" / "T" / "0").iterdir())[-1]
    data = bytearray(cq_file.read_bytes())
    data[42 * 20 : 50 * 20] = bytes(8 * 20)
    cq_file.write_bytes(bytes(data))
    store = open_store(cfg)
    assert store.get_max_phy_offset() == end
    assert len(store.commit_log.mapped_file_queue.files) == files_before
    assert store.get_max_offset_in_queue("T", 0) == 50
    assert [m.body[:1] for m in pull_all(store, "T", 0)] == [b"a"] * 40 + [b"b"] * 10
    store.shutdown()


def test_search_offset_by_time(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import broker.store.commit_log as cl

    clock = {"ms": 1_000_000}
    monkeypatch.setattr(cl.time, "time", lambda: clock["ms"] / 1000)
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=100))
    stamps = []
    for i in range(50):
        clock["ms"] += 10 if i % 5 else 0  # runs of equal store times
        stamps.append(clock["ms"])
        store.put_message(inner("T", 0, b"t%d" % i))
    for ts in (0, stamps[0], stamps[7], stamps[7] + 1, stamps[-1], stamps[-1] + 1):
        want = next((i for i, s in enumerate(stamps) if s >= ts), len(stamps))
        assert store.get_offset_in_queue_by_time("T", 0, ts) == want, ts
    assert store.get_offset_in_queue_by_time("Nope", 0, 5) == 0
    store.shutdown()


@pytest.mark.parametrize("abort", [False, True])
@pytest.mark.parametrize("damage", ["torn", "bad_crc", "zeroed"])
def test_hand_corrupted_tail(tmp_path: Path, abort: bool, damage: str) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=100)
    store = open_store(cfg)
    for i in range(10):
        store.put_message(inner("T", 0, b"r%d-" % i + b"x" * 200))
    last = store.get_commit_log_offset_in_queue("T", 0, 9)
    end = store.get_max_phy_offset()
    store.shutdown()
    f = _last_file(tmp_path)
    data = bytearray(f.read_bytes())
    if damage == "torn":  # the last record was only partly written
        data[last + 100 : end] = bytes(end - last - 100)
    elif damage == "bad_crc":
        data[last + 95] ^= 0x55
    else:  # its header zeroed
        data[last : last + 20] = bytes(20)
    f.write_bytes(bytes(data))
    if abort:
        (tmp_path / "abort").touch()
    store = open_store(cfg)
    assert store.get_max_phy_offset() == last
    assert store.get_max_offset_in_queue("T", 0) == 9
    r = store.put_message(inner("T", 0, b"fresh"))
    assert r.append_result is not None and r.append_result.wrote_offset == last
    assert r.append_result.logics_offset == 9
    assert [m.body[:3] for m in pull_all(store, "T", 0)] == [b"r%d-" % i for i in range(9)] + [b"fre"]
    store.shutdown()


def test_commit_log_flush_leaves_the_checkpoint_file_to_the_queue_flush(tmp_path: Path) -> None:
    """A SYNC_FLUSH send waits for the commit log's fsync only: the checkpoint
    file is written by the consume-queue flush (and at shutdown), not by it."""
    from broker.store.store_checkpoint import StoreCheckpoint

    cfg = make_config(tmp_path, cl_size=4096, cq_entries=100)
    store = open_store(cfg)
    store.put_message(inner("T", 0, b"a" * 100))
    store.flush_commit_log()
    assert store.checkpoint.physic_msg_timestamp > 0
    on_disk = StoreCheckpoint(cfg.checkpoint_path)
    assert on_disk.physic_msg_timestamp == 0
    store.flush_consume_queues()
    on_disk = StoreCheckpoint(cfg.checkpoint_path)
    assert on_disk.physic_msg_timestamp == store.checkpoint.physic_msg_timestamp
    assert on_disk.logics_msg_timestamp == store.checkpoint.logics_msg_timestamp > 0
    # nothing moved: no second write
    assert store.checkpoint.flush_if_changed() is False
    store.put_message(inner("T", 0, b"b" * 100))
    store.shutdown()
    on_disk = StoreCheckpoint(cfg.checkpoint_path)
    assert on_disk.physic_msg_timestamp >= store.checkpoint.physic_msg_timestamp


def test_pulls_read_back_to_back_runs_and_scattered_records_alike(tmp_path: Path) -> None:
    """Records of one queue written in a row are read with one pread per run;
    interleaved with another queue's, one per record: the same messages either
    way, limits and filters applied per record."""
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=100))
    store.put_messages([inner("T", 0, b"run-%d" % i) for i in range(5)])
    for i in range(4):
        store.put_message(inner("T", 0, b"mix-%d" % i, tags="A" if i % 2 else "B"))
        store.put_message(inner("T", 1, b"other-%d" % i))
    bodies = [m.body for m in pull_all(store, "T", 0)]
    assert bodies == [b"run-%d" % i for i in range(5)] + [b"mix-%d" % i for i in range(4)]
    r = store.get_message("g", "T", 0, 2, 4, None)
    assert r.status is GetMessageStatus.FOUND and r.next_begin_offset == 6
    assert [m.body for m in decode_records(b"".join(r.buffers))] == [
        b"run-2", b"run-3", b"run-4", b"mix-0"]
    r = store.get_message("g", "T", 0, 5, 32, {tags_hash_code("A")})
    assert [m.body for m in decode_records(b"".join(r.buffers))] == [b"mix-1", b"mix-3"]
    store.shutdown()


def test_a_batch_spanning_topics_or_queues_is_refused(tmp_path: Path) -> None:
    """put_messages takes one topic and queue: anything else, an unhashable
    topic included, is MESSAGE_ILLEGAL with nothing written."""
    import dataclasses

    store = open_store(make_config(tmp_path))
    end = store.commit_log.max_offset
    batches = [
        [inner("T", 0, b"a"), inner("U", 0, b"b")],
        [inner("T", 0, b"a"), inner("T", 1, b"b")],
        [inner("T", 0, b"a"), dataclasses.replace(inner("T", 0, b"b"), topic=["T"])],
    ]
    for msgs in batches:
        assert store.put_messages(msgs).put_message_status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.commit_log.max_offset == end
    assert store.put_messages([inner("T", 0, b"a"), inner("T", 0, b"b")]).put_message_status \
        is PutMessageStatus.PUT_OK
    store.shutdown()
