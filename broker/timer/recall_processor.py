"""The timer's remoting requests, thin adapters over ``TimerService``:
RECALL_MESSAGE (370, ``recall_handle``; the status's code from one table) and
GET_TIMER_CHECK_POINT (60: a slave copies its master's last checkpoint)."""

from __future__ import annotations

from broker.timer.service import RecallStatus, TimerService
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import RecallMessageRequestHeader, RecallMessageResponseHeader
from protocol.recall_handle import parse_handle
from protocol.trio.connection import RemotingConnection

RECALL_STATUS_TO_CODE: dict[RecallStatus, int] = {
    RecallStatus.OK: ResponseCode.SUCCESS,
    RecallStatus.NOT_FOUND: ResponseCode.NO_MESSAGE,
    RecallStatus.ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    RecallStatus.BUSY: ResponseCode.SYSTEM_BUSY,
    RecallStatus.OFF: ResponseCode.SERVICE_NOT_AVAILABLE,
}


class RecallMessageProcessor:
    def __init__(self, service: TimerService) -> None:
        self.service = service

    def recall_message(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = RecallMessageRequestHeader.from_fields(cmd.ext_fields)
        out = self.service.recall_handle(h.topic, h.recall_handle)
        if out.status != RecallStatus.OK:
            return cmd.response(RECALL_STATUS_TO_CODE[out.status], out.remark)
        msg_id = parse_handle(h.recall_handle).message_id
        return cmd.response(ResponseCode.SUCCESS, None,
                            ext_fields=RecallMessageResponseHeader(msg_id).to_fields())


    def get_timer_check_point(self, conn: RemotingConnection, cmd: RemotingCommand
                              ) -> RemotingCommand:
        cp = self.service.last_checkpoint
        body = {"cqOffset": cp.cq_offset, "records": cp.records, "doneSlot": cp.done_slot,
                "doneIndex": cp.done_index}
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))


__all__ = ["RECALL_STATUS_TO_CODE", "RecallMessageProcessor"]
