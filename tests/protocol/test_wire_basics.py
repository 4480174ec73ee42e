"""Frames, commands and records: byte-by-byte feeding, round trips, fuzzing."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.command import RemotingCommand
from protocol.errors import (
    CorruptRecordError,
    FrameTooLargeError,
    ProtocolError,
    RemoteProtocolError,
)
from protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame
from protocol.hashing import java_string_hash
from protocol.message import (
    MessageExt,
    find_property,
    properties_to_string,
    string_to_properties,
)
from protocol.record import (
    RecordStatus,
    check_record,
    check_run,
    decode_msg_id,
    decode_record,
    decode_records,
    encode_blank,
    encode_msg_id,
    encode_record,
    pack_host,
)


def record(i: int, body: bytes = b"body", props: dict[str, str] | None = None, topic: str = "Tôpic") -> bytes:
    return encode_record(
        topic=topic.encode(), queue_id=i % 4, flag=7, body=body,
        properties=properties_to_string(props or {"TAGS": "TagA", "KEYS": "k1 k2"}).encode(),
        sys_flag=0, born_timestamp=1000 + i, born_host=pack_host("10.0.0.1:5555"),
        store_timestamp=2000 + i, store_host=pack_host("127.0.0.1:10911"), reconsume_times=1,
        prepared_transaction_offset=0, queue_offset=i, physical_offset=i * 1000,
    )


def test_frames_fed_one_byte_at_a_time() -> None:
    payloads = [b"", b"a", b"hello" * 100, bytes(range(256))]
    stream = b"".join(encode_frame(p) for p in payloads)
    dec = FrameDecoder()
    out: list[bytes] = []
    for i in range(len(stream)):
        out.extend(dec.feed(stream[i : i + 1]))
    assert out == payloads and dec.buffered == 0


@given(st.lists(st.binary(max_size=300), max_size=10), st.lists(st.integers(1, 50), max_size=30))
def test_frames_any_split(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    dec = FrameDecoder()
    out: list[bytes] = []
    pos = 0
    for c in cuts:
        out.extend(dec.feed(stream[pos : pos + c]))
        pos += c
    out.extend(dec.feed(stream[pos:]))
    assert out == payloads and dec.buffered == 0


class ReferenceDecoder:
    """The plainest frame decoder: a growing buffer, frames cut off its front."""

    def __init__(self, max_frame_size: int) -> None:
        self.buf = b""
        self.max = max_frame_size

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            n = int.from_bytes(self.buf[:4], "big")
            if n > self.max:
                raise FrameTooLargeError("too large")
            if len(self.buf) < 4 + n:
                break
            out.append(self.buf[4:4 + n])
            self.buf = self.buf[4 + n:]
        return out


_PAYLOAD_SIZES = st.sampled_from([0, 1, 3, 4, 5, 100, 65_535, 65_536, 70_000, 140_000])


@settings(max_examples=150, deadline=None)
@given(st.lists(_PAYLOAD_SIZES, max_size=6),
       st.lists(st.sampled_from([1, 2, 3, 4, 5, 1000, 65_536, 65_540, 131_072, 200_000]),
                max_size=12),
       st.sampled_from(["bytes", "bytearray", "memoryview"]))
def test_frames_any_split_of_big_frames_equal_the_reference(
        sizes: list[int], cuts: list[int], kind: str) -> None:
    pattern = bytes(range(1, 252)) * 600  # no zero byte: a zeroed buffer shows
    payloads = [pattern[i:i + n] for i, n in enumerate(sizes)]
    stream = b"".join(encode_frame(p) for p in payloads)
    dec, ref = FrameDecoder(), ReferenceDecoder(DEFAULT_MAX_FRAME_SIZE)
    out: list[bytes] = []
    pos = 0
    for c in [*cuts, len(stream)]:
        chunk = stream[pos:pos + c]
        pos += len(chunk)
        fed: bytes | bytearray | memoryview = chunk
        if kind != "bytes":
            fed = bytearray(chunk) if kind == "bytearray" else memoryview(bytearray(chunk))
        got = dec.feed(fed)
        if not isinstance(fed, bytes):  # the caller reuses its buffer: what is held is a copy
            fed[:] = bytes(len(chunk))
        assert got == ref.feed(chunk)
        assert all(type(f) is bytes for f in got)
        assert dec.buffered == len(ref.buf)
        out.extend(got)
    assert out == payloads and dec.buffered == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=6), st.integers(0, 40),
       st.lists(st.integers(1, 30), max_size=10))
def test_oversize_frame_raises_where_the_reference_does(
        sizes: list[int], big: int, cuts: list[int]) -> None:
    stream = b"".join(encode_frame(bytes(n)) for n in sizes)
    stream += (33 + big).to_bytes(4, "big") + bytes(10)
    dec, ref = FrameDecoder(max_frame_size=32), ReferenceDecoder(32)
    pos = 0
    for c in [*cuts, len(stream)]:
        chunk = stream[pos:pos + c]
        pos += len(chunk)
        try:
            want = ref.feed(chunk)
        except FrameTooLargeError:
            with pytest.raises(FrameTooLargeError):
                dec.feed(chunk)
            with pytest.raises(FrameTooLargeError):  # and stays unusable
                dec.feed(b"")
            return
        assert dec.feed(chunk) == want
    raise AssertionError("the oversize header was never reached")


def test_oversize_frame() -> None:
    dec = FrameDecoder(max_frame_size=10)
    assert dec.feed(encode_frame(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(FrameTooLargeError):
        dec.feed((11).to_bytes(4, "big"))
    with pytest.raises(ProtocolError):
        encode_frame(b"x" * 11, max_frame_size=10)


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_only_raises_protocol_errors(data: bytes) -> None:
    dec = FrameDecoder(max_frame_size=64)
    try:
        for payload in dec.feed(data):
            RemotingCommand.decode(payload)
    except ProtocolError:
        pass


@given(
    st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1), st.integers(0, 3),
    st.none() | st.text(max_size=20),
    st.dictionaries(st.text(max_size=8), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8) | st.booleans(), max_size=5),
    st.none() | st.binary(max_size=64),
)
def test_command_round_trip(code: int, opaque: int, flag: int, remark: str | None,
                            ext: dict[str, object], body: bytes | None) -> None:
    cmd = RemotingCommand(code, opaque, flag, remark, ext, body)
    assert RemotingCommand.decode(cmd.encode()) == cmd


def test_command_rejects_wrong_shapes() -> None:
    import msgpack
    for obj in ([1, 2], {"a": 1}, [1, 2, 3, 4, "notamap", None, 1], ["x", 1, 0, None, {}, None, 1],
                [1, 1, 0, None, {}, "text-body", 1]):
        with pytest.raises(RemoteProtocolError):
            RemotingCommand.decode(msgpack.packb(obj))


def test_record_round_trip_and_msg_id() -> None:
    data = record(5, body=b"\x00\xffpayload", props={"TAGS": "TagA", "KEYS": "a b", "ü": "€"})
    m = decode_record(data, 0, verify_crc=True)
    assert (m.topic, m.body, m.queue_id, m.flag, m.queue_offset, m.commit_log_offset) == (
        "Tôpic", b"\x00\xffpayload", 1, 7, 5, 5000)
    assert m.properties == {"TAGS": "TagA", "KEYS": "a b", "ü": "€"}
    assert (m.born_host, m.store_host, m.reconsume_times) == ("10.0.0.1:5555", "127.0.0.1:10911", 1)
    assert m.store_size == len(data) and m.tags == "TagA"
    assert decode_msg_id(m.msg_id) == ("127.0.0.1:10911", 5000)
    assert m.msg_id == encode_msg_id(pack_host("127.0.0.1:10911"), 5000)
    assert len(m.msg_id) == 32


def test_record_concatenation_and_checks() -> None:
    recs = [record(i, body=bytes([i]) * i) for i in range(1, 20)]
    buf = b"".join(recs)
    assert [m.queue_offset for m in decode_records(buf)] == list(range(1, 20))
    assert check_record(buf, 0, len(buf)).status is RecordStatus.MESSAGE
    assert check_record(bytes(64), 0, 64).status is RecordStatus.END
    blank = encode_blank(100)
    assert check_record(blank, 0, 100).status is RecordStatus.BLANK
    bad_crc = bytearray(recs[4])
    bad_crc[90] ^= 0xFF  # inside the body
    assert check_record(bytes(bad_crc), 0, len(bad_crc)).status is RecordStatus.CORRUPT
    bad_magic = b"\x00\x00\x00\x30" + b"\x12\x34\x56\x78" + bytes(40)
    assert check_record(bad_magic, 0, len(bad_magic)).status is RecordStatus.CORRUPT
    torn = recs[3][:-5]
    assert check_record(torn, 0, len(torn)).status is RecordStatus.CORRUPT
    with pytest.raises(CorruptRecordError):
        decode_record(torn)


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_record_decoders_fuzz(data: bytes) -> None:
    try:
        decode_records(data, verify_crc=True)
    except CorruptRecordError:
        pass
    assert check_record(data, 0, len(data)).status in RecordStatus


def test_decoded_properties_are_split_on_first_read() -> None:
    data = record(3, props={"TAGS": "T", "KEYS": "k", "ü": "€"})
    m = decode_record(data)
    assert m._properties is None  # not split yet
    shared = {"MIN_OFFSET": "0", "MAX_OFFSET": "9"}
    m.put_properties(shared)
    m.put_properties({"MAX_OFFSET": "10", "X": "1"})  # later wins, the shared map unchanged
    assert m.properties == {"TAGS": "T", "KEYS": "k", "ü": "€", "MIN_OFFSET": "0",
                            "MAX_OFFSET": "10", "X": "1"}
    assert shared == {"MIN_OFFSET": "0", "MAX_OFFSET": "9"}
    m.properties["Y"] = "2"  # the dict is the message's own from now on
    m.put_properties({"Z": "3"})
    assert m.get_property("Y") == "2" and m.get_property("Z") == "3" and m.tags == "T"
    assert m._msg_id is None and m.msg_id == encode_msg_id(pack_host("127.0.0.1:10911"), 3000)
    m.msg_id = "set by hand"
    assert m.msg_id == "set by hand"
    m.properties = {"only": "this"}
    assert m.properties == {"only": "this"} and m.tags is None
    # bad UTF-8 in the properties is still refused when the record is decoded
    bad = data.replace("€".encode(), b"\xff\xfe\xfd")
    with pytest.raises(CorruptRecordError):
        decode_record(bad)


def test_properties_given_to_every_message_of_a_body() -> None:
    """decode_records' ``extra``: each message of the body gets the one mapping,
    as put_properties would give it, merged when its properties are first read."""
    shared = {"MIN_OFFSET": "0", "MAX_OFFSET": "9"}
    a, b = decode_records(record(1, props={"TAGS": "T", "MAX_OFFSET": "own"}) + record(2),
                          extra=shared)
    assert a._properties_extra is shared and b._properties_extra is shared  # not copied
    assert a.properties == {"TAGS": "T", "MIN_OFFSET": "0", "MAX_OFFSET": "9"}
    a.properties["X"] = "1"  # a's own dict now: b and the mapping unchanged
    assert b.get_property("MAX_OFFSET") == "9" and "X" not in b.properties
    assert shared == {"MIN_OFFSET": "0", "MAX_OFFSET": "9"}
    assert decode_records(record(1), extra=shared) != decode_records(record(1))
    # MessageExt's own argument: merged into properties given as a dict, not into the caller's
    props = {"TAGS": "T"}
    m = MessageExt("t", b"", props, properties_extra=shared)
    assert m.properties == {"TAGS": "T", "MIN_OFFSET": "0", "MAX_OFFSET": "9"}
    assert props == {"TAGS": "T"} and m._properties_extra is None
    n = MessageExt("t", b"", None, properties_text="K\x01v", properties_extra=shared)
    assert n.properties == {"K": "v", "MIN_OFFSET": "0", "MAX_OFFSET": "9"}


def test_message_ext_compares_copies_and_pickles_by_value() -> None:
    a, b = decode_records(record(1) + record(1))
    assert a == b and a is not b
    assert a == MessageExt(a.topic, a.body, {"TAGS": "TagA", "KEYS": "k1 k2"}, a.flag,
                           a.queue_id, a.queue_offset, a.commit_log_offset, a.sys_flag,
                           a.born_timestamp, a.born_host, a.store_timestamp, a.store_host,
                           a.reconsume_times, a.prepared_transaction_offset, a.body_crc,
                           a.store_size, a.msg_id)
    b.put_properties({"MIN_OFFSET": "0"})
    assert a != b
    assert pickle.loads(pickle.dumps(b)) == b and copy.copy(b) == b
    c = copy.deepcopy(a)
    c.properties["TAGS"] = "other"
    assert a.tags == "TagA" and c.tags == "other"
    assert "queue_offset=1" in repr(a) and "'TAGS': 'TagA'" in repr(a)
    with pytest.raises(TypeError):
        hash(a)


def test_properties_codec() -> None:
    props = {"TAGS": "A", "KEYS": "x y", "empty": ""}
    assert string_to_properties(properties_to_string(props)) == props
    assert properties_to_string({}) == "" and string_to_properties("") == {}


# texts a hostile producer may send: the names, look-alikes, separators anywhere
_PROPERTY_PIECES = st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "XKEYS", "KEY", "S", "a b",
                                    "", "\x01", "\x02", "ü"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PROPERTY_PIECES, max_size=12).map("".join),
       st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "KEY", "S"]))
def test_find_property_reads_what_the_dict_holds(text: str, name: str) -> None:
    assert find_property(text, name) == string_to_properties(text).get(name)


def test_find_property_cases() -> None:
    text = properties_to_string({"XKEYS": "no", "KEYS": "a b", "TAGS": ""})
    assert find_property(text, "KEYS") == "a b" and find_property(text, "TAGS") == ""
    assert find_property(text, "UNIQ_KEY") is None and find_property("", "KEYS") is None
    assert find_property("KEYS\x01first\x02KEYS\x01last", "KEYS") == "last"  # the last wins
    assert find_property("KEYS\x01a\x01b", "KEYS") == "a\x01b"  # split at the first \x01
    assert find_property("KEYS\x02KEYS", "KEYS") is None  # no value separator: no entry


def _java_hash_reference(s: str) -> int:
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_java_string_hash() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("TagA") == 2598919
    for s in ("TagA", "a-much-longer-tag-that-overflows-32-bits", "标签", "😀emoji"):
        assert java_string_hash(s) == _java_hash_reference(s)
    assert java_string_hash("a-much-longer-tag-that-overflows-32-bits") < 2**31


def test_check_run_keeps_the_records_whose_crc_holds() -> None:
    recs = [record(i, body=bytes([i]) * (10 + i)) for i in range(5)]
    bad_body = bytearray(recs[1])
    bad_body[-40] ^= 0xFF  # a byte of the body (before topic and properties) flipped
    bad_len = bytearray(recs[3])
    bad_len[84:88] = (10**6).to_bytes(4, "big")  # BODYLEN past the record
    parts = [recs[0], bytes(bad_body), recs[2], bytes(bad_len), recs[4]]
    run = [(1000 * i, len(p)) for i, p in enumerate(parts)]
    good, count, bad = check_run(b"".join(parts), run)
    assert [bytes(g) for g in good] == [recs[0], recs[2], recs[4]]
    assert count == 3 and bad == [1000, 3000]
    # a run that says more than the buffer holds, or a record shorter than a head
    good, count, bad = check_run(recs[0], [(0, len(recs[0])), (7, 50)])
    assert [bytes(g) for g in good] == [recs[0]] and count == 1 and bad == [7]
    assert check_run(b"x" * 20, [(5, 20)]) == ([], 0, [5])


def test_check_run_hands_back_good_records_in_one_piece() -> None:
    """Good records next to each other come back as one piece, and a run all
    good that fills its buffer as the buffer itself (no view, no copy)."""
    recs = [record(i, body=bytes([i]) * (10 + i)) for i in range(4)]
    buf = b"".join(recs)
    run = [(1000 * i, len(r)) for i, r in enumerate(recs)]
    good, count, bad = check_run(buf, run)
    assert good == [buf] and good[0] is buf and count == 4 and bad == []
    damaged = bytearray(recs[2])
    damaged[-40] ^= 0xFF
    good, count, bad = check_run(recs[0] + recs[1] + bytes(damaged) + recs[3], run)
    assert [bytes(g) for g in good] == [recs[0] + recs[1], recs[3]]
    assert count == 3 and bad == [2000]
    # bytes past the run's records: the records' piece is a view, not the buffer
    good, count, _ = check_run(buf + b"tail", run)
    assert [bytes(g) for g in good] == [buf] and good[0] is not buf and count == 4
