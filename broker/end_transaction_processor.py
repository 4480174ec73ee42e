"""EndTransactionProcessor: END_TRANSACTION, how a producer ends a half message.

A commit (sysFlag type 8) or rollback (12) goes to the transactional message
service (transaction_service.end); "unknown" (0) changes nothing, the check
service asks later. A slave refuses: ends belong on the master, which
replicates what they store.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from acl.plain import Need, Perm
from broker.acl.stored import ResourceCheck
from broker.config import BrokerConfig
from broker.message_rewrite import REAL_TOPIC, EndState
from broker.role import RoleState
from broker.transaction_service import TransactionalMessageService
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import EndTransactionRequestHeader
from protocol.message import MessageExt
from protocol.names import shown
from protocol.record import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from protocol.trio.connection import RemotingConnection
from protocol.trio.service import Guard

END_STATES = {TRANSACTION_COMMIT_TYPE: EndState.COMMIT, TRANSACTION_ROLLBACK_TYPE: EndState.ROLLBACK}


class EndTransactionProcessor:
    def __init__(self, transactions: TransactionalMessageService, config: BrokerConfig,
                 role: RoleState, acl_check: Callable[[], ResourceCheck]) -> None:
        self.transactions = transactions
        self.role = role  # the live role
        self.acl_check = acl_check  # the controller's, set once ACL is loaded
        self.config = config
        self.log = structlog.get_logger("broker.transaction").bind(broker=self.config.broker_name)
        self.guard = Guard(self.log, "end transaction")

    def end_transaction(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = EndTransactionRequestHeader.from_fields(cmd.ext_fields)
        if self.role.is_slave:
            return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE,
                                f"the broker[{self.config.broker_name}] is a slave: end "
                                "transactions on its master")
        if h.commit_or_rollback == TRANSACTION_NOT_TYPE:
            self.guard.note("producer does not know the transaction's state yet",
                            key=("unknown", h.producer_group), log_level="debug",
                            group=shown(h.producer_group), msg_id=shown(h.msg_id),
                            from_check=h.from_transaction_check, remark=shown(cmd.remark))
            return cmd.response(ResponseCode.SUCCESS, "unknown: the broker will ask again")
        state = END_STATES.get(h.commit_or_rollback)
        if state is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"commitOrRollback must be {TRANSACTION_NOT_TYPE} (unknown), "
                                f"{TRANSACTION_COMMIT_TYPE} (commit) or "
                                f"{TRANSACTION_ROLLBACK_TYPE} (rollback), "
                                f"not {h.commit_or_rollback}")
        may_end = None
        acl = self.acl_check()
        if acl.enabled:
            def may_end(msg: MessageExt) -> str | None:
                # ACL: PUB on the topic the half message is for (the header names
                # only a producer group, which is no resource)
                topic = msg.properties.get(REAL_TOPIC) or msg.topic
                refused = acl.refusal(
                    conn, cmd, [Need(topic, Perm.PUB)],
                    remark=f"No permission to end the transaction of the half message at "
                           f"commit-log offset {h.commit_log_offset}: PUB on its topic needed")
                return None if refused is None else refused.remark
        code, remark = self.transactions.end(h, state, conn.remote_addr, may_end)
        if code != ResponseCode.SUCCESS:
            self.guard.note("end transaction refused", key=("refused", code),
                            log_level="warning", group=shown(h.producer_group),
                            msg_id=shown(h.msg_id), state=state.value,
                            from_check=h.from_transaction_check, peer=conn.remote_addr,
                            reason=remark)
        return cmd.response(code, remark)
