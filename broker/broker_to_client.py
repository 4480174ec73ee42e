"""Broker2Client: an admin's requests the broker carries out with a group's consumers.

- INVOKE_BROKER_TO_RESET_OFFSET (222, admin): ``ResetOffsetRequestHeader`` (topic,
  group, timestamp, isForce). Each readable queue of the topic gets the offset of the
  first message stored at or after ``timestamp`` (-1: the queue's max offset, i.e.
  everything accumulated is skipped: mqadmin skipAccumulatedMessage); without
  ``isForce`` an offset only moves back. The broker commits the new offsets itself as
  an admin's reset (counted: slaves take them even backwards), then tells every
  online consumer of the group (RESET_CONSUMER_CLIENT_OFFSET, oneway, the same header
  and a ``ResetOffsetBody``), which takes them instead of writing its old ones back.
  Answer: SUCCESS with the ``ResetOffsetBody`` of the topic's queues on this broker.
  RocketMQ's broker only asks the consumers (CONSUMER_NOT_ONLINE when none is):
  here an offline group is reset too, in the same request.
- GET_CONSUMER_RUNNING_INFO (307): ``GetConsumerRunningInfoRequestHeader``
  (consumerGroup, clientId, jstackEnable): relayed to that client over its
  connection; its answer (client/running_info.py) is relayed back, re-encoded when
  the admin speaks another wire format. Bounded: at most ``MAX_RELAYS`` at a time
  (SYSTEM_BUSY beyond), a client that does not read what it is sent is not asked,
  an answer larger than ``MAX_RELAYED_BODY`` is refused, ``RELAY_TIMEOUT_S`` for the
  client to answer (CONSUME_MSG_TIMEOUT after).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
import trio

from protocol.client_data import ResetOffsetBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import GetConsumerRunningInfoRequestHeader, ResetOffsetRequestHeader
from protocol.message import MessageQueue
from protocol.names import shown
from protocol.trio.connection import RemotingConnection
from protocol.trio.errors import RemotingError, RemotingTimeoutError

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger("broker.broker2client")

RELAY_TIMEOUT_S = 5.0  # RocketMQ's callClient timeout
MAX_RELAYS = 4
MAX_RELAYED_BODY = 4 * 1024 * 1024
SKIP_ALL = -1  # a reset's timestamp meaning "past the last message"


class Broker2Client:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller
        self.relays = 0
        self.log = log.bind(broker=controller.config.broker_name)

    # ---- offsets -------------------------------------------------------------------

    def reset_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = ResetOffsetRequestHeader.from_fields(cmd.ext_fields)
        c = self.controller
        if c.role.is_slave:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                "a slave does not reset offsets: ask its master")
        cfg = c.topic_config_manager.get(h.topic)
        if cfg is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"[reset-offset] no topic {shown(h.topic)} on this broker")
        store, table = c.message_store, c.consumer_offset_manager
        offsets: dict[MessageQueue, int] = {}
        for qid in range(cfg.read_queue_nums):
            current = table.query_offset(h.group, h.topic, qid)
            if h.timestamp == SKIP_ALL:
                target = store.get_max_offset_in_queue(h.topic, qid)
            else:
                target = store.get_offset_in_queue_by_time(h.topic, qid, h.timestamp)
            target = max(target, 0)
            new = target if h.is_force or current < 0 or target < current else current
            if new != current:
                table.reset_offset(h.group, h.topic, qid, new)
            offsets[MessageQueue(h.topic, c.config.broker_name, qid)] = new
        body = ResetOffsetBody(offsets).to_dict()
        told = self._tell_consumers(h, body)
        self.log.info("offsets reset by an admin", group=shown(h.group), topic=shown(h.topic),
                      timestamp=h.timestamp, force=h.is_force, consumers_told=told,
                      offsets={q.queue_id: o for q, o in offsets.items()})
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

    def _tell_consumers(self, h: ResetOffsetRequestHeader, body: dict[str, object]) -> int:
        """RESET_CONSUMER_CLIENT_OFFSET to every online consumer of the group that
        reads what it is sent (RemotingConnection.offer); how many were told."""
        info = self.controller.consumer_manager.groups.get(h.group)
        told = 0
        for ch in list(info.clients.values()) if info is not None else []:
            notice = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                             h.to_fields(), oneway=True)
            notice.codec = getattr(ch.conn, "codec", None)  # the body in its wire format
            notice.body = notice.encode_body(body)
            if ch.conn.offer(notice):
                told += 1
            else:
                self.log.warning("consumer not told of the offset reset (not reading)",
                                 group=shown(h.group), client_id=ch.client_id)
        return told

    # ---- a consumer's running info ---------------------------------------------------

    async def get_consumer_running_info(self, conn: RemotingConnection, cmd: RemotingCommand
                                        ) -> RemotingCommand:
        h = GetConsumerRunningInfoRequestHeader.from_fields(cmd.ext_fields)
        info = self.controller.consumer_manager.groups.get(h.consumer_group)
        ch = info.clients.get(h.client_id) if info is not None else None
        who = f"<{h.consumer_group}> <{h.client_id}>"
        if ch is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The Consumer {who} not online")
        client: RemotingConnection = ch.conn
        if self.relays >= MAX_RELAYS:
            return cmd.response(ResponseCode.SYSTEM_BUSY,
                                f"{self.relays} running-info requests in flight; try again")
        if not client.takes_requests:
            return cmd.response(ResponseCode.SYSTEM_BUSY,
                                f"consumer {who} does not read what it is sent")
        ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, h.to_fields())
        self.relays += 1
        try:
            with trio.move_on_after(RELAY_TIMEOUT_S):  # invoke may first wait for room
                answer = await client.invoke(ask, RELAY_TIMEOUT_S)
                return self._relayed(cmd, answer, who)
        except RemotingTimeoutError:
            pass
        except RemotingError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"invoke consumer {who} failed: {exc}")
        finally:
            self.relays -= 1
        return cmd.response(ResponseCode.CONSUME_MSG_TIMEOUT,
                            f"consumer {who} did not answer within {RELAY_TIMEOUT_S:.0f} s")

    @staticmethod
    def _relayed(cmd: RemotingCommand, answer: RemotingCommand, who: str) -> RemotingCommand:
        if answer.code != ResponseCode.SUCCESS:
            return cmd.response(answer.code, answer.remark)
        body = answer.body or b""
        if len(body) > MAX_RELAYED_BODY:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"consumer {who} answered {len(body)} bytes, more than "
                                f"{MAX_RELAYED_BODY} are not relayed")
        if answer.wire_codec.name != cmd.wire_codec.name:
            try:
                body = cmd.encode_body(answer.decode_body())
            except RemoteProtocolError as exc:
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    f"consumer {who} answered an unreadable body: {exc}")
        return cmd.response(ResponseCode.SUCCESS, body=body)
