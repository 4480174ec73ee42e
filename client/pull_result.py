"""PullStatus and PullResult (RocketMQ's names), and the response-code mapping."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from protocol.codes import ResponseCode
from protocol.message import MessageExt


class PullStatus(Enum):
    """FOUND: messages returned (possibly none left after tag re-filtering);
    NO_NEW_MSG: nothing at this offset yet; NO_MATCHED_MSG: messages were
    scanned but none matched the tags, continue from ``next_begin_offset``;
    OFFSET_ILLEGAL: the offset is outside the queue, restart from
    ``next_begin_offset``."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


# protocol/README.md: pull response code -> client status.
PULL_STATUS_BY_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    """The outcome of one pull. ``next_begin_offset`` is where to pull next."""

    pull_status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    msg_found_list: list[MessageExt] = field(default_factory=list)


@dataclass(slots=True)
class RawPullResult:
    """A pull with its records undecoded: ``body`` is the concatenated
    commit-log records (``protocol.record``), empty unless FOUND. The broker
    filtered by tag hash only; readers re-check the tag strings."""

    pull_status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes
    addr: str = ""
