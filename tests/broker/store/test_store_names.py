"""The store builds paths only from valid names and writes only whole, valid records.

Any string as a topic (NUL, separators, ``..``, absolute paths, 300
characters) gives a clean refusal or a valid result, never a file or
directory created or deleted outside the store; a record an older broker let
in with such a topic never stops a restart.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store import DefaultMessageStore, PutMessageStatus, StoreError
from broker.store.commit_log import MessageExtBrokerInner
from broker.store.consume_queue import InvalidQueueError
from protocol.names import topic_problem
from protocol.record import encode_record, pack_host
from tests.broker.store.faults import tree
from tests.broker.store.helpers import inner, make_config, open_store
from tests.broker.store.test_message_store import pull_all

HOSTILE = [
    "nul\x00byte", "%RETRY%nul\x00byte", "%DLQ%x/../RTSeed", "x/../../../escape", "../../victim",
    "/tmp/victim", "..", ".", "", "a" * 300, "a" * 128, "\u00e9t\u00e9", "a\nb", "a b", "\\..\\x",
]
NAMES = st.one_of(
    st.text(max_size=300),
    st.text(alphabet="%|aZ09_-./\\\x00 :", max_size=300),
    st.sampled_from(HOSTILE),
    st.text(max_size=40).map(lambda s: "/" + s),
    st.text(max_size=40).map(lambda s: "x/../" + s),
    st.text(max_size=40).map(lambda s: "../../" + s),
)


def bodies(store: DefaultMessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    return [m.body for m in pull_all(store, topic, queue_id)]


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[tuple[DefaultMessageStore, Path]]:
    """A store at ``base/a/b/store`` with an empty ``victim`` directory at
    every level around it; returns (store, base)."""
    base = tmp_path
    root = base / "a" / "b" / "store"
    for d in (base / "victim", base / "a" / "victim", base / "a" / "b" / "victim", root):
        d.mkdir(parents=True)
    store = open_store(make_config(root, cl_size=1 << 16, cq_entries=10))
    store.put_message(inner("RTSeed", 0, b"seed"))
    yield store, base
    store.shutdown()


def outside(base: Path) -> dict[str, bytes | None]:
    return {p: c for p, c in tree(base).items() if not p.startswith("a/b/store")}


@pytest.mark.parametrize("topic", HOSTILE)
def test_put_refuses_invalid_topics(sandbox: tuple[DefaultMessageStore, Path], topic: str) -> None:
    store, base = sandbox
    before, end = tree(base), store.get_max_phy_offset()
    r = store.put_message(inner(topic, 0, b"x"))
    assert r.put_message_status is PutMessageStatus.MESSAGE_ILLEGAL
    assert r.detail == topic_problem(topic)
    batch = store.put_messages([inner(topic, 0, b"x"), inner(topic, 0, b"y")])
    assert batch.put_message_status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.get_max_phy_offset() == end
    assert tree(base) == before
    assert bodies(store, "RTSeed") == [b"seed"]


@pytest.mark.parametrize(("field", "value"), [
    ("queue_id", -1), ("queue_id", 2**31), ("flag", 2**31), ("flag", -(2**31) - 1),
    ("sys_flag", 2**40), ("born_timestamp", 2**63), ("born_timestamp", -(2**63) - 1),
    ("reconsume_times", -1), ("reconsume_times", 2**31), ("prepared_transaction_offset", 2**64),
    ("tags_code", 2**63), ("flag", None), ("born_host", "host:notaport"),
    ("born_host", "1.2.3.4:99999999999"), ("properties_string", "\ud800"),
    # a value the put path's "seen before" checks must not take for a known one
    ("topic", None), ("born_host", None), ("topic", 7),
])
def test_put_refuses_out_of_range_fields(tmp_path: Path, field: str, value: object) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16))
    store.put_message(inner("T", 0, b"ok"))
    before, end = tree(tmp_path / "commitlog"), store.get_max_phy_offset()
    m = inner("T", 0, b"bad")
    setattr(m, field, value)
    r = store.put_message(m)
    assert r.put_message_status is PutMessageStatus.MESSAGE_ILLEGAL, r
    assert r.detail
    assert store.get_max_phy_offset() == end and tree(tmp_path / "commitlog") == before
    assert store.commit_log.topic_queue_table == {"T-0": 1}
    r = store.put_message(inner("T", 0, b"next"))
    assert r.append_result is not None and r.append_result.logics_offset == 1
    assert bodies(store, "T") == [b"ok", b"next"]
    store.shutdown()


def test_extreme_but_valid_fields_are_stored(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16))
    m = inner("T", 2**31 - 1, b"edge")
    m.flag, m.sys_flag, m.born_timestamp = -(2**31), 2**31 - 1, -(2**63)
    m.reconsume_times, m.prepared_transaction_offset = 2**31 - 1, 2**63 - 1
    assert store.put_message(m).put_message_status is PutMessageStatus.PUT_OK
    (got,) = pull_all(store, "T", 2**31 - 1)
    assert (got.flag, got.sys_flag, got.born_timestamp, got.reconsume_times) == (
        -(2**31), 2**31 - 1, -(2**63), 2**31 - 1)
    store.shutdown()


def test_consume_queue_refuses_invalid_names(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16))
    for topic in HOSTILE:
        with pytest.raises(InvalidQueueError):
            store.find_consume_queue(topic, 0)
    for queue_id in (-1, 2**31):
        with pytest.raises(StoreError):
            store.find_consume_queue("T", queue_id)
    assert store.consume_queue_table == {}
    assert not (tmp_path / "consumequeue").exists()
    store.shutdown()


def test_symlinked_topic_directory_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "store"
    (root / "consumequeue").mkdir(parents=True)
    (root / "consumequeue" / "Linked").symlink_to(elsewhere)
    store = open_store(make_config(root, cl_size=1 << 16))  # load skips it
    with pytest.raises(InvalidQueueError):
        store.find_consume_queue("Linked", 0)
    r = store.put_message(inner("Linked", 0, b"x"))  # appended, not dispatched outside
    assert r.put_message_status is PutMessageStatus.PUT_OK
    assert store.dispatch_behind
    assert os.listdir(elsewhere) == []
    assert store.delete_topics({"Linked"}) == 0
    assert elsewhere.exists() and (root / "consumequeue" / "Linked").is_symlink()
    store.shutdown()


@pytest.mark.parametrize("topic", ["../../victim", "../victim", "/tmp", "a" * 300, "x/../../../a",
                                   "nul\x00byte", ".", ".."])
def test_delete_topics_never_leaves_the_store(sandbox: tuple[DefaultMessageStore, Path],
                                             topic: str) -> None:
    store, base = sandbox
    before = tree(base)
    assert store.delete_topics({topic}) == 0
    assert tree(base) == before
    assert bodies(store, "RTSeed") == [b"seed"]


@settings(max_examples=300, deadline=None)
@given(name=NAMES, queue_id=st.one_of(st.integers(-5, 5), st.integers()))
def test_any_name_stays_inside_the_store(name: str, queue_id: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="store-names-"))
    try:
        root = base / "a" / "b" / "store"
        for d in (base / "victim", base / "a" / "victim", base / "a" / "b" / "victim", root):
            d.mkdir(parents=True)
        store = open_store(make_config(root, cl_size=1 << 16, cq_entries=10))
        try:
            before = outside(base)
            try:
                cq = store.find_consume_queue(name, queue_id)
            except StoreError:
                assert topic_problem(name) is not None or not 0 <= queue_id < 2**31
            else:
                assert topic_problem(name) is None
                assert root.resolve() in cq.store_dir.resolve().parents
            r = store.put_message(inner(name, queue_id, b"x"))
            ok = r.put_message_status is PutMessageStatus.PUT_OK
            assert ok == (topic_problem(name) is None and 0 <= queue_id < 2**31)
            store.delete_topics({name})
            assert outside(base) == before
            assert not store.dispatch_behind
        finally:
            store.shutdown()
    finally:
        shutil.rmtree(base)


def append_raw(root: Path, end: int, topic: bytes, queue_id: int, queue_offset: int,
               body: bytes) -> int:
    """Write one record at ``end`` straight into the (one-file) commit log, as
    an older broker could have; returns the new end."""
    f = sorted((root / "commitlog").iterdir())[-1]
    data = bytearray(f.read_bytes())
    rec = encode_record(
        topic=topic, queue_id=queue_id, flag=0, body=body, properties=b"", sys_flag=0,
        born_timestamp=1, born_host=pack_host("10.0.0.1:1"), store_timestamp=2,
        store_host=pack_host("127.0.0.1:10911"), reconsume_times=0,
        prepared_transaction_offset=0, queue_offset=queue_offset,
        physical_offset=int(f.name) + end,
    )
    data[end : end + len(rec)] = rec
    f.write_bytes(bytes(data))
    return end + len(rec)


@pytest.mark.parametrize("abort", [False, True])
def test_restart_with_undispatchable_records(tmp_path: Path, abort: bool) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=10)
    store = open_store(cfg)
    for i in range(3):
        store.put_message(inner("RTSeed", 0, b"seed%d" % i))
    end = store.get_max_phy_offset()
    store.shutdown()
    before_cq = tree(tmp_path / "consumequeue")
    # what an older broker let in: NUL, traversal onto another topic's queue, escapes
    for n, topic in enumerate([b"%RETRY%nul\x00byte", b"%DLQ%x/../RTSeed", b"x/../../../escape",
                               b"/abs", b"\xff\xfe", b"..", b"", b"ok"]):
        end = append_raw(tmp_path, end, topic, 0 if topic != b"ok" else -1, n, b"bad%d" % n)
    append_raw(tmp_path, end, b"RTSeed", 0, 3, b"seed3")  # a valid record after them
    if abort:
        (tmp_path / "abort").touch()
    store = open_store(cfg)  # recovery skips what it cannot dispatch: the broker starts
    assert not store.dispatch_behind
    assert bodies(store, "RTSeed") == [b"seed0", b"seed1", b"seed2", b"seed3"]
    assert set(store.consume_queue_table) == {"RTSeed"}
    assert {p for p in tree(tmp_path / "consumequeue")} == set(before_cq)
    assert not (tmp_path.parent / "escape").exists()
    r = store.put_message(inner("RTSeed", 0, b"seed4"))
    assert r.append_result is not None and r.append_result.logics_offset == 4
    store.shutdown()
    store = open_store(cfg)
    assert bodies(store, "RTSeed")[-1] == b"seed4"
    store.shutdown()


def test_load_skips_directories_that_are_not_topics(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, cl_size=1 << 16, cq_entries=10)
    store = open_store(cfg)
    store.put_message(inner("T", 0, b"x"))
    store.shutdown()
    cq_root = tmp_path / "consumequeue"
    for weird in ("bad name", "a.b", "\u00e9t\u00e9"):
        (cq_root / weird / "0").mkdir(parents=True)
        shutil.copy(next((cq_root / "T" / "0").iterdir()), cq_root / weird / "0")
    (cq_root / "T" / "00").mkdir()
    (cq_root / "T" / "-1").mkdir()
    store = open_store(cfg)
    assert set(store.consume_queue_table) == {"T"}
    assert set(store.consume_queue_table["T"]) == {0}
    assert bodies(store, "T") == [b"x"]
    store.shutdown()


def test_hostile_message_back_record_is_refused(tmp_path: Path) -> None:
    """The store side of CONSUMER_SEND_MSG_BACK with group "nul\\x00byte"."""
    store = open_store(make_config(tmp_path, cl_size=1 << 16))
    m = MessageExtBrokerInner(topic="%RETRY%nul\x00byte", queue_id=0, flag=0, body=b"b",
                              properties_string="", reconsume_times=1)
    assert store.put_message(m).put_message_status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.get_max_phy_offset() == 0
    store.shutdown()
    store = open_store(make_config(tmp_path, cl_size=1 << 16))
    store.shutdown()
