"""Broker2Client: an admin's requests the broker carries out with a group's
consumers, the remoting adapter over Broker2ClientService
(broker/service/broker2client.py: which offsets a reset sets and commits,
whom it tells, how a running-info relay is bounded).

- INVOKE_BROKER_TO_RESET_OFFSET (222, admin): ``ResetOffsetRequestHeader``
  (topic, group, timestamp, isForce) -> SUCCESS with the ``ResetOffsetBody``
  of the topic's queues on this broker; TOPIC_NOT_EXIST; SYSTEM_ERROR on a
  slave. Every online consumer of the group is told with a oneway
  RESET_CONSUMER_CLIENT_OFFSET (the same header and body, in its own wire
  format), which it takes instead of writing its old offsets back.
- GET_CONSUMER_RUNNING_INFO (307): ``GetConsumerRunningInfoRequestHeader``
  (consumerGroup, clientId, jstackEnable): relayed to that client over its
  connection; its answer (client/running_info.py) is relayed back, re-encoded
  when the admin speaks another wire format; an error it answers is relayed
  with its code. SYSTEM_BUSY past ``MAX_RELAYS`` or for a client that does
  not read what it is sent, CONSUME_MSG_TIMEOUT after ``RELAY_TIMEOUT_S``,
  SYSTEM_ERROR for a client not online, an answer over ``MAX_RELAYED_BODY``
  or one that cannot be read.

``RemotingConsumerLink`` is the service's channel to a consumer: a
connection's ``offer`` (nothing queued past its write high-water mark) and
``invoke``.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.service.broker2client import (
    MAX_RELAYED_BODY,
    MAX_RELAYS,
    RELAY_TIMEOUT_S,
    SKIP_ALL,
    Broker2ClientService,
    RelayFailed,
    RelayStatus,
    RelayTimeout,
    ResetNotice,
    ResetRequest,
    ResetStatus,
    RunningInfoAsk,
)
from protocol.client_data import ResetOffsetBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import GetConsumerRunningInfoRequestHeader, ResetOffsetRequestHeader
from protocol.trio.connection import RemotingConnection
from protocol.trio.errors import RemotingError, RemotingTimeoutError

RESET_STATUS_TO_CODE = {
    ResetStatus.OK: ResponseCode.SUCCESS,
    ResetStatus.TOPIC_NOT_EXIST: ResponseCode.TOPIC_NOT_EXIST,
    ResetStatus.NOT_ON_SLAVE: ResponseCode.SYSTEM_ERROR,
}

# REFUSED: the consumer's own code
RELAY_STATUS_TO_CODE = {
    RelayStatus.OK: ResponseCode.SUCCESS,
    RelayStatus.NOT_ONLINE: ResponseCode.SYSTEM_ERROR,
    RelayStatus.BUSY: ResponseCode.SYSTEM_BUSY,
    RelayStatus.NOT_READING: ResponseCode.SYSTEM_BUSY,
    RelayStatus.TOO_LARGE: ResponseCode.SYSTEM_ERROR,
    RelayStatus.FAILED: ResponseCode.SYSTEM_ERROR,
    RelayStatus.TIMEOUT: ResponseCode.CONSUME_MSG_TIMEOUT,
    RelayStatus.UNSUPPORTED: ResponseCode.SYSTEM_ERROR,
}


@dataclass(frozen=True, slots=True)
class RemotingReply:
    """A consumer's answer as a remoting command."""

    answer: RemotingCommand

    @property
    def ok(self) -> bool:
        return self.answer.code == ResponseCode.SUCCESS

    @property
    def size(self) -> int:
        return len(self.answer.body or b"")


class RemotingConsumerLink:
    """The service's channel to a consumer: its remoting connection."""

    def tell_reset(self, channel: RemotingConnection, notice: ResetNotice) -> bool:
        r = notice.request
        cmd = RemotingCommand.request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            ResetOffsetRequestHeader(r.topic, r.group, r.timestamp, r.force).to_fields(),
            oneway=True)
        cmd.codec = getattr(channel, "codec", None)  # the body in the consumer's wire format
        cmd.body = cmd.encode_body(ResetOffsetBody(notice.offsets).to_dict())
        return channel.offer(cmd)

    def takes_requests(self, channel: RemotingConnection) -> bool:
        return channel.takes_requests

    async def running_info(self, channel: RemotingConnection, ask: RunningInfoAsk,
                           timeout: float) -> RemotingReply:
        cmd = RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            GetConsumerRunningInfoRequestHeader(ask.group, ask.client_id, ask.jstack).to_fields())
        try:
            return RemotingReply(await channel.invoke(cmd, timeout))
        except RemotingTimeoutError as exc:
            raise RelayTimeout(str(exc)) from exc
        except RemotingError as exc:
            raise RelayFailed(str(exc)) from exc


class Broker2Client:
    def __init__(self, service: Broker2ClientService[RemotingReply]) -> None:
        self.service = service

    def reset_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = ResetOffsetRequestHeader.from_fields(cmd.ext_fields)
        out = self.service.reset_offset(ResetRequest(h.topic, h.group, h.timestamp, h.is_force))
        if out.status is not ResetStatus.OK:
            return cmd.response(RESET_STATUS_TO_CODE[out.status], out.remark)
        body = ResetOffsetBody(out.offsets).to_dict()
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

    async def get_consumer_running_info(self, conn: RemotingConnection, cmd: RemotingCommand
                                        ) -> RemotingCommand:
        h = GetConsumerRunningInfoRequestHeader.from_fields(cmd.ext_fields)
        out = await self.service.running_info(
            RunningInfoAsk(h.consumer_group, h.client_id, h.jstack_enable))
        if out.reply is None:
            return cmd.response(RELAY_STATUS_TO_CODE[out.status], out.remark)
        answer = out.reply.answer
        if out.status is RelayStatus.REFUSED:
            return cmd.response(answer.code, answer.remark)
        body = answer.body or b""
        if answer.wire_codec.name != cmd.wire_codec.name:
            try:
                body = cmd.encode_body(answer.decode_body())
            except RemoteProtocolError as exc:
                return cmd.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"consumer <{h.consumer_group}> <{h.client_id}> answered an unreadable "
                    f"body: {exc}")
        return cmd.response(ResponseCode.SUCCESS, body=body)


__all__ = ["MAX_RELAYED_BODY", "MAX_RELAYS", "RELAY_TIMEOUT_S", "SKIP_ALL", "Broker2Client",
           "RemotingConsumerLink", "RemotingReply"]
