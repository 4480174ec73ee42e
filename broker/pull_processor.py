"""PullMessageProcessor: PULL_MESSAGE on the remoting wire, a thin adapter
over ``PullService`` (broker/service/pull.py, where the pull's rules live:
checks, tag and SQL92 filters, slave reads, the suggested broker, long
polling).

It decodes the request header into a ``PullRequest`` (the sysFlag bits below),
calls the service and encodes its ``PullOutcome``: the status by one table
(``STATUS_TO_CODE``), a read's offsets and suggested broker in the response
header, its records as the body (the store's bytes, concatenated as they are
on disk; one piece goes as it is). A pull the service holds (long polling) is
answered later through a ``RemotingPullWaiter``: the connection and command
stay here, the service holds only the request and the waiter.
"""

from __future__ import annotations

from broker.service.pull import (
    READS,
    PullOutcome,
    PullRequest,
    PullService,
    PullStatus,
)
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from protocol.trio.connection import RemotingConnection

# sysFlag bits of a pull request, as RocketMQ's PullSysFlag. Without
# FLAG_SUBSCRIPTION the request's subscription is not used: the broker takes the
# one the group's consumers registered with their heart-beats (a Java push
# consumer sends none by default). Class filters and lite pulls change nothing
# here; unknown bits are ignored.
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8
FLAG_LITE_PULL = 0x10

# the remoting wire's code of each outcome (official clients depend on them)
STATUS_TO_CODE: dict[PullStatus, int] = {
    PullStatus.FOUND: ResponseCode.SUCCESS,
    PullStatus.NO_NEW_MSG: ResponseCode.PULL_NOT_FOUND,
    PullStatus.NO_MATCHED_MSG: ResponseCode.PULL_RETRY_IMMEDIATELY,
    PullStatus.RETRY_IMMEDIATELY: ResponseCode.PULL_RETRY_IMMEDIATELY,
    PullStatus.OFFSET_MOVED: ResponseCode.PULL_OFFSET_MOVED,
    PullStatus.NO_PERMISSION: ResponseCode.NO_PERMISSION,
    PullStatus.GROUP_NOT_EXIST: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    PullStatus.TOPIC_NOT_EXIST: ResponseCode.TOPIC_NOT_EXIST,
    PullStatus.ILLEGAL_REQUEST: ResponseCode.SYSTEM_ERROR,
    PullStatus.SUBSCRIPTION_NOT_EXIST: ResponseCode.SUBSCRIPTION_NOT_EXIST,
    PullStatus.SUBSCRIPTION_NOT_LATEST: ResponseCode.SUBSCRIPTION_NOT_LATEST,
    PullStatus.SUBSCRIPTION_PARSE_FAILED: ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    PullStatus.FILTER_DATA_NOT_EXIST: ResponseCode.FILTER_DATA_NOT_EXIST,
    PullStatus.FILTER_UNSUPPORTED: ResponseCode.SYSTEM_ERROR,
}


def decode_request(fields: dict[str, object]) -> PullRequest:
    """A PULL_MESSAGE header as the service's request (raises on a bad header)."""
    h = PullMessageRequestHeader.from_fields(fields)
    flag = h.sys_flag
    return PullRequest(
        h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums,
        h.commit_offset if flag & FLAG_COMMIT_OFFSET else None,
        h.suspend_timeout_millis if flag & FLAG_SUSPEND else 0,
        h.subscription if flag & FLAG_SUBSCRIPTION else None,
        h.expression_type, h.sub_version,
    )


def encode_outcome(cmd: RemotingCommand, outcome: PullOutcome) -> RemotingCommand:
    """The response to ``cmd`` that says ``outcome``."""
    status = outcome.status
    code = STATUS_TO_CODE[status]
    if status not in READS:
        return cmd.response(code, outcome.remark)
    header = PullMessageResponseHeader(
        suggest_which_broker_id=outcome.suggest_which_broker_id,
        next_begin_offset=outcome.next_begin_offset,
        min_offset=outcome.min_offset,
        max_offset=outcome.max_offset,
    )
    # one piece that is a read's bytes (a run of records, all good) goes as it is
    body = b"".join(outcome.pieces) if status is PullStatus.FOUND else None
    return cmd.response(code, outcome.remark, ext_fields=header.to_fields(), body=body)


class RemotingPullWaiter:
    """A held PULL_MESSAGE: its answer goes to the connection it came on."""

    __slots__ = ("conn", "cmd")

    def __init__(self, conn: RemotingConnection, cmd: RemotingCommand) -> None:
        self.conn = conn
        self.cmd = cmd

    @property
    def owner(self) -> RemotingConnection:
        return self.conn

    @property
    def closed(self) -> bool:
        return self.conn.closed

    def answer(self, outcome: PullOutcome) -> None:
        self.conn.send_response(encode_outcome(self.cmd, outcome))

    def fail(self, remark: str) -> None:
        self.conn.send_response(self.cmd.response(ResponseCode.SYSTEM_ERROR, remark))


class PullMessageProcessor:
    def __init__(self, service: PullService) -> None:
        self.service = service

    def pull_message(self, conn: RemotingConnection, cmd: RemotingCommand
                     ) -> RemotingCommand | None:
        """The response, or None while the pull is held (long polling; a
        pull without a suspend time is never held: it needs no waiter)."""
        req = decode_request(cmd.ext_fields)
        waiter = RemotingPullWaiter(conn, cmd) if req.suspend_timeout_ms > 0 else None
        outcome = self.service.pull(req, waiter)
        return None if outcome is None else encode_outcome(cmd, outcome)
