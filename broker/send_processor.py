"""SendMessageProcessor: SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE,
CONSUMER_SEND_MSG_BACK: the remoting adapter over SendService.

It decodes the header, calls the service (broker/service/send.py, where every
check and the routing live) and encodes its ``SendOutcome``: the status's code
(``SEND_STATUS_TO_CODE``), the remark, and for a stored message the send
result header. An answer that waits for a flush or a slave
(SYNC_FLUSH, SYNC_MASTER) is sent once its waiters are done.

The three send codes are one entry point (``send``), as RocketMQ's: the header
is SendMessageRequestHeader for SEND_MESSAGE, its one-letter form
(SendMessageRequestHeaderV2) for SEND_MESSAGE_V2 and for a SEND_BATCH_MESSAGE
that carries it (RocketMQ's clients; this project's producer sends the long
names). The header's ``batch`` flag decides, whatever the code, as in
RocketMQ's broker: true is a batch (the C++ client sends its batches as
SEND_MESSAGE_V2), false or absent one message, even under SEND_BATCH_MESSAGE
(its body is then stored as it came).

A send to ``%RETRY%<group>`` (RocketMQ's clients send a message there
themselves when CONSUMER_SEND_MSG_BACK fails) whose ``reconsumeTimes`` has
reached the group's limit is stored in ``%DLQ%<group>`` instead
(handleRetryAndDLQ); a batch to a retry topic is refused, as RocketMQ 5's
broker does.

Runs inline in the connection's reader loop: every check and the store append
are synchronous, so a send costs no await on the broker. A SLAVE refuses all
three with NO_PERMISSION before anything else (no topic is auto-created): the
producer moves on to a master.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.acl.stored import ResourceCheck, message_needs
from broker.config import BrokerConfig
from broker.service.send import STORE_STATUS, SendOutcome, SendService, SendStatus
from broker.store import PutMessageStatus
from broker.store.offset_waiters import AllDone, Waiter
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
    is_v2_send_header,
)
from protocol.message import MessageConst, MessageExt
from protocol.trio.connection import RemotingConnection

# the remoting code of each send status (the one table of this transport)
SEND_STATUS_TO_CODE: dict[SendStatus, int] = {
    SendStatus.OK: ResponseCode.SUCCESS,
    SendStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    SendStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    SendStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    SendStatus.NO_PERMISSION: ResponseCode.NO_PERMISSION,
    SendStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    SendStatus.TOPIC_NOT_EXIST: ResponseCode.TOPIC_NOT_EXIST,
    SendStatus.GROUP_NOT_EXIST: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    SendStatus.BUSY: ResponseCode.SYSTEM_BUSY,
    SendStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    SendStatus.SYSTEM_ERROR: ResponseCode.SYSTEM_ERROR,
}

# a waiter's status (a flush or a slave that did not come): the answer's code and remark
PUT_STATUS_TO_CODE: dict[PutMessageStatus, tuple[int, str | None]] = {
    put: (SEND_STATUS_TO_CODE[status], remark) for put, (status, remark) in STORE_STATUS.items()
}

MSG_REGION, TRACE_ON = MessageConst.PROPERTY_MSG_REGION, MessageConst.PROPERTY_TRACE_SWITCH


class SendMessageProcessor:
    def __init__(self, service: SendService, config: BrokerConfig,
                 acl_check: Callable[[], ResourceCheck]) -> None:
        self.service = service
        self.acl_check = acl_check  # the controller's, set once ACL is loaded
        self._after_answer = service.after_answer
        self._trace_fields = {MSG_REGION: config.region_id,
                              TRACE_ON: "true" if config.trace_on else "false"}

    @staticmethod
    def send_header(cmd: RemotingCommand) -> SendMessageRequestHeader:
        """The send header of ``cmd``, whichever form it came in (RocketMQ's
        SendMessageRequestHeader.parseRequestHeader). Raises RemoteProtocolError."""
        fields = cmd.ext_fields
        if cmd.code == RequestCode.SEND_MESSAGE_V2 or (
                cmd.code == RequestCode.SEND_BATCH_MESSAGE and is_v2_send_header(fields)):
            return SendMessageRequestHeaderV2.from_fields(fields).to_v1()
        return SendMessageRequestHeader.from_fields(fields)

    def send(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand | None:
        """SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE."""
        h = self.send_header(cmd)
        # SendService.send's choice, made here: one call less on the hot path
        service = self.service
        if h.batch:
            out = service.send_batch(h, cmd.body, conn.remote_addr)
        else:
            out = service.send_single(h, cmd.body, conn.remote_addr)
        return self._answer(conn, cmd, out, self._response(cmd, out))

    send_message = send
    send_batch_message = send

    def consumer_send_msg_back(
        self, conn: RemotingConnection, cmd: RemotingCommand
    ) -> RemotingCommand | None:
        """A consumer gives a message back: retry topic with a delay, or the DLQ."""
        h = ConsumerSendMsgBackRequestHeader.from_fields(cmd.ext_fields)
        acl = self.acl_check()
        may_give_back = None
        if acl.enabled:
            def may_give_back(msg: MessageExt) -> str | None:
                # ACL: the guard checked SUB on the group; a message not of the
                # group's retry topic needs SUB on its own topic
                denied = acl.refusal(
                    conn, cmd, message_needs(msg.topic, msg.properties),
                    remark=f"No permission for the message at commit-log offset {h.offset}: "
                           "SUB on its topic needed to give it back")
                return None if denied is None else denied.remark
        out = self.service.send_back(h, may_give_back)
        response = self._response(cmd, out)
        if out.status is SendStatus.OK:
            response.ext_fields = {}
        return self._answer(conn, cmd, out, response)

    def _response(self, cmd: RemotingCommand, out: SendOutcome) -> RemotingCommand:
        code = SEND_STATUS_TO_CODE[out.status]
        if out.msg_id is None:  # nothing stored
            return cmd.response(code, out.remark)
        header = SendMessageResponseHeader(out.msg_id, out.queue_id, out.queue_offset,
                                           out.transaction_id, recall_handle=out.recall_handle)
        fields = header.to_fields()
        fields.update(self._trace_fields)  # MSG_REGION, TRACE_ON (as RocketMQ's)
        return cmd.response(code, out.remark, ext_fields=fields)

    def _answer(self, conn: RemotingConnection, cmd: RemotingCommand, out: SendOutcome,
                response: RemotingCommand) -> RemotingCommand | None:
        """The response now, or None when it is answered once the waiters it
        joined are done (SYNC_FLUSH: the fsync; SYNC_MASTER: a slave's ack).
        A oneway send joins the waiters too (its bytes are flushed like any
        other's) and is never answered.

        What a put left undispatched is indexed after the answer is written
        (SendService.after_answer)."""
        if out.waiters is None:
            if out.put:
                conn.after_answers(self._after_answer)
            return response
        answer_when_done(conn, response, out.waiters, send=not cmd.is_oneway,
                         then=self._after_answer)
        return None


def answer_when_done(conn: RemotingConnection, response: RemotingCommand,
                     waiters: list[Waiter], send: bool = True,
                     then: Callable[[], None] | None = None) -> None:
    """Send ``response`` once every waiter is done; the worst status decides
    its code and remark (PUT_STATUS_TO_CODE), the send result travels anyway.
    ``send`` False (a oneway request): only wait. ``then`` runs after."""

    def answer(done: AllDone) -> None:
        if send:
            status = done.status
            if status is not None and status is not PutMessageStatus.PUT_OK:
                code, remark = PUT_STATUS_TO_CODE.get(
                    status, (ResponseCode.SYSTEM_ERROR, "unknown store status"))
                response.code, response.remark = int(code), remark
            conn.send_response(response)
        if then is not None:
            then()

    AllDone(waiters).on_done(answer)
