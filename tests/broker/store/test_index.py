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
