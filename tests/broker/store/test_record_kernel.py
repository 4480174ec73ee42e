"""broker/store/record_kernel.py, the commit log's record loop written for Cython:
run as plain Python and compiled (deploy/speedups.py), each compared with
``encode_records_loop``; and two commit logs written with either are the same."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.store import commit_log, record_kernel
from broker.store.commit_log import (
    SCHEDULE_TOPIC,
    CommitLog,
    DispatchRequest,
    MessageExtBrokerInner,
    encode_records_loop,
)
from protocol.crc import crc32
from protocol.record import PROPERTIES_LENGTH, pack_host, record_size, topic_part
from protocol.speedups import compiled

Encode = Callable[..., tuple[Any, list[DispatchRequest], list[int]]]
COMPILED = compiled("broker.store._record_kernel_c",
                    Path(commit_log.__file__).with_name("record_kernel.py"), "encode_records")
ENCODERS: list[Any] = [pytest.param(record_kernel.encode_records, id="plain-python")]
if COMPILED is not None:
    ENCODERS.append(pytest.param(COMPILED, id="compiled"))
STORE_HOST = pack_host("10.0.0.9:10911")
LEVELS = {1: 1000, 2: 5000, 18: 7_200_000}


def prepared(msgs: list[MessageExtBrokerInner]) -> tuple[list[Any], int]:
    """What CommitLog.put_messages hands its encoder: the fields of each record."""
    out, total = [], 0
    for m in msgs:
        tb, pb = m.topic.encode(), m.properties_string.encode()
        size = record_size(len(m.body), len(tb), len(pb))
        out.append((m, topic_part(tb), PROPERTIES_LENGTH.pack(len(pb)) + pb, size,
                    crc32(m.body) & 0x7FFFFFFF))
        total += size
    return out, total


def message(rnd: random.Random, topic: str, **fields: Any) -> MessageExtBrokerInner:
    values: dict[str, Any] = dict(
        topic=topic, queue_id=rnd.randrange(8), flag=rnd.getrandbits(31) - 2**30,
        body=rnd.randbytes(rnd.choice((0, 1, 100, 1024, 5000))),
        properties_string=rnd.choice(("", "UNIQ_KEY\x01ABC\x02", "KEYS\x01k1 k2\x02TAGS\x01t\x02")),
        tags_code=rnd.getrandbits(63) - 2**62, keys=rnd.choice((None, "k1 k2")),
        uniq_key=rnd.choice((None, "ABC")), sys_flag=rnd.choice((0, 4, 8, 12)),
        born_timestamp=rnd.getrandbits(44), born_host=rnd.choice(("127.0.0.1:4000",
                                                                   "192.168.1.7:51234")),
        reconsume_times=rnd.randrange(17), prepared_transaction_offset=rnd.getrandbits(40))
    values.update(fields)
    return MessageExtBrokerInner(**values)


def both(encode: Encode, msgs: list[MessageExtBrokerInner], wrote: int, queue_offset: int,
         queue_offsets: list[int] | None = None) -> None:
    encoded, total = prepared(msgs)
    args = (encoded, wrote, total, queue_offset, queue_offsets, 1_795_780_000_123, STORE_HOST,
            SCHEDULE_TOPIC, LEVELS, DispatchRequest, pack_host)
    data, dispatches, offsets = encode(*args)
    want_data, want_dispatches, want_offsets = encode_records_loop(*args)
    assert bytes(data) == want_data
    assert dispatches == want_dispatches and offsets == want_offsets
    assert all(type(d) is DispatchRequest for d in dispatches)


@pytest.mark.parametrize("encode", ENCODERS)
def test_same_as_the_reference_loop(encode: Encode) -> None:
    rnd = random.Random(3)
    one_topic = [message(rnd, "TopicA", queue_id=2) for _ in range(32)]
    both(encode, one_topic, 0, 0)
    both(encode, one_topic, 2**40 + 17, 123_456)
    both(encode, one_topic[:1], 5, 0)
    mixed = [message(rnd, rnd.choice(("TopicA", "B" * 127, SCHEDULE_TOPIC, "%RETRY%g")))
             for _ in range(40)]
    both(encode, mixed, 999, 0, [rnd.getrandbits(32) for _ in mixed])
    # the schedule topic's tag field: the delivery time of each queue's level
    delayed = [message(rnd, SCHEDULE_TOPIC, queue_id=q) for q in (0, 1, 17, 30)]
    both(encode, delayed, 0, 0)
    # the largest and smallest values each field holds
    edges = [message(rnd, "T", queue_id=2**31 - 1, flag=-(2**31), sys_flag=2**31 - 1,
                     born_timestamp=2**63 - 1, reconsume_times=2**31 - 1,
                     prepared_transaction_offset=-(2**63), tags_code=2**63 - 1)]
    both(encode, edges, 2**63 - 2**20, 2**63 - 10)


@pytest.mark.parametrize("encode", ENCODERS)
@pytest.mark.parametrize("field, value", [
    ("queue_id", 2**31), ("flag", -(2**31) - 1), ("sys_flag", 2**40),
    ("born_timestamp", 2**63), ("reconsume_times", 2**31),
    ("prepared_transaction_offset", -(2**63) - 1)])
def test_values_over_their_fields_raise_as_the_reference_does(encode: Encode, field: str,
                                                              value: int) -> None:
    m = message(random.Random(1), "T", **{field: value})
    encoded, total = prepared([m])
    args = (encoded, 0, total, 0, None, 1, STORE_HOST, SCHEDULE_TOPIC, LEVELS,
            DispatchRequest, pack_host)
    with pytest.raises(struct.error):
        encode_records_loop(*args)
    with pytest.raises((OverflowError, struct.error)):
        encode(*args)


@pytest.mark.parametrize("encode", ENCODERS)
def test_sizes_that_do_not_add_up_are_refused(encode: Encode) -> None:
    m = message(random.Random(2), "T")
    encoded, total = prepared([m])
    wrong = [(m, encoded[0][1], encoded[0][2], encoded[0][3] + 1, encoded[0][4])]
    with pytest.raises(ValueError, match="do not add up"):
        encode(wrong, 0, total + 1, 0, None, 1, STORE_HOST, SCHEDULE_TOPIC, LEVELS,
               DispatchRequest, pack_host)
    with pytest.raises(ValueError, match="runs past"):
        encode(encoded, 0, total - 1, 0, None, 1, STORE_HOST, SCHEDULE_TOPIC, LEVELS,
               DispatchRequest, pack_host)


def test_a_body_held_as_a_view_is_stored_as_bytes() -> None:
    m = message(random.Random(4), "T", body=b"payload")
    view = message(random.Random(4), "T", body=memoryview(bytearray(b"payload")))
    enc_m, total = prepared([m])
    enc_v, _ = prepared([view])
    args = (0, total, 0, None, 1, STORE_HOST, SCHEDULE_TOPIC, LEVELS, DispatchRequest, pack_host)
    for encode in [record_kernel.encode_records] + ([COMPILED] if COMPILED else []):
        assert bytes(encode(enc_v, *args)[0]) == encode_records_loop(enc_m, *args)[0]


@pytest.mark.parametrize("use_kernel", [True, False])
def test_commit_logs_written_either_way_are_the_same(tmp_path: Path, use_kernel: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commit_log.time, "time", lambda: 1_795_780_000.5)
    rnd = random.Random(9)
    batches = [[message(rnd, "TopicA", queue_id=1) for _ in range(32)] for _ in range(20)]
    logs = []
    for name, kernel_on in (("a", use_kernel), ("b", False)):
        log = CommitLog(tmp_path / name, 256 << 10, "10.0.0.9:10911", 64 << 10)
        log.use_kernel = kernel_on
        for b in batches:
            result, dispatches = log.put_messages(b)
            assert result.put_message_status.name == "PUT_OK" and len(dispatches) == 32
        logs.append(log)
    for log in logs:
        log.close()
    files_a = sorted((tmp_path / "a").iterdir())
    files_b = sorted((tmp_path / "b").iterdir())
    assert [f.name for f in files_a] == [f.name for f in files_b] and len(files_a) > 1
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(files_a, files_b, strict=True))
