"""SendStatus and SendResult: what a successful send returns (RocketMQ's names)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from protocol.codes import ResponseCode
from protocol.message import MessageConst, MessageQueue
from protocol.trace_data import DEFAULT_REGION


class SendStatus(Enum):
    """How the broker stored the message. Only SEND_OK means fully as configured;
    the others mean the message is in the master's commit log but the flush or
    replication did not finish in time (it may still be lost on a crash)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


# Response codes of a send that stored the message, and their status.
SEND_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of a send.

    ``msg_id`` is the client's unique id (the ``UNIQ_KEY`` property, as
    RocketMQ's ``SendResult.msgId``); ``offset_msg_id`` is the broker's
    offset message id (store host + commit-log offset). For a batch both are
    comma-joined, one per message, and ``queue_offset`` is the first message's.
    ``region_id`` and ``trace_on`` are what the broker answered (its regionId
    and traceOn): a trace hook records nothing of a send with ``trace_on`` False.
    """

    send_status: SendStatus
    msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    offset_msg_id: str | None = None
    transaction_id: str | None = None
    region_id: str = DEFAULT_REGION
    trace_on: bool = True
    recall_handle: str | None = None  # a timer message's: Producer.recall_message takes it


def region_and_trace_switch(ext_fields: Mapping[str, Any]) -> tuple[str, bool]:
    """A send response's ``MSG_REGION`` and ``TRACE_ON`` (RocketMQ's
    processSendResponse: no region is DefaultRegion; only "false" turns trace off)."""
    region = ext_fields.get(MessageConst.PROPERTY_MSG_REGION)
    trace_on = ext_fields.get(MessageConst.PROPERTY_TRACE_SWITCH)
    return (region if isinstance(region, str) and region else DEFAULT_REGION,
            not (isinstance(trace_on, str) and trace_on == "false"))
