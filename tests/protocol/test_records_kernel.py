"""protocol/records_kernel.py, a pull body's records into messages, run as plain
Python and compiled (deploy/speedups.py): where it decodes a body it must make
what protocol.record's own loop makes, slot for slot; anything else it must
leave (None) to that loop, which then raises or decodes it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import record
from protocol import records_kernel as plain
from protocol.crc import crc32
from protocol.errors import CorruptRecordError
from protocol.message import MessageExt, properties_to_string
from protocol.record import decode_records, encode_record, pack_host, unpack_host
from protocol.speedups import compiled

COMPILED = record.RECORDS_KERNEL
KERNELS: list[Any] = [pytest.param(plain.decode_records, id="plain-python")]
if COMPILED is not None:
    KERNELS.append(pytest.param(COMPILED, id="compiled"))
# the compiled module's own slot_descriptors (None when it is not built from this source)
COMPILED_SLOTS = compiled(record.RECORDS_KERNEL_MODULE, record.RECORDS_KERNEL_SOURCE,
                          "slot_descriptors")
EXTRA = st.sampled_from([None, {}, {"MIN_OFFSET": "0", "MAX_OFFSET": "7"}])


def slots(m: MessageExt) -> tuple[Any, ...]:
    return tuple(getattr(m, name) for name in MessageExt.__slots__)


def by_loop(data: bytes, verify_crc: bool,
            extra: dict[str, str] | None = None) -> list[MessageExt] | str:
    """protocol.record's own loop (the kernel turned off), or its error."""
    saved, record.RECORDS_KERNEL = record.RECORDS_KERNEL, None
    try:
        return decode_records(data, verify_crc, extra)
    except CorruptRecordError as exc:
        return f"error: {exc}"
    finally:
        record.RECORDS_KERNEL = saved


def rec(i: int, body: bytes, topic: bytes, props: bytes, *, sys_flag: int = 0,
        host: str = "10.0.0.7:40000", store_host: str = "10.0.0.1:10911") -> bytes:
    return encode_record(
        topic=topic, queue_id=i % 7, flag=i * 3 - 5, body=body, properties=props,
        sys_flag=sys_flag, born_timestamp=1_700_000_000_123 + i, born_host=pack_host(host),
        store_timestamp=-1 if i == 3 else 1_700_000_000_999 + i,
        store_host=pack_host(store_host), reconsume_times=i % 3,
        prepared_transaction_offset=-i, queue_offset=2**40 + i, physical_offset=2**62 + i)


RECORD = st.builds(
    rec, st.integers(0, 50), st.binary(max_size=200),
    st.sampled_from([b"T", b"TopicTest", "Тема".encode(), b""]),
    st.one_of(st.binary(max_size=40),
              st.dictionaries(st.text(min_size=1, max_size=5).filter(
                  lambda k: "\x01" not in k and "\x02" not in k), st.text(max_size=8),
                  max_size=3).map(lambda d: properties_to_string(d).encode())),
    sys_flag=st.sampled_from([0, 1, 4, 8]),
    host=st.sampled_from(["10.0.0.7:40000", "192.168.1.1:1"]),
    store_host=st.sampled_from(["10.0.0.1:10911", "10.0.0.2:10911"]))


def made_by_init(*args: Any) -> MessageExt:
    """MessageExt through its __init__: what a compiled kernel makes of a
    ``make`` that is not a class of MESSAGE_SLOTS."""
    return MessageExt(*args)


def check(kernel: Any, data: bytes, verify_crc: bool,
          extra: dict[str, str] | None = None) -> None:
    got = kernel(data, verify_crc, crc32, MessageExt, unpack_host, extra)
    want = by_loop(data, verify_crc, extra)
    if got is None:
        return  # left to the loop, whatever it makes of it
    assert not isinstance(want, str), want  # decoded only what the loop decodes
    assert [slots(m) for m in got] == [slots(m) for m in want]
    assert all(m._properties_extra is extra for m in got)  # the one mapping, not copies
    # the same messages made through __init__ (compiled: slot by slot for MessageExt)
    by_init = kernel(data, verify_crc, crc32, made_by_init, unpack_host, extra)
    assert by_init is not None and [slots(m) for m in by_init] == [slots(m) for m in got]


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=300, deadline=None)
@given(records=st.lists(RECORD, max_size=6), verify_crc=st.booleans(), extra=EXTRA)
def test_whole_bodies_decode_as_the_loop_decodes_them(kernel: Any, records: list[bytes],
                                                      verify_crc: bool,
                                                      extra: dict[str, str] | None) -> None:
    data = b"".join(records)
    check(kernel, data, verify_crc, extra)
    if not isinstance(by_loop(data, verify_crc), str):  # what the loop decodes, it decodes
        assert kernel(data, verify_crc, crc32, MessageExt, unpack_host) is not None


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=400, deadline=None)
@given(records=st.lists(RECORD, min_size=1, max_size=4), at=st.integers(0, 2000),
       value=st.integers(0, 255), cut=st.integers(0, 300), garbage=st.binary(max_size=20),
       verify_crc=st.booleans())
