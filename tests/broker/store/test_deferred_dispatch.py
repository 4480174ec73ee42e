"""A put that leaves its dispatch for later (``defer=True``): the records are in
the commit log at once and reach their consume queue, index and long-poll
listeners only with ``dispatch_deferred``, which every later put and ``reput``
run first, so nothing is dispatched twice, out of order or never."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.store import DefaultMessageStore, PutMessageStatus
from protocol.batch import decode_batch, encode_batch
from protocol.record import decode_record
from tests.broker.store.faults import Disk, under
from tests.broker.store.helpers import inner, make_config, open_store
from tests.broker.store.test_message_store import pull_all


def put_deferred(store: DefaultMessageStore, topic: str, body: bytes, queue_id: int = 0,
                 keys: str = "") -> int:
    """One message put with its dispatch deferred; its queue offset."""
    props = f"KEYS\x01{keys}\x02" if keys else ""
    r = store.put_batch(topic, queue_id, [(0, body, props)], sys_flag=0,
                        born_timestamp=1, born_host="127.0.0.1:5", reconsume_times=0,
                        defer=True)
    assert r is not None and r.put_message_status is PutMessageStatus.PUT_OK
    assert r.append_result is not None
    return r.append_result.logics_offset


def put_body_deferred(store: DefaultMessageStore, topic: str, bodies: list[bytes]) -> None:
    """A producer's batch body through put_batch_body (or put_batch where the
    compiled loops are not built), deferred."""
    data = encode_batch([(0, b, "") for b in bodies])
    r = store.put_batch_body(topic, 0, data, sys_flag=0, born_timestamp=1,
                             born_host="127.0.0.1:5", reconsume_times=0, defer=True)
    if r is None:
        r = store.put_batch(topic, 0, decode_batch(data), sys_flag=0, born_timestamp=1,
                            born_host="127.0.0.1:5", reconsume_times=0, defer=True)
    assert r is not None and r.put_message_status is PutMessageStatus.PUT_OK


def bodies(store: DefaultMessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    msgs = pull_all(store, topic, queue_id)
    assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
    return [m.body for m in msgs]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    s = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=100))
    yield s
    if s.running:
        s.shutdown()


def test_records_reach_their_queue_only_when_dispatched(store: DefaultMessageStore) -> None:
    heard: list[tuple[str, int, int]] = []
    store.dispatch_listeners.append(lambda t, q, n: heard.append((t, q, n)))
    grew: list[int] = []  # the HA writers' wake-up: the log grew, dispatched or not
    store.append_listeners.append(lambda: grew.append(store.get_max_phy_offset()))
    assert put_deferred(store, "T", b"a", keys="k1") == 0
    assert grew == [store.get_max_phy_offset()]
    # in the commit log, not yet in the queue, the index or a listener's ears
    assert store.dispatch_behind
    assert store.get_max_offset_in_queue("T", 0) == 0
    assert bodies(store, "T") == []
    assert heard == []
    assert store.query_message("T", "k1", 10, 0, 2**62) == []
    store.dispatch_deferred()
    assert not store.dispatch_behind
    assert bodies(store, "T") == [b"a"]
    assert heard == [("T", 0, 1)]
    found = store.query_message("T", "k1", 10, 0, 2**62)
    assert [decode_record(r).body for r in found] == [b"a"]
    assert len(grew) == 1
    store.dispatch_deferred()  # nothing left: nothing happens twice
    assert bodies(store, "T") == [b"a"]
    assert heard == [("T", 0, 1)]


def test_the_next_put_dispatches_first(store: DefaultMessageStore) -> None:
    # queue offsets are handed out at the put, so the order holds whichever way
    assert put_deferred(store, "T", b"0") == 0
    assert put_deferred(store, "T", b"1") == 1
    assert put_deferred(store, "U", b"u0") == 0
    assert store.put_message(inner("T", 0, b"2")).put_message_status is PutMessageStatus.PUT_OK
    assert bodies(store, "T") == [b"0", b"1", b"2"]
    assert bodies(store, "U") == [b"u0"]
    put_body_deferred(store, "T", [b"3", b"4"])
    assert bodies(store, "T") == [b"0", b"1", b"2"]
    put_body_deferred(store, "T", [b"5"])  # takes the batch body's own way again
    assert bodies(store, "T") == [b"0", b"1", b"2", b"3", b"4"]
    store.dispatch_deferred()
    assert bodies(store, "T") == [b"0", b"1", b"2", b"3", b"4", b"5"]
    assert not store.dispatch_behind


def test_mixed_puts_and_reput_dispatch_first(store: DefaultMessageStore) -> None:
    put_deferred(store, "T", b"0")
    result, placed = store.put_together([inner("T", 0, b"1"), inner("V", 0, b"v")])
    assert result.put_message_status is PutMessageStatus.PUT_OK and len(placed) == 2
    assert bodies(store, "T") == [b"0", b"1"] and bodies(store, "V") == [b"v"]
    put_deferred(store, "T", b"2")
    assert store.reput()  # the periodic disk check's retry: the deferred put first
    assert bodies(store, "T") == [b"0", b"1", b"2"]
    store.dispatch_deferred()  # already done by the reput: not again
    assert bodies(store, "T") == [b"0", b"1", b"2"]


def test_a_cursor_moved_by_a_reread_is_not_dispatched_again(store: DefaultMessageStore) -> None:
    heard: list[tuple[str, int, int]] = []
    store.dispatch_listeners.append(lambda t, q, n: heard.append((t, q, n)))
    put_deferred(store, "T", b"0", keys="k")
    # the records read back from the commit log (as a recovery or replica would)
    # while the deferred entry is still held
    deferred = store._deferred
    store._deferred = None
    assert store.reput()
    store._deferred = deferred
    store.dispatch_deferred()
    assert bodies(store, "T") == [b"0"]
    assert heard == [("T", 0, 1)]
    assert len(store.query_message("T", "k", 10, 0, 2**62)) == 1


def test_shutdown_dispatches_and_a_restart_keeps_everything(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=100)
    store = open_store(cfg)
    put_deferred(store, "T", b"0", keys="k")
    store.shutdown()
    # the queue's entry was written before the files closed (not left to recovery)
    (cq_file,) = (tmp_path / "consumequeue" / "T" / "0").iterdir()
    assert cq_file.read_bytes()[:20] != bytes(20)
    store = open_store(cfg)
    assert bodies(store, "T") == [b"0"]
    assert not store.dispatch_behind
    store.shutdown()


def test_crash_with_a_dispatch_pending_recovers_it(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=100)
    store = open_store(cfg)
    put_deferred(store, "T", b"0")
    store.flush_commit_log()
    # the process dies here: no dispatch, no clean shutdown
    store.commit_log.close()
    for cq in store._all_consume_queues():
        cq.close()
    store.store_lock.release()  # a crashed broker's lock goes with its process
    store = open_store(cfg)
    assert bodies(store, "T") == [b"0"]
    store.shutdown()


def test_a_deferred_dispatch_that_fails_is_left_to_reput(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    disk = Disk(monkeypatch)
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=10))
    for i in range(10):  # the queue's first file is now full
        put_deferred(store, "T", b"%d" % i)
    store.dispatch_deferred()
    disk.full_for = under("consumequeue")
    put_deferred(store, "T", b"10")
    store.dispatch_deferred()  # no room for the entry: the cursor stays
    assert store.dispatch_behind and store.dispatch_failure is not None
    r = store.put_batch("T", 0, [(0, b"refused", "")], sys_flag=0, born_timestamp=1,
                        born_host="127.0.0.1:5", reconsume_times=0, defer=True)
    assert r is not None and r.put_message_status is PutMessageStatus.DISK_FULL
    disk.space_returns()
    put_deferred(store, "T", b"11")  # the reput first, then this one
    store.dispatch_deferred()
    assert bodies(store, "T") == [b"%d" % i for i in range(12)]
    store.shutdown()
