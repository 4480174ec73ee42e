"""The ACL check of resources a request does not name in its header (issue 48).

The guard (acl/guard.py) checks what a request's header names before its handler
runs. Some resources only the handler finds: the topic of the message at a
commit-log offset (VIEW_MESSAGE_BY_ID, CONSUMER_SEND_MSG_BACK), a half
message's real topic (END_TRANSACTION), the group and queues in a body
(LOCK_BATCH_MQ, UNLOCK_BATCH_MQ), the producers a transaction check may be sent
to (HEART_BEAT's producer groups). The handler hands them to ``ResourceCheck``,
which decides with the accounts in force as the guard does
(``AclConfig.decide_stored``: same white addresses and permissions, the
signature already verified), logs and counts a refusal as the guard does.

With ACL off (no accounts callable) everything is allowed: RocketMQ's behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import structlog

from acl.guard import NOT_LOADED, OnRefusal, remote_host
from acl.plain import NOT_LOADED as NOT_LOADED_REASON
from acl.plain import AclConfig, Decision, Need, Perm
from protocol.acl import ACCESS_KEY
from protocol.command import RemotingCommand
from protocol.message import MessageConst

log = structlog.get_logger("broker.acl")

# conn.attrs key: the access key of the connection's last admitted HEART_BEAT
# (None from a globally white peer); whom transaction checks may go to
HEARTBEAT_ACCESS_KEY = "acl_access_key"


def message_needs(topic: str, properties: dict[str, str], perm: Perm = Perm.SUB) -> list[Need]:
    """What reading (or acting on) a stored message takes: ``perm`` on its topic
    and, for a message parked in a system topic for another one (a half message,
    a delayed message: property REAL_TOPIC), on that real topic too."""
    needs = [Need(topic, perm)]
    real = properties.get(MessageConst.PROPERTY_REAL_TOPIC)
    if real and real != topic:
        needs.append(Need(real, perm))
    return needs


class ResourceCheck:
    """Checks a handler makes of the resources it found (see the module's doc)."""

    def __init__(self, config: Callable[[], AclConfig | None] | None = None,
                 on_refusal: OnRefusal | None = None, logger: Any = log) -> None:
        self.config = config
        self.on_refusal = on_refusal
        self.log = logger

    @property
    def enabled(self) -> bool:
        return self.config is not None

    def _decide(self, code: int, access_key: object, conn: Any,
                needs: Iterable[Need]) -> Decision:
        assert self.config is not None
        config = self.config()
        if config is None:
            return Decision(False, NOT_LOADED, reason=NOT_LOADED_REASON)
        return config.decide_stored(code, access_key if isinstance(access_key, str) else None,
                                    remote_host(getattr(conn, "remote_addr", "?")), needs)

    def refusal(self, conn: Any, cmd: RemotingCommand, needs: Iterable[Need],
                remark: str | None = None) -> Decision | None:
        """None when the request's caller holds every one of ``needs`` (or ACL is
        off); else the refusal, logged with its precise remark and counted.
        ``remark`` replaces the remark the caller is answered with, for resources
        it did not name itself (a stored message's topic is not told)."""
        if self.config is None:
            return None
        key = (cmd.ext_fields or {}).get(ACCESS_KEY)
        decision = self._decide(cmd.code, key, conn, needs)
        if decision.allowed:
            return None
        if self.on_refusal is not None:
            self.on_refusal(cmd.code, decision.reason)
        self.log.warning("request refused by ACL", code=cmd.code, access_key=key,
                         remote=getattr(conn, "remote_addr", "?"),
                         reason=decision.reason, remark=decision.detail or decision.remark)
        if remark is not None:
            return Decision(False, remark, decision.access_key, decision.reason,
                            decision.detail or decision.remark)
        return decision

    def allows(self, conn: Any, cmd: RemotingCommand, needs: Iterable[Need]) -> bool:
        """Whether the request's caller holds ``needs`` (True with ACL off), neither
        logged nor counted: for leaving out what a caller may not see (QUERY_MESSAGE)."""
        if self.config is None:
            return True
        return self._decide(cmd.code, (cmd.ext_fields or {}).get(ACCESS_KEY), conn,
                            needs).allowed

    def connection_may(self, conn: Any, code: int, needs: Iterable[Need]) -> bool:
        """Whether the account a connection's heart-beat was admitted with holds
        ``needs`` now (True with ACL off): who may be sent ``code``."""
        if self.config is None:
            return True
        attrs = getattr(conn, "attrs", None)
        key = attrs.get(HEARTBEAT_ACCESS_KEY) if isinstance(attrs, dict) else None
        return self._decide(code, key, conn, needs).allowed

