"""EndTransactionProcessor: END_TRANSACTION on the remoting wire, a thin
adapter over ``TransactionService`` (broker/service/transactions.py, where a
commit, rollback or "unknown" and its checks live).

It decodes the header into an ``EndTransaction`` (``commitOrRollback`` as an
``EndAction``; a value it cannot map goes as it came, for the service to
refuse), calls the service and answers the status's code by the one table
of this transport (``END_STATUS_TO_CODE``) with the remark. ACL for the half
message's real topic (the header names only a producer group, which is no
resource) is checked here, with the request's signature, through the check
the service calls once it found the half message.
"""

from __future__ import annotations

from collections.abc import Callable

from acl.plain import Need, Perm
from broker.acl.stored import ResourceCheck
from broker.message_rewrite import REAL_TOPIC
from broker.service.transactions import EndAction, EndStatus, EndTransaction, TransactionService
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import EndTransactionRequestHeader
from protocol.message import MessageExt
from protocol.trio.connection import RemotingConnection

# the remoting code of each end status (this transport's one table)
END_STATUS_TO_CODE: dict[EndStatus, int] = {
    EndStatus.ENDED: ResponseCode.SUCCESS,
    EndStatus.ALREADY_ENDED: ResponseCode.SUCCESS,
    EndStatus.UNKNOWN_NOTED: ResponseCode.SUCCESS,
    EndStatus.SLAVE: ResponseCode.SLAVE_NOT_AVAILABLE,
    EndStatus.ILLEGAL_ACTION: ResponseCode.SYSTEM_ERROR,
    EndStatus.NO_HALF_MESSAGE: ResponseCode.SYSTEM_ERROR,
    EndStatus.NO_PERMISSION: ResponseCode.NO_PERMISSION,
    EndStatus.CONFLICT: ResponseCode.TRANSACTION_FAILED,
    EndStatus.NOT_PENDING: ResponseCode.TRANSACTION_FAILED,
    EndStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    EndStatus.STORE_FAILED: ResponseCode.SYSTEM_ERROR,
}

_ACTIONS = {a.value: a for a in EndAction}


def decode_end(cmd: RemotingCommand, born_host: str) -> EndTransaction:
    """An END_TRANSACTION request as the service's (raises on a bad header)."""
    h = EndTransactionRequestHeader.from_fields(cmd.ext_fields)
    return EndTransaction(
        h.producer_group, h.tran_state_table_offset, h.commit_log_offset,
        _ACTIONS.get(h.commit_or_rollback, h.commit_or_rollback), born_host,
        from_check=h.from_transaction_check, msg_id=h.msg_id, transaction_id=h.transaction_id,
        producer_remark=cmd.remark)


class EndTransactionProcessor:
    def __init__(self, service: TransactionService,
                 acl_check: Callable[[], ResourceCheck]) -> None:
        self.service = service
        self.acl_check = acl_check  # the controller's, set once ACL is loaded

    def end_transaction(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        req = decode_end(cmd, conn.remote_addr)
        may_end = None
        acl = self.acl_check()
        if acl.enabled:
            def may_end(msg: MessageExt) -> str | None:
                # ACL: PUB on the topic the half message is for
                topic = msg.properties.get(REAL_TOPIC) or msg.topic
                refused = acl.refusal(
                    conn, cmd, [Need(topic, Perm.PUB)],
                    remark=f"No permission to end the transaction of the half message at "
                           f"commit-log offset {req.commit_log_offset}: PUB on its topic needed")
                return None if refused is None else refused.remark
        out = self.service.end(req, may_end)
        return cmd.response(END_STATUS_TO_CODE[out.status], out.remark)
