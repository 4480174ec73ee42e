"""BATCH_ACK_MESSAGE bodies (protocol/batch_ack.py) and record_position, the
head-only read POP builds in-flight records with."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.batch_ack import (
    MAX_BATCH_ACK,
    BatchAckError,
    decode_handles,
    decode_results,
    encode_handles,
    encode_results,
)
from protocol.errors import CorruptRecordError
from protocol.record import decode_record, encode_record, pack_host, record_position

handle = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)),
                 min_size=1, max_size=100)


@given(st.lists(handle, min_size=1, max_size=50))
def test_handles_round_trip(handles: list[str]) -> None:
    assert decode_handles(encode_handles(handles)) == handles


@given(st.lists(st.one_of(st.none(), st.text(max_size=50)), min_size=1, max_size=50))
def test_results_round_trip_and_an_empty_remark_is_still_a_refusal(
        remarks: list[str | None]) -> None:
    got = decode_results(encode_results(remarks), len(remarks))
    assert [r is None for r in got] == [r is None for r in remarks]


@pytest.mark.parametrize("handles", [[], ["a\nb"], [""], ["x" * 513], ["h"] * (MAX_BATCH_ACK + 1)])
def test_encode_refuses_what_the_broker_would(handles: list[str]) -> None:
    with pytest.raises(BatchAckError):
        encode_handles(handles)


@pytest.mark.parametrize("body", [None, b"", b"\xff", b"a\n", b"\na", b"y" * 513,
                                  b"h\n" * MAX_BATCH_ACK + b"h", b"z" * (1 << 20)])
def test_decode_refuses_hostile_bodies(body: bytes | None) -> None:
    with pytest.raises(BatchAckError):
        decode_handles(body)


def test_results_must_match_the_handles() -> None:
    with pytest.raises(BatchAckError, match="2 results for 3"):
        decode_results(b"\nno", 3)


def test_record_position_reads_what_decode_record_does() -> None:
    data = encode_record(
        topic=b"T", queue_id=1, flag=0, body=b"body", properties=b"", sys_flag=0,
        born_timestamp=1, born_host=pack_host("10.0.0.1:1"), store_timestamp=2,
        store_host=pack_host("10.0.0.2:2"), reconsume_times=7, prepared_transaction_offset=0,
        queue_offset=123_456_789_012, physical_offset=987_654_321)
    msg = decode_record(data)
    assert record_position(b"pad" + data, 3) == (msg.queue_offset, msg.commit_log_offset,
                                                 msg.reconsume_times)
    assert record_position(data) == (123_456_789_012, 987_654_321, 7)
    with pytest.raises(CorruptRecordError, match="magic"):
        record_position(b"\x00" * 8 + data[8:])
    with pytest.raises(CorruptRecordError, match="head"):
        record_position(data[:80])