def test_damaged_bodies_are_left_to_the_loop_or_decoded_alike(
        kernel: Any, records: list[bytes], at: int, value: int, cut: int, garbage: bytes,
        verify_crc: bool) -> None:
    data = bytearray(b"".join(records))
    data[at % len(data)] = value
    damaged = bytes(data[: len(data) - cut] if cut < len(data) else data) + garbage
    check(kernel, damaged, verify_crc)


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), verify_crc=st.booleans())
def test_garbage(kernel: Any, data: bytes, verify_crc: bool) -> None:
    check(kernel, data, verify_crc)


@pytest.mark.parametrize("kernel", KERNELS)
def test_what_it_leaves_to_the_loop(kernel: Any) -> None:
    good = rec(1, b"body", b"T", b"k\x01v\x02")

    def decoded(data: bytes, verify_crc: bool = True) -> bool:
        return kernel(data, verify_crc, crc32, MessageExt, unpack_host) is not None

    assert decoded(good + good) and decoded(b"")
    bad_crc = bytearray(good)
    bad_crc[88] ^= 1  # the body's first byte
    assert not decoded(bytes(bad_crc)) and decoded(bytes(bad_crc), verify_crc=False)
    assert not decoded(rec(1, b"body", b"T", b"k\x01\xff\x02"))  # properties not UTF-8
    assert not decoded(rec(1, b"body", b"\xff", b""))  # a topic name not UTF-8
    assert not decoded(good[:-1]) and not decoded(good + b"\x00")  # cut, or a trailing byte
    props_at = len(good) - len(b"k\x01v\x02")
    for length in (3, 5, 0x8004):  # a properties length that does not add up
        wrong = bytearray(good)
        wrong[props_at - 2:props_at] = length.to_bytes(2, "big")
        assert not decoded(bytes(wrong))
        with pytest.raises(CorruptRecordError, match="do not add up"):
            decode_records(bytes(wrong))
    with pytest.raises(CorruptRecordError):  # and the loop says what is wrong
        decode_records(good[:-1])
    with pytest.raises(CorruptRecordError, match="body CRC mismatch"):
        decode_records(bytes(bad_crc), verify_crc=True)


def test_decode_records_takes_the_kernel_for_bytes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[type] = []

    def spy(data: bytes, *args: Any) -> list[MessageExt] | None:
        calls.append(type(data))
        return plain.decode_records(data, *args)

    monkeypatch.setattr(record, "RECORDS_KERNEL", spy)
    good = rec(2, b"x" * 10, b"T", b"")
    assert [m.body for m in decode_records(good)] == [b"x" * 10]
    assert [m.body for m in decode_records(memoryview(good))] == [b"x" * 10]
    assert [m.body for m in decode_records(bytearray(good))] == [b"x" * 10]
    assert calls == [bytes]


SLOT_FINDERS: list[Any] = [pytest.param(plain.slot_descriptors, id="plain-python")]
if COMPILED_SLOTS is not None:
    SLOT_FINDERS.append(pytest.param(COMPILED_SLOTS, id="compiled"))


def test_the_kernel_knows_every_slot_of_a_message() -> None:
    """A slot added to MessageExt must be added to MESSAGE_SLOTS (and filled by
    the compiled loop); until then messages are made through __init__."""
    assert plain.MESSAGE_SLOTS == MessageExt.__slots__
    if COMPILED is not None:
        assert COMPILED_SLOTS is not None and COMPILED_SLOTS(MessageExt) is not None


@pytest.mark.parametrize("find", SLOT_FINDERS)
def test_messages_are_made_slot_by_slot_only_for_a_class_of_exactly_those_slots(
        find: Any) -> None:
    descrs = find(MessageExt)
    assert descrs == tuple(MessageExt.__dict__[name] for name in MessageExt.__slots__)

    class Sub(MessageExt):
        __slots__ = ()

    class Reordered:
        __slots__ = tuple(reversed(plain.MESSAGE_SLOTS))

    class Shadowed:  # the same slots, one of them covered by a property
        __slots__ = plain.MESSAGE_SLOTS

    Shadowed.topic = property(lambda self: "t")  # type: ignore[assignment]

    for other in (Sub, Reordered, Shadowed, made_by_init, None, 1):
        assert find(other) is None, other


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_subclass_is_made_through_its_init(kernel: Any) -> None:
    class Sub(MessageExt):
        __slots__ = ("seen",)

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.seen = True

    data = rec(1, b"body", b"T", b"k\x01v\x02") + rec(2, b"more", b"T", b"")
    got = kernel(data, False, crc32, Sub, unpack_host, {"MIN_OFFSET": "1"})
    assert [type(m) for m in got] == [Sub, Sub] and all(m.seen for m in got)
    assert [slots(m) for m in got] == [slots(m) for m in by_loop(data, False,
                                                                 {"MIN_OFFSET": "1"})]
