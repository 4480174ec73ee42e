"""The remoting adapter of PullService: header -> PullRequest, PullOutcome ->
response (the codes and header fields official clients depend on), and the
waiter a held pull answers through. No store, no sockets."""

from __future__ import annotations

import pytest

from broker.pull_processor import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    STATUS_TO_CODE,
    RemotingPullWaiter,
    decode_request,
    encode_outcome,
)
from broker.service.pull import GET_STATUS_TO_PULL, READS, PullOutcome, PullRequest, PullStatus
from broker.store import GetMessageStatus
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from tests.broker.fakes import FakeConn


def header(sys_flag: int) -> PullMessageRequestHeader:
    return PullMessageRequestHeader(
        consumer_group="g", topic="T", queue_id=1, queue_offset=7, max_msg_nums=32,
        sys_flag=sys_flag, commit_offset=5, suspend_timeout_millis=15_000,
        subscription="TagA", sub_version=3, expression_type="TAG")


def test_every_status_and_store_status_has_a_row() -> None:
    assert set(STATUS_TO_CODE) == set(PullStatus)
    assert set(GET_STATUS_TO_PULL) == set(GetMessageStatus)


@pytest.mark.parametrize(("got", "code"), [
    (GetMessageStatus.FOUND, ResponseCode.SUCCESS),
    (GetMessageStatus.NO_MATCHED_MESSAGE, ResponseCode.PULL_RETRY_IMMEDIATELY),
    (GetMessageStatus.MESSAGE_WAS_REMOVING, ResponseCode.PULL_RETRY_IMMEDIATELY),
    (GetMessageStatus.NO_MESSAGE_IN_QUEUE, ResponseCode.PULL_NOT_FOUND),
    (GetMessageStatus.OFFSET_OVERFLOW_ONE, ResponseCode.PULL_NOT_FOUND),
    (GetMessageStatus.OFFSET_FOUND_NULL, ResponseCode.PULL_NOT_FOUND),
    (GetMessageStatus.OFFSET_TOO_SMALL, ResponseCode.PULL_OFFSET_MOVED),
    (GetMessageStatus.OFFSET_OVERFLOW_BADLY, ResponseCode.PULL_OFFSET_MOVED),
    (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, ResponseCode.PULL_OFFSET_MOVED),
])
def test_store_statuses_keep_their_wire_codes(got: GetMessageStatus, code: int) -> None:
    assert STATUS_TO_CODE[GET_STATUS_TO_PULL[got]] == code


def test_flags_decide_what_the_request_carries() -> None:
    bare = decode_request(header(0).to_fields())
    assert bare == PullRequest("g", "T", 1, 7, 32, None, 0, None, "TAG", 3)
    full = decode_request(header(FLAG_COMMIT_OFFSET | FLAG_SUSPEND | FLAG_SUBSCRIPTION).to_fields())
    assert (full.commit_offset, full.suspend_timeout_ms, full.expression) == (5, 15_000, "TagA")


def test_a_read_carries_its_header_and_one_piece_goes_as_it_is() -> None:
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, header(0).to_fields())
    piece = b"records"
    r = encode_outcome(cmd, PullOutcome(PullStatus.FOUND, None, 9, 1, 12, 1, [piece], 2))
    assert (r.code, r.remark, r.opaque) == (ResponseCode.SUCCESS, None, cmd.opaque)
    assert r.body is piece
    assert PullMessageResponseHeader.from_fields(r.ext_fields) == PullMessageResponseHeader(
        1, 9, 1, 12)
    moved = encode_outcome(cmd, PullOutcome(PullStatus.OFFSET_MOVED, "OFFSET_TOO_SMALL", 3, 3, 9))
    assert (moved.code, moved.remark, moved.body) == (
        ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", None)
    assert PullMessageResponseHeader.from_fields(moved.ext_fields).next_begin_offset == 3


@pytest.mark.parametrize("status", sorted(set(PullStatus) - READS, key=lambda s: s.value))
def test_a_refusal_has_its_code_and_remark_and_no_header(status: PullStatus) -> None:
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, header(0).to_fields())
    r = encode_outcome(cmd, PullOutcome(status, "why"))
    assert (r.code, r.remark, r.body) == (STATUS_TO_CODE[status], "why", None)
    assert "nextBeginOffset" not in r.ext_fields


def test_the_waiter_answers_on_its_connection() -> None:
    conn = FakeConn()
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, header(FLAG_SUSPEND).to_fields())
    waiter = RemotingPullWaiter(conn, cmd)  # type: ignore[arg-type]
    assert waiter.owner is conn and not waiter.closed
    waiter.answer(PullOutcome(PullStatus.NO_NEW_MSG, "OFFSET_OVERFLOW_ONE", 7, 0, 7))
    waiter.fail("the held pull failed on the broker")
    assert [(r.code, r.opaque) for r in conn.sent] == [
        (ResponseCode.PULL_NOT_FOUND, cmd.opaque), (ResponseCode.SYSTEM_ERROR, cmd.opaque)]
    conn.closed = True
    assert waiter.closed
