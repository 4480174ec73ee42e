"""gRPC RecallMessage: a thin adapter over the timer service's recall (broker/timer/service.py)."""

from __future__ import annotations

from collections.abc import Callable

from broker.grpc.convert import status
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from broker.timer.service import RecallOutcome, RecallStatus
from protocol.recall_handle import parse_handle

# (topic, handle) -> outcome
Recall = Callable[[str, str], RecallOutcome]

RECALL_CODES: dict[RecallStatus, int] = {
    RecallStatus.OK: pb.OK,
    RecallStatus.NOT_FOUND: pb.MESSAGE_NOT_FOUND,
    RecallStatus.ILLEGAL: pb.BAD_REQUEST,
    RecallStatus.BUSY: pb.TOO_MANY_REQUESTS,
    RecallStatus.OFF: pb.UNSUPPORTED,
}


def recall_answer(recall: Recall, request: spb.RecallMessageRequest) -> spb.RecallMessageResponse:
    topic = request.topic.name
    if not topic:
        return spb.RecallMessageResponse(status=status(pb.ILLEGAL_TOPIC, "the request names no "
                                                       "topic"))
    out = recall(topic, request.recall_handle)
    if out.status != RecallStatus.OK:
        return spb.RecallMessageResponse(status=status(RECALL_CODES[out.status], out.remark))
    return spb.RecallMessageResponse(status=status(pb.OK),
                                     message_id=parse_handle(request.recall_handle).message_id)


__all__ = ["RECALL_CODES", "Recall", "recall_answer"]
