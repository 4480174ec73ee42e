"""broker/store/batch_records_kernel.py, a batch body into commit-log records,
run as plain Python and compiled (deploy/speedups.py): CommitLog.put_batch_body
with it must write what CommitLog.put_batch writes for the decoded body, and
give up (None, nothing written) exactly where the send path must decode the
body and check it: a bad layout, an empty or too long body, properties that are
not UTF-8, a TRAN_MSG property."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.store import batch_records_kernel as plain
from broker.store.commit_log import BatchKernel, CommitLog, compiled_batch_kernel
from protocol.batch import decode_batch_loop, encode_batch
from protocol.errors import RemoteProtocolError
from protocol.message import find_property, properties_to_string
from tests.broker.store.helpers import make_config, open_store
from tests.broker.store.test_put_batch import (
    FILE_SIZE,
    KW,
    MAX_BODY,
    fixed_clock,
    log_bytes,
    new_log,
    outcome,
    two_logs,
)

COMPILED = compiled_batch_kernel()
KERNELS: list[Any] = [pytest.param(BatchKernel(plain.encode_batch, plain.stamp_batch),
                                   id="plain-python")]
if COMPILED is not None:
    KERNELS.append(pytest.param(COMPILED, id="compiled"))
Item = tuple[int, bytes, str]


def kernel_log(root: Path, kernel: BatchKernel) -> CommitLog:
    log = new_log(root)
    log.batch_kernel = kernel
    return log


def must_give_up(data: bytes) -> bool:
    """Whether the send path must decode and check ``data`` itself."""
    try:
        items = decode_batch_loop(data)
    except RemoteProtocolError:
        return True
    return not items or any(not body or len(body) > MAX_BODY
                            or find_property(text, "TRAN_MSG") is not None
                            for _, body, text in items)


def same_as_put_batch(kernel: BatchKernel, root: Path, batches: list[tuple[str, int, bytes]],
                      **kw: Any) -> None:
    """Each body put by put_batch_body with ``kernel`` and by put_batch of its
    items, into two fresh logs: the same answers, and the same bytes after."""
    with two_logs(root, kernel) as (general, fast), fixed_clock():
        for topic, queue_id, data in batches:
            got = fast.put_batch_body(topic, queue_id, data, **kw)
            if must_give_up(data):
                assert got is None
                continue
            want = general.put_batch(topic, queue_id, decode_batch_loop(data), **kw)
            if want is None:  # put_batch leaves it to the general path: so does this
                assert got is None
            else:
                assert got is not None
                assert outcome(got) == outcome(want)


_PIECES = st.sampled_from(["TAGS\x01", "KEYS\x01", "UNIQ_KEY\x01", "TRAN_MSG\x01", "\x02", "\x01",
                           "a", "b c", "XTAGS\x01", "ü", "", "\U0001f600", "UNIQ_KEYS\x01",
                           "\x02TAGS\x01t", "\x02UNIQ_KEY\x01u2"])
_ITEMS = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1),
                            st.binary(max_size=300),
                            st.lists(_PIECES, max_size=10).map("".join)),
                  min_size=1, max_size=6)


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(st.sampled_from(["T", "Other", "not a topic"]),
                                  st.integers(0, 3), _ITEMS), min_size=1, max_size=6),
       sys_flag=st.sampled_from([0, 1, 2, 8, 2**31 - 1, -(2**31)]),
       born=st.integers(1, 2**62))
def test_the_records_are_put_batchs(kernel: BatchKernel,
                                    tmp_path_factory: pytest.TempPathFactory,
                                    batches: list[tuple[str, int, list[Item]]], sys_flag: int,
                                    born: int) -> None:
    bodies = [(topic, queue_id, encode_batch(items)) for topic, queue_id, items in batches]
    same_as_put_batch(kernel, tmp_path_factory.mktemp("logs"), bodies,
                      **dict(KW, sys_flag=sys_flag, born_timestamp=born))


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=_ITEMS, cuts=st.data())
def test_cut_and_corrupted_bodies(kernel: BatchKernel, tmp_path_factory: pytest.TempPathFactory,
                                  items: list[Item], cuts: st.DataObject) -> None:
    blob = bytearray(encode_batch(items))
    for _ in range(cuts.draw(st.integers(1, 4))):
        at = cuts.draw(st.integers(0, len(blob) - 1))
        blob[at] = cuts.draw(st.integers(0, 255))
    blob = blob[:cuts.draw(st.integers(0, len(blob)))]
    same_as_put_batch(kernel, tmp_path_factory.mktemp("logs"), [("T", 1, bytes(blob))], **KW)


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_garbage(kernel: BatchKernel, tmp_path_factory: pytest.TempPathFactory,
                 data: bytes) -> None:
    same_as_put_batch(kernel, tmp_path_factory.mktemp("logs"), [("T", 1, data)], **KW)


@pytest.mark.parametrize("kernel", KERNELS)
def test_edges(kernel: BatchKernel, tmp_path: Path) -> None:
    uniq = properties_to_string({"UNIQ_KEY": "AC11000000010000"})
    cases = [
        [(2**31 - 1, b"x" * MAX_BODY, uniq), (-(2**31), b"\x00", uniq)],  # the largest body
        [(0, b"a", "UNIQ_KEY\x01first\x02UNIQ_KEY\x01last\x02")],  # the last one counts
        [(0, b"a", "KEYS\x01\x02TAGS\x01\x02")],  # empty keys stay "", empty tags hash 0
        [(0, b"a", "TAGS\x01\u4e2d\u6587\x02KEYS\x01k\x01v\x02")],  # a value holding \x01
        [(0, b"a", "TAGS\x01t")],  # no separator at the end
        [(0, b"a", "\x02\x02UNIQ_KEY\x01u\x02\x02")],  # empty entries
        [(0, b"a", "ÜNIQ_KEY\x01u\x02TAGS\x01ü")],  # non-ASCII names and values
        [(0, b"a", "TRAN_MSGX\x01true\x02XTRAN_MSG\x01true")],  # not TRAN_MSG: stored
        [(0, b"a", "TRAN_MSG\x01false")],  # TRAN_MSG of any value: the send path decides
        [(0, b"", uniq)],  # an empty body
        [(0, b"x" * (MAX_BODY + 1), uniq)],  # too long
    ]
    bodies = [("T", n % 4, encode_batch(items)) for n, items in enumerate(cases)]
    bad_utf8 = bytearray(encode_batch([(1, b"b", "ab")]))
    bad_utf8[-1] = 0xFF
    bodies += [("T", 0, bytes(bad_utf8)), ("T", 0, encode_batch([(1, b"b", "ab")]) + b"\x00"),
               ("T", 0, b"")]
    same_as_put_batch(kernel, tmp_path, bodies, **KW)


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_batch_that_does_not_fit_goes_to_the_next_file(kernel: BatchKernel,
                                                         tmp_path: Path) -> None:
    items = [(7, b"x" * 700, properties_to_string({"UNIQ_KEY": "u", "TAGS": "TagA"})),
             (0, b"y" * 600, "")]
    data = encode_batch(items)
    same_as_put_batch(kernel, tmp_path, [("T", q, data) for q in (0, 1, 0, 2, 3)], **KW)
    log = kernel_log(tmp_path / "again", kernel)
    try:
        for q in (0, 1, 0):
            assert log.put_batch_body("T", q, data, **KW) is not None
        assert [len(b) for _, b in log_bytes(log)][0] == FILE_SIZE
        # bigger than a whole file: left to the general path, which refuses it
        assert log.put_batch_body("T", 0, encode_batch(items * 3), **KW) is None
    finally:
        log.close()


def test_no_kernel_or_no_bytes_means_the_other_ways(tmp_path: Path) -> None:
    log = new_log(tmp_path / "log")
    data = encode_batch([(0, b"a", "")])
    try:
        log.batch_kernel = None
        assert log.put_batch_body("T", 0, data, **KW) is None
        log.batch_kernel = BatchKernel(plain.encode_batch, plain.stamp_batch)
        assert log.put_batch_body("T", 0, bytearray(data), **KW) is None  # type: ignore[arg-type]
        for change in (dict(topic="a b"), dict(queue_id=-1), dict(sys_flag=2**31),
                       dict(born_timestamp=2**63), dict(born_host="nowhere"),
                       dict(reconsume_times=-1)):
            args: dict[str, Any] = dict(KW, topic="T", queue_id=0)
            args.update(change)
            assert log.put_batch_body(args.pop("topic"), args.pop("queue_id"), data,
                                      **args) is None, change
        assert all(mf.wrote_position == 0 for mf in log.mapped_file_queue.files)
        assert log.put_batch_body("T", 0, data, **KW) is not None
    finally:
        log.close()


def test_the_store_takes_a_body_only_when_it_takes_writes_as_it_is(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path))
    store.commit_log.batch_kernel = BatchKernel(plain.encode_batch, plain.stamp_batch)
    data = encode_batch([(0, b"a", properties_to_string({"KEYS": "k1"}))])
    try:
        store.disk_full = True  # the other ways answer (and check the messages first)
        assert store.put_batch_body("T", 0, data, **KW) is None
        store.disk_full = False
        result = store.put_batch_body("T", 0, data, **KW)
        assert result is not None and result.append_result is not None
        assert len(store.find_consume_queue("T", 0).get_entries(0, 10)) == 1
        assert len(store.query_message("T", "k1", 10, 0, 2**62)) == 1
    finally:
        store.shutdown()


@pytest.mark.parametrize("kernel", KERNELS)
def test_stamp_batch_makes_the_offset_msg_ids(kernel: BatchKernel) -> None:
    from broker.store.commit_log import DispatchRequest, msg_ids
    head = "0A00000100002A9F"
    for phys, recs in ((0, [0]), (2**40 + 7, [0, 100, 250]), (2**63 - 300, [0, 299]), (5, [])):
        records = bytearray(max(recs, default=0) + 100)
        metas = [(rec, 100, 0, None, None) for rec in recs]
        dispatches, ids = kernel.stamp_batch(records, metas, "T", 0, 0, phys, 0, 1,
                                             tuple.__new__, DispatchRequest, head)
        assert ids == msg_ids(head, [phys + rec for rec in recs])
        assert [d.commit_log_offset for d in dispatches] == [phys + rec for rec in recs]
    with pytest.raises(ValueError):  # a negative offset has no such id
        kernel.stamp_batch(bytearray(100), [(0, 100, 0, None, None)], "T", 0, 0, -1, 0, 1,
                           tuple.__new__, DispatchRequest, head)
