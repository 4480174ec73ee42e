"""HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
CHECK_CLIENT_CONFIG, LOCK/UNLOCK_BATCH_MQ on the remoting wire: a thin adapter
over ``ClientService`` (broker/service/clients.py, where the rules live).

Each handler decodes the header or body (every field checked; a bad one
raises RemoteProtocolError before anything changes), calls the service with
the connection as the client's channel and encodes its ``ClientOutcome``: the
code by one table (``CLIENT_STATUS_TO_CODE``), the remark, a body where the
request has one. ``RemotingNotifier`` sends the service's group change
notices (NOTIFY_CONSUMER_IDS_CHANGED, oneway).

What only this transport knows stays here: a heart-beat's connection
remembers the client's language and version (GET_PRODUCER_CONNECTION_LIST
and GET_CONSUMER_CONNECTION_LIST report them) and, with ACL, the access key
it was admitted with (whom transaction checks may go to: the controller's
``ask_producer``); a lock request's access is decided by the ACL check of
this request (``ResourceCheck``: its signature, its caller's address).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio

from acl.plain import Need
from broker.acl.stored import HEARTBEAT_ACCESS_KEY, ResourceCheck
from broker.service.clients import (
    Authorize,
    ClientOutcome,
    ClientService,
    ClientStatus,
    Queue,
    QueueLockRequest,
    Unregister,
)
from broker.service.types import SessionChannel
from protocol.acl import ACCESS_KEY
from protocol.client_data import (
    CLIENT_ID_MAX_LENGTH,
    CheckClientRequestBody,
    HeartbeatData,
    LockBatchRequestBody,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.names import group_problem
from protocol.trio.connection import RemotingConnection

# the remoting wire's code of each outcome (official clients depend on them)
CLIENT_STATUS_TO_CODE: dict[ClientStatus, int] = {
    ClientStatus.OK: ResponseCode.SUCCESS,
    ClientStatus.REFUSED: ResponseCode.NO_PERMISSION,
    ClientStatus.NO_PERMISSION: ResponseCode.NO_PERMISSION,
    ClientStatus.NO_CONSUMER: ResponseCode.SYSTEM_ERROR,
    ClientStatus.FILTER_UNSUPPORTED: ResponseCode.SYSTEM_ERROR,
    ClientStatus.FILTER_PARSE_FAILED: ResponseCode.SUBSCRIPTION_PARSE_FAILED,
}


def _mq_dicts(mqs: list[Queue]) -> list[dict[str, Any]]:
    return [{"topic": t, "brokerName": b, "queueId": q} for t, b, q in mqs]


def decode_unregister(fields: dict[str, Any]) -> Unregister:
    """An UNREGISTER_CLIENT header as the service's request (raises on a bad
    one). An empty group means none: RocketMQ's clients send both, one empty."""
    cid = fields.get("clientID")
    if not isinstance(cid, str) or len(cid) > CLIENT_ID_MAX_LENGTH:
        raise RemoteProtocolError("UNREGISTER_CLIENT needs clientID (at most "
                                  f"{CLIENT_ID_MAX_LENGTH} characters)")
    producer, group = fields.get("producerGroup") or None, fields.get("consumerGroup") or None
    for key, value in (("producerGroup", producer), ("consumerGroup", group)):
        if value is not None and group_problem(value) is not None:
            raise RemoteProtocolError(f"UNREGISTER_CLIENT: field {key!r}: {group_problem(value)}")
    assert producer is None or isinstance(producer, str)
    assert group is None or isinstance(group, str)
    return Unregister(cid, producer, group)


def decode_lock(cmd: RemotingCommand) -> QueueLockRequest:
    body = LockBatchRequestBody.from_wire(cmd.decode_body())
    return QueueLockRequest(body.consumer_group, body.client_id, body.mq_set)


def respond(cmd: RemotingCommand, outcome: ClientOutcome, body: bytes | None = None
            ) -> RemotingCommand:
    return cmd.response(CLIENT_STATUS_TO_CODE[outcome.status], outcome.remark, body=body)


class RemotingNotifier:
    """Group change notices as oneway NOTIFY_CONSUMER_IDS_CHANGED requests; a
    gRPC client's session is told nothing (RocketMQ 5 clients are not called
    back: a simple consumer pops from every queue, a push consumer asks for
    its assignment)."""

    def consumer_ids_changed(self, channel: RemotingConnection | SessionChannel,
                             group: str) -> bool:
        if isinstance(channel, SessionChannel):
            return True
        # offer: False past the connection's write high-water mark (nothing queued)
        return channel.offer(RemotingCommand.request(
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True))


class ClientManageProcessor:
    def __init__(self, service: ClientService[RemotingConnection | SessionChannel],
                 acl_check: Callable[[], ResourceCheck]) -> None:
        self.service = service
        self.acl_check = acl_check  # the controller's, set once ACL is loaded

    def heart_beat(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        attrs = getattr(conn, "attrs", None)
        if isinstance(attrs, dict):
            attrs["language"] = cmd.language or "PYTHON"  # msgpack: this project's clients
            attrs["version"] = cmd.version
            if self.acl_check().enabled:  # whom transaction checks may go to
                key = (cmd.ext_fields or {}).get(ACCESS_KEY)
                attrs[HEARTBEAT_ACCESS_KEY] = key if isinstance(key, str) else None
        # the whole body is checked before anything is registered
        hb = HeartbeatData.from_wire(cmd.decode_body())
        return respond(cmd, self.service.heart_beat(conn, hb, trio.current_time()))

    def unregister_client(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return respond(cmd, self.service.unregister(decode_unregister(cmd.ext_fields)))

    def get_consumer_list_by_group(self, conn: RemotingConnection, cmd: RemotingCommand
                                   ) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup")
        if group_problem(group) is not None:
            raise RemoteProtocolError(f"GET_CONSUMER_LIST_BY_GROUP: field 'consumerGroup': "
                                      f"{group_problem(group)}")
        assert isinstance(group, str)
        out = self.service.consumer_ids(group)
        if out.status is not ClientStatus.OK:
            return respond(cmd, out)
        return respond(cmd, out, cmd.encode_body({"consumerIdList": out.client_ids}))

    def check_client_config(self, conn: RemotingConnection, cmd: RemotingCommand
                            ) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG (RocketMQ's checkClientConfig): whether the
        broker filters by the body's subscription (none: nothing to check)."""
        sub = CheckClientRequestBody.from_wire(cmd.decode_body()).subscription
        if sub is None:
            return cmd.response(ResponseCode.SUCCESS)
        return respond(cmd, self.service.check_filter(sub.expression_type, sub.sub_string))

    def _authorize(self, conn: RemotingConnection, cmd: RemotingCommand) -> Authorize | None:
        """ACL of what a lock body names (the guard does not read bodies)."""
        acl = self.acl_check()
        if not acl.enabled:
            return None

        def authorize(needs: Sequence[Need]) -> str | None:
            refused = acl.refusal(conn, cmd, needs)
            return None if refused is None else refused.remark

        return authorize

    def lock_batch_mq(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        req = decode_lock(cmd)
        out = self.service.lock_batch(req, trio.current_time(), self._authorize(conn, cmd))
        if out.status is not ClientStatus.OK:
            return respond(cmd, out)
        return respond(cmd, out, cmd.encode_body({"lockOKMQSet": _mq_dicts(out.locked)}))

    def unlock_batch_mq(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return respond(cmd, self.service.unlock_batch(decode_lock(cmd),
                                                      self._authorize(conn, cmd)))
