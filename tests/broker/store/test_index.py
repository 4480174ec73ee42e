"""IndexFile/IndexService with forced collisions and several files."""

from __future__ import annotations

from pathlib import Path

from broker.store.commit_log import DispatchRequest
from broker.store.index_file import INDEX_ENTRY_SIZE, key_hash
from broker.store.index_service import IndexService
from tests.broker.store.helpers import inner, make_config, open_store


def req(i: int, keys: str | None, uniq: str | None, ts: int, sys_flag: int = 0) -> DispatchRequest:
    return DispatchRequest("T", 0, i * 100, 100, 0, ts, i, keys, uniq, sys_flag)


def test_collisions_and_many_files(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", hash_slot_num=4, index_num=50)
    expect: dict[str, list[int]] = {}
    for i in range(300):
        keys = f"k{i % 17} order-{i}"
        svc.dispatch(req(i, keys, f"U{i}", 1_000_000 + i * 1000))
        for k in (f"k{i % 17}", f"order-{i}", f"U{i}"):
            expect.setdefault(k, []).append(i * 100)
    assert len(svc.files) > 10
    for k, offs in expect.items():
        assert svc.query_offset("T", k, 1000, 0, 2**62) == list(reversed(offs)), k
    assert svc.query_offset("T", "k3", 2, 0, 2**62) == list(reversed(expect["k3"]))[:2]
    assert svc.query_offset("Other", "k3", 10, 0, 2**62) == []
    # time window (second granularity, widened by a second either side)
    got = svc.query_offset("T", "k1", 1000, 1_000_000 + 100_000, 1_000_000 + 200_000)
    assert got and all(9_800 <= o <= 20_200 for o in got)
    svc.flush()
    svc.close()
    again = IndexService(tmp_path / "index", hash_slot_num=4, index_num=50)
    again.load()
    assert again.query_offset("T", "order-7", 10, 0, 2**62) == [700]
    # replays of already indexed offsets are ignored
    again.dispatch(req(7, "order-7", None, 1_007_000))
    assert again.query_offset("T", "order-7", 10, 0, 2**62) == [700]
    again.close()


def test_prepared_transactions_not_indexed(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", hash_slot_num=8, index_num=100)
    svc.dispatch(req(1, "tx", None, 1000, sys_flag=0x4))
    svc.dispatch(req(2, "rolled", None, 1000, sys_flag=0xC))
    svc.dispatch(req(3, "done", None, 1000, sys_flag=0x8))
    assert svc.query_offset("T", "tx", 10, 0, 2**62) == []
    assert svc.query_offset("T", "rolled", 10, 0, 2**62) == []
    assert svc.query_offset("T", "done", 10, 0, 2**62) == [300]


def test_key_hash_is_31_bit_crc() -> None:
    import zlib
    assert key_hash("T#hello") == zlib.crc32(b"T#hello") & 0x7FFFFFFF
    assert all(0 <= key_hash(f"k{i}") < 2**31 for i in range(1000))


def test_store_query_by_key_across_restart(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=100)
    cfg.max_hash_slot_num, cfg.max_index_num = 4, 20
    store = open_store(cfg)
    for i in range(60):
        store.put_message(inner("T", i % 3, b"m%d" % i, keys=f"k{i % 5} id{i}"))
    recs = store.query_message("T", "k2", 100, 0, 2**62)
    assert len(recs) == 12
    store.shutdown()
    store = open_store(cfg)
    from protocol.record import decode_record
    bodies = [decode_record(r).body for r in store.query_message("T", "k2", 100, 0, 2**62)]
    assert bodies == [b"m%d" % i for i in range(57, -1, -5)]
    assert [decode_record(r).body for r in store.query_message("T", "id33", 5, 0, 2**62)] == [b"m33"]
    assert store.query_message("T", "nope", 5, 0, 2**62) == []
    store.shutdown()


def _requests(n: int) -> list[DispatchRequest]:
    out = []
    for i in range(n):
        keys = None if i % 3 else f"k{i} shared"
        sys_flag = 0x4 if i % 7 == 6 else 0  # prepared half messages are not indexed
        out.append(DispatchRequest("T", i % 2, 1000 + i * 100, 100, 0,
                                   1_700_000_000_000 + i * 400, i, keys, f"U{i:04d}", sys_flag))
    return out


def test_batch_dispatch_writes_the_files_one_by_one_dispatch_writes(tmp_path: Path) -> None:
    reqs = _requests(60)
    one = IndexService(tmp_path / "one", hash_slot_num=7, index_num=25)
    many = IndexService(tmp_path / "many", hash_slot_num=7, index_num=25)
    for req in reqs:
        one.dispatch(req)
    for start in range(0, 60, 16):  # batches that cross file ends
        many.dispatch_batch(reqs[start : start + 16])
    many.dispatch_batch(reqs[:10])  # a replay is skipped
    one.flush()
    many.flush()
    assert len(one.files) == len(many.files) > 2
    for a, b in zip(one.files, many.files, strict=True):
        assert a.path.name == b.path.name
        assert a.path.read_bytes() == b.path.read_bytes()
    for key in ("U0003", "shared", "k12", "U0006"):
        assert (many.query_offset("T", key, 64, 0, 2**62)
                == one.query_offset("T", key, 64, 0, 2**62))
    assert many.query_offset("T", "shared", 64, 0, 2**62)  # found at all
    one.close()
    many.close()


def test_dispatch_hashes_match_the_query_key(tmp_path: Path) -> None:
    """dispatch_batch hashes "topic#key" as the CRC of the key continuing from
    the CRC of "topic#": the very hash a query computes of the whole string,
    non-ASCII text and several topics in one batch included."""
    svc = IndexService(tmp_path / "index", hash_slot_num=97, index_num=1000)
    topics = ["T", "Tópico-ß", "话题"]
    reqs = [DispatchRequest(topics[i % 3], 0, 1000 + i * 100, 100, 0, 1_700_000_000_000 + i,
                            i, f"ключ{i % 4} k{i}" if i % 2 else None, f"U{i}ü", 0)
            for i in range(30)]
    svc.dispatch_batch(reqs)
    for r in reqs:
        assert r.commit_log_offset in svc.query_offset(r.topic, f"U{r.consume_queue_offset}ü",
                                                       10, 0, 2**62)
        for key in (r.keys or "").split():
            assert r.commit_log_offset in svc.query_offset(r.topic, key, 64, 0, 2**62)
    f = svc.files[0]
    f.flush()
    # the entries' hash fields are key_hash of "topic#key"
    entry = f.file.mm[f._entries_at + INDEX_ENTRY_SIZE : f._entries_at + 2 * INDEX_ENTRY_SIZE]
    assert int.from_bytes(entry[:4], "big") == key_hash(f"{reqs[0].topic}#U0ü")
    svc.close()


# ---- the next index file, made ahead of need ----------------------------------------


def _index_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.isdigit())


def test_next_file_made_ahead_is_the_one_the_dispatch_takes(tmp_path: Path, monkeypatch) -> None:
    import broker.store.index_service as service

    svc = IndexService(tmp_path / "index", hash_slot_num=4, index_num=10)
    assert svc.wants_next_file()  # no file yet
    assert svc.prepare_next(now_ms=1_700_000_000_000)
    assert svc.next_ready and not svc.wants_next_file()
    assert not svc.prepare_next()  # one is enough
    made = svc._next
    # from here on the dispatch must not make a file itself while one is ready
    real = service.IndexFile
    inline: list[Path] = []

    def counted(path: Path, *args: int) -> object:
        inline.append(path)
        return real(path, *args)

    monkeypatch.setattr(service, "IndexFile", counted)
    svc.dispatch(req(1, "a", None, 1_700_000_000_000))
    assert svc.files == [made] and not svc.next_ready and inline == []
    for i in range(2, 4):  # index_count 4 of 10 (entry 0 unused): under half full
        svc.dispatch(req(i, "a", None, 1_700_000_000_000))
    assert not svc.wants_next_file()
    svc.dispatch(req(4, "a", None, 1_700_000_000_000))  # half full
    assert svc.wants_next_file()
    monkeypatch.setattr(service, "IndexFile", real)
    assert svc.prepare_next(now_ms=1_700_000_000_000)  # same ms: named after the last
    second = svc._next
    assert second is not None and second.path.name > made.path.name
    monkeypatch.setattr(service, "IndexFile", counted)
    for i in range(5, 12):  # fills the first file (9 entries), goes on in the one made ahead
        svc.dispatch(req(i, "a", None, 1_700_000_000_000))
    assert svc.files == [made, second] and inline == []
    assert svc.query_offset("T", "a", 100, 0, 2**62) == [i * 100 for i in range(11, 0, -1)]
    svc.close()


def test_a_file_made_ahead_but_named_before_the_last_is_not_used(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", hash_slot_num=4, index_num=4)
    for i in range(1, 4):
        svc.dispatch(req(i, "a", None, 1_700_000_000_000))  # the first file, full
    first = svc.files[0].path.name
    # made ahead with an earlier clock than the last file's name (the clock went back)
    import broker.store.index_service as service
    early = service.IndexFile(tmp_path / "index" / "20000101000000000", 4, 4)
    svc._next = early
    svc.dispatch(req(4, "b", None, 1_700_000_001_000))
    assert len(svc.files) == 2 and svc.files[1] is not early
    assert svc.files[1].path.name > first
    assert not early.path.exists() and not svc.next_ready
    assert svc.query_offset("T", "b", 10, 0, 2**62) == [400]
    svc.close()


def test_close_removes_a_file_made_ahead_and_never_used(tmp_path: Path) -> None:
    d = tmp_path / "index"
    svc = IndexService(d, hash_slot_num=4, index_num=10)
    svc.dispatch(req(1, "a", None, 1_700_000_000_000))
    kept = _index_files(d)
    for i in range(2, 6):
        svc.dispatch(req(i, "a", None, 1_700_000_000_000))
    assert svc.prepare_next()
    assert len(_index_files(d)) == 2
    svc.close()
    assert _index_files(d) == kept
    assert not svc.prepare_next()  # closed: nothing more is made
    again = IndexService(d, hash_slot_num=4, index_num=10)
    again.load()
    assert again.query_offset("T", "a", 10, 0, 2**62) == [500, 400, 300, 200, 100]
    again.close()


def test_a_failure_to_make_the_next_file_is_left_to_the_dispatch(tmp_path: Path,
                                                                   monkeypatch) -> None:
    import broker.store.index_service as service
    from broker.store.allocation import AllocationError

    svc = IndexService(tmp_path / "index", hash_slot_num=4, index_num=10)

    def refuse(path: Path, *args: int) -> object:
        raise AllocationError("no blocks", path, 0, 0)

    monkeypatch.setattr(service, "IndexFile", refuse)
    assert not svc.prepare_next()  # logged, not raised
    assert not svc.next_ready and svc.wants_next_file()
    monkeypatch.undo()
    svc.dispatch(req(1, "a", None, 1_700_000_000_000))  # makes its file itself
    assert len(svc.files) == 1
    assert svc.query_offset("T", "a", 10, 0, 2**62) == [100]
    svc.close()


def test_store_makes_the_index_file_ahead_at_load_and_in_the_flush(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=100)
    cfg.max_hash_slot_num, cfg.max_index_num = 4, 10
    store = open_store(cfg)
    svc = store.index_service
    assert svc is not None and svc.next_ready and svc.files == []  # a new store's first
    for i in range(4):
        store.put_message(inner("T", 0, b"m%d" % i, keys=f"k{i}"))
    assert len(svc.files) == 1 and not svc.next_ready  # taken, now half full
    store.flush_consume_queues()
    assert svc.next_ready
    for i in range(4, 10):  # 9 keys a file
        store.put_message(inner("T", 0, b"m%d" % i, keys=f"k{i}"))
    assert len(svc.files) == 2
    from protocol.record import decode_record
    assert [decode_record(r).body for r in store.query_message("T", "k6", 5, 0, 2**62)] == [b"m6"]
    store.shutdown()


def test_slot_table_is_zero_and_writable(tmp_path: Path, monkeypatch) -> None:
    import mmap
    import os

    from broker.store.index_file import _anonymous, _touch

    size = (5 << 20) + 3  # not a whole number of 2 MiB pieces
    table = _anonymous(size)
    assert table[:size] == bytes(size)
    table[size - 1] = 7
    assert table[size - 1] == 7
    table.close()
    # without /dev/zero the pieces are written through the mapping
    plain = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    opened = os.open

    def no_dev_zero(path: str, *a: int) -> int:
        if path == "/dev/zero":
            raise FileNotFoundError(path)
        return opened(path, *a)

    monkeypatch.setattr(os, "open", no_dev_zero)
    _touch(plain, size)
    monkeypatch.undo()
    assert plain[:size] == bytes(size)
    plain.close()
