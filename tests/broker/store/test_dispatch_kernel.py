"""The dispatchers' per-record loops of broker/store/batch_records_kernel.py, run as
plain Python and compiled (deploy/speedups.py): each against the reference
loops (struct's packing in dispatch.py, index_service.index_hashes_loop); a
store dispatching with them against one dispatching without; the store's
choice of the compiled module."""

from __future__ import annotations

import hashlib
import importlib
import struct
import types
from collections.abc import Callable
from itertools import starmap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store import batch_records_kernel as dispatch_kernel
from broker.store import dispatch
from broker.store.commit_log import DispatchRequest
from broker.store.consume_queue import CQ_ENTRY
from broker.store.dispatch import _CQ_FIELDS, compiled_dispatch_kernel
from broker.store.index_service import index_hashes_loop
from protocol.crc import crc32
from protocol.speedups import NO_SPEEDUPS_ENV
from tests.broker.store.helpers import inner, make_config, open_store

CQ_KERNELS: list[Any] = [pytest.param(dispatch_kernel.cq_entries, id="plain-python")]
HASH_KERNELS: list[Any] = [pytest.param(dispatch_kernel.index_hashes, id="plain-python")]
BOTH: list[Any] = [pytest.param(dispatch_kernel.cq_entries, dispatch_kernel.index_hashes,
                                id="plain-python")]
if compiled_dispatch_kernel("cq_entries") is not None:
    CQ_KERNELS.append(pytest.param(compiled_dispatch_kernel("cq_entries"), id="compiled"))
    HASH_KERNELS.append(pytest.param(compiled_dispatch_kernel("index_hashes"), id="compiled"))
    BOTH.append(pytest.param(compiled_dispatch_kernel("cq_entries"),
                             compiled_dispatch_kernel("index_hashes"), id="compiled"))

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def request(topic: str = "T", offset: int = 0, size: int = 100, tags: int = 0, ms: int = 1,
            keys: str | None = None, uniq: str | None = None, sys_flag: int = 0,
            queue_offset: int = 0) -> DispatchRequest:
    return DispatchRequest(topic, 0, offset, size, tags, ms, queue_offset, keys, uniq, sys_flag)


def reference_entries(requests: list[DispatchRequest]) -> bytes:
    return b"".join(starmap(CQ_ENTRY.pack, map(_CQ_FIELDS, requests)))


def test_the_field_positions_are_dispatch_requests() -> None:
    fields = DispatchRequest._fields
    assert [fields.index(name) for name in (
        "topic", "commit_log_offset", "msg_size", "tags_code", "store_timestamp", "keys",
        "uniq_key", "sys_flag")] == [
        dispatch_kernel._TOPIC, dispatch_kernel._OFFSET, dispatch_kernel._SIZE,
        dispatch_kernel._TAGS, dispatch_kernel._STORE_MS, dispatch_kernel._KEYS,
        dispatch_kernel._UNIQ, dispatch_kernel._SYS_FLAG]
    assert (dispatch_kernel._TX_MASK, dispatch_kernel._TX_PREPARED,
            dispatch_kernel._TX_ROLLBACK) == (0xC, 0x4, 0xC)


@pytest.mark.parametrize("kernel", CQ_KERNELS)
@settings(max_examples=200, deadline=None)
@given(fields=st.lists(st.tuples(st.integers(*INT64), st.integers(*INT32),
                                 st.integers(*INT64)), max_size=40))
def test_cq_entries_are_structs(kernel: Callable[..., Any],
                                fields: list[tuple[int, int, int]]) -> None:
    requests = [request(offset=o, size=s, tags=t) for o, s, t in fields]
    got = kernel(requests)
    assert got is not None
    assert bytes(got) == reference_entries(requests)


@pytest.mark.parametrize("kernel", CQ_KERNELS)
def test_cq_entries_give_up_where_struct_would_refuse(kernel: Callable[..., Any]) -> None:
    good = request(offset=5, size=6, tags=-7)
    for bad in (request(offset=2**63), request(offset=-(2**63) - 1), request(size=2**31),
                request(size=-(2**31) - 1), request(tags=2**63), request(tags=-(2**63) - 1)):
        assert kernel([good, bad]) is None
        with pytest.raises(struct.error):
            reference_entries([good, bad])
    # not an int (struct takes a bool and a float nowhere: the loop decides), not a tuple
    for odd in (request(offset=True), request(size=1.0), request(tags="1")):  # type: ignore[arg-type]
        assert kernel([good, odd]) is None
    assert kernel([good, [1, 2, 3, 4, 5]]) is None
    assert kernel([good, (0, 0, 1)]) is None  # too short
    assert kernel([]) == bytearray()


_KEYS = st.one_of(st.none(), st.lists(st.sampled_from(["k", "k2", "", " ", "ü", "a b"]),
                                      max_size=4).map(" ".join))
_REQUESTS = st.lists(st.builds(
    request,
    topic=st.sampled_from(["T", "Other", "TopicÄ"]),
    offset=st.integers(0, 2000),
    ms=st.integers(0, 2**45),
    keys=_KEYS,
    uniq=st.one_of(st.none(), st.just(""), st.text(max_size=40)),
    sys_flag=st.sampled_from([0, 0x4, 0x8, 0xC, 0x1, 0x7FFFFFFF, -1])), max_size=30)


