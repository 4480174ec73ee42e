"""Transactions over gRPC: EndTransaction and the check's
``RecoverOrphanedTransactionCommand``, mapped to and from TransactionService
(broker/service/transactions.py, the one the remoting END_TRANSACTION uses), with no I/O.

A transactional SendMessage (broker/grpc/convert.py) stores a half message of
the producer group named after its topic; its answer's ``transaction_id`` is
a token naming where the half message is: its commit-log offset and its
queue offset in the half queue, each 16 hex digits (``transaction_token``).
The broker keeps nothing per transaction for gRPC: an EndTransaction's token
says where to look, and TransactionService checks what it finds there as it
checks a remoting end's offsets (a half message, at that queue offset, of
the topic's producer group), and that it is the request's ``message_id``.

EndTransaction (``end_request``): ``resolution`` COMMIT or ROLLBACK (UNSPECIFIED:
the producer does not know yet; the broker asks later), ``source``
SERVER_CHECK marks an answer to a check. A request with no topic, no or a
malformed message id, or a token that does not parse is refused before the
store is read; an unknown transaction is INVALID_TRANSACTION_ID. Each
``EndStatus`` has its v2 code in ``END_CODES``.

A check (``recover_command``): the half message as its producer sent it (its
real topic, ``message_type`` TRANSACTION) and the token of the copy the check
pass read, in a Telemetry ``RecoverOrphanedTransactionCommand``; the producer
answers with EndTransaction, source SERVER_CHECK.
"""

from __future__ import annotations

import re

from broker.grpc.convert import Refusal, status, to_pb_message
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from broker.service.pop import PoppedMessage
from broker.service.transactions import (
    EndAction,
    EndStatus,
    EndTransaction,
    TransactionService,
)
from broker.transaction_service import CheckRequest

Code = pb.Code
TOKEN_RE = re.compile(r"[0-9A-F]{32}")
MAX_OFFSET = (1 << 63) - 1
MAX_MESSAGE_ID = 128

# each end status as a v2 code (this transport's one table)
END_CODES: dict[EndStatus, int] = {
    EndStatus.ENDED: Code.OK,
    EndStatus.ALREADY_ENDED: Code.OK,
    EndStatus.UNKNOWN_NOTED: Code.OK,
    EndStatus.SLAVE: Code.FORBIDDEN,
    EndStatus.ILLEGAL_ACTION: Code.BAD_REQUEST,
    EndStatus.NO_HALF_MESSAGE: Code.INVALID_TRANSACTION_ID,
    EndStatus.NO_PERMISSION: Code.FORBIDDEN,
    EndStatus.CONFLICT: Code.PRECONDITION_FAILED,
    EndStatus.NOT_PENDING: Code.INVALID_TRANSACTION_ID,
    EndStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    EndStatus.STORE_FAILED: Code.INTERNAL_SERVER_ERROR,
}

RESOLUTIONS: dict[int, EndAction] = {
    pb.TRANSACTION_RESOLUTION_UNSPECIFIED: EndAction.UNKNOWN,
    pb.COMMIT: EndAction.COMMIT,
    pb.ROLLBACK: EndAction.ROLLBACK,
}


def transaction_token(commit_log_offset: int, queue_offset: int) -> str:
    """The transaction id a gRPC producer is given for the half message at
    these offsets (commit log, half queue)."""
    if not (0 <= commit_log_offset <= MAX_OFFSET and 0 <= queue_offset <= MAX_OFFSET):
        raise ValueError(f"offsets out of range: {commit_log_offset}, {queue_offset}")
    return f"{commit_log_offset:016X}{queue_offset:016X}"


def parse_token(token: str) -> tuple[int, int] | None:
    """(commit-log offset, queue offset) of a token, or None when it is none of ours."""
    if len(token) != 32 or not TOKEN_RE.fullmatch(token):
        return None
    clo, qo = int(token[:16], 16), int(token[16:], 16)
    if clo > MAX_OFFSET or qo > MAX_OFFSET:
        return None
    return clo, qo


def end_request(request: spb.EndTransactionRequest, born_host: str) -> EndTransaction:
    """An EndTransaction as the service's end. Raises Refusal."""
    topic = request.topic.name
    if not topic:
        raise Refusal(Code.ILLEGAL_TOPIC, "the request names no topic")
    msg_id = request.message_id
    if not msg_id or len(msg_id) > MAX_MESSAGE_ID or not msg_id.isascii() \
            or not msg_id.isalnum():
        raise Refusal(Code.ILLEGAL_MESSAGE_ID, "the message id must be 1..128 letters or digits")
    where = parse_token(request.transaction_id)
    if where is None:
        raise Refusal(Code.INVALID_TRANSACTION_ID,
                      f"transaction id {request.transaction_id[:64]!r} is none this broker gave")
    clo, qo = where
    action: EndAction | int = RESOLUTIONS.get(request.resolution, int(request.resolution))
    return EndTransaction(
        producer_group=topic, queue_offset=qo, commit_log_offset=clo, action=action,
        born_host=born_host, from_check=request.source == pb.SOURCE_SERVER_CHECK,
        msg_id=msg_id, transaction_id=request.transaction_id, uniq_key=msg_id)


def end_transaction(service: TransactionService, request: spb.EndTransactionRequest,
                    born_host: str) -> spb.EndTransactionResponse:
    """Commit, roll back or note "unknown" for the request's transaction."""
    try:
        req = end_request(request, born_host)
    except Refusal as refusal:
        return spb.EndTransactionResponse(status=status(refusal.code, refusal.message))
    out = service.end(req)
    return spb.EndTransactionResponse(
        status=status(END_CODES[out.status], out.remark or out.status.value))


def recover_command(check: CheckRequest, namespace: str = "") -> spb.TelemetryCommand:
    """The Telemetry command asking a gRPC producer about a transaction (from
    the check's record: the half message in its real topic)."""
    h = check.header
    popped = PoppedMessage(record=check.body, handle="", attempt=0, topic=check.topic,
                           queue_id=0, queue_offset=h.tran_state_table_offset)
    msg = to_pb_message(popped, 0, namespace)
    sp = msg.system_properties
    for name in ("receipt_handle", "invisible_duration", "delivery_attempt"):
        sp.ClearField(name)  # a check is no delivery
    sp.message_type = pb.TRANSACTION
    token = transaction_token(h.commit_log_offset, h.tran_state_table_offset)
    return spb.TelemetryCommand(
        status=status(Code.OK),
        recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=msg, transaction_id=token))


__all__ = ["END_CODES", "RESOLUTIONS", "end_request", "end_transaction", "parse_token",
           "recover_command", "transaction_token"]