@pytest.mark.parametrize("kernel", HASH_KERNELS)
@settings(max_examples=300, deadline=None)
@given(requests=_REQUESTS, indexed_to=st.integers(-1, 2000))
def test_index_hashes_are_the_loops(kernel: Callable[..., Any], requests: list[DispatchRequest],
                                    indexed_to: int) -> None:
    assert kernel(requests, indexed_to, crc32) == index_hashes_loop(requests, indexed_to)


@pytest.mark.parametrize("kernel", HASH_KERNELS)
def test_index_hashes_of_a_known_key(kernel: Callable[..., Any]) -> None:
    from broker.store.index_file import key_hash
    reqs = [request(offset=10, ms=7, keys="a  b", uniq="U"),
            request(offset=20, uniq="P", sys_flag=0x4),  # prepared: no keys, yet seen
            request(offset=5, uniq="old")]  # at or below what was indexed: skipped
    hashed, indexed_to = kernel(reqs, 5, crc32)
    assert hashed == [(key_hash("T#a"), 10, 7), (key_hash("T#b"), 10, 7), (key_hash("T#U"), 10, 7)]
    assert indexed_to == 20
    assert kernel([request(), ("T",)], -1, crc32) is None  # not a request: the loop decides


def _put_all(store: Any) -> None:
    """Batches (with keys) and single sends over two queues, wrapping the 10-entry
    consume-queue files, and a message of a prepared transaction."""
    for i in range(12):
        msgs = [inner("T", i % 2, b"x" * (30 + j), tags=f"t{j}", keys=f"k{i} k{j}")
                for j in range(1 + i % 4)]
        store.put_messages(msgs)
        store.put_message(inner("T", 1, b"single", keys=f"s{i}"))
    prepared = inner("T", 0, b"half", keys="half")
    prepared.sys_flag = 0x4
    store.put_message(prepared)


def _entries(cq: Any) -> tuple[tuple[int, int, int], ...]:
    """Every entry of a consume queue, file after file."""
    out: list[tuple[int, int, int]] = []
    while got := cq.get_entries(len(out), 100):
        out += got
    return tuple(out)


def _queues_and_index(store: Any) -> tuple[Any, ...]:
    queues = tuple(_entries(store.find_consume_queue("T", q)) for q in (0, 1))
    found = tuple(tuple(store.index_service.query_offset("T", key, 100, 0, 2**62))
                  for key in ("k3", "k0", "s4", "k11", "half"))
    return queues, found


@pytest.mark.parametrize(("cq", "hashes"), BOTH)
def test_a_store_dispatches_the_same_with_the_kernel(tmp_path: Path, cq: Any, hashes: Any
                                                     ) -> None:
    answers = []
    for name, on in (("with", True), ("without", False)):
        store = open_store(make_config(tmp_path / name))
        try:
            cq_dispatcher = store.dispatchers[0]
            assert isinstance(cq_dispatcher, dispatch.CommitLogDispatcherBuildConsumeQueue)
            cq_dispatcher.cq_entries = cq if on else None
            store.index_service.hash_kernel = hashes if on else None
            _put_all(store)
            answers.append(_queues_and_index(store))
        finally:
            store.shutdown()
    assert answers[0] == answers[1]
    queues, found = answers[0]
    assert sum(map(len, queues)) == sum(1 + i % 4 for i in range(12)) + 12 + 1
    assert all(found[:4]) and not found[4]  # every key found; the prepared one has none


def test_put_packed_only_follows_the_last_entry(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path))
    try:
        cq = store.find_consume_queue("T", 0)
        entry = CQ_ENTRY.pack(0, 10, 0)
        assert not cq.put_packed(entry, 0, 10)  # no file yet: put_entries makes one
        cq.put_entries([(0, 10, 0)], 0)
        assert not cq.put_packed(entry, 5, 10)  # not the next entry
        assert not cq.put_packed(entry * 10, 1, 10)  # past the file's room
        assert cq.put_packed(CQ_ENTRY.pack(10, 5, 3) * 2, 1, 15)
        assert cq.get_entries(0, 10) == [(0, 10, 0), (10, 5, 3), (10, 5, 3)]
        assert cq.max_physic_offset == 15
    finally:
        store.shutdown()


def test_the_store_takes_the_compiled_loops_only_when_current(
        monkeypatch: pytest.MonkeyPatch) -> None:
    source = Path(dispatch.__file__).with_name("batch_records_kernel.py").read_bytes()
    current = hashlib.sha256(source).hexdigest()

    def fake(sha: str) -> Callable[[str], types.ModuleType]:
        mod = types.ModuleType("fake")
        mod.SOURCE_SHA = sha  # type: ignore[attr-defined]
        mod.cq_entries = dispatch_kernel.cq_entries  # type: ignore[attr-defined]
        return lambda name: mod

    monkeypatch.delenv(NO_SPEEDUPS_ENV, raising=False)
    monkeypatch.setattr(importlib, "import_module", fake(current))
    assert compiled_dispatch_kernel("cq_entries") is dispatch_kernel.cq_entries
    monkeypatch.setattr(importlib, "import_module", fake("0" * 64))  # a stale build
    assert compiled_dispatch_kernel("cq_entries") is None
    monkeypatch.setattr(importlib, "import_module", fake(current))
    monkeypatch.setenv(NO_SPEEDUPS_ENV, "1")  # turned off
    assert compiled_dispatch_kernel("cq_entries") is None
