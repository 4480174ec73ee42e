"""QueryMessageProcessor: messages by id, by time and (with the index) by key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    OffsetResponseHeader,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from protocol.names import shown
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController


class QueryMessageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def search_offset_by_timestamp(
        self, conn: RemotingConnection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.controller.message_store.get_offset_in_queue_by_time(
            h.topic, h.queue_id, h.timestamp
        )
        return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields())

    def query_message(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_fields(cmd.ext_fields)
        store = self.controller.message_store
        max_num = max(1, min(h.max_num, 64))
        records = store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        if not records:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                f"no message with key {shown(h.key)} in topic {h.topic}")
        return cmd.response(ResponseCode.SUCCESS, body=b"".join(records))

    def view_message_by_id(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_fields(cmd.ext_fields)
        store = self.controller.message_store
        head = store.commit_log.get_data(h.offset, 4)
        size = int.from_bytes(head, "big", signed=True) if head else 0
        data = store.commit_log.get_data(h.offset, size) if size > 0 else None
        if data is None or store.look_message_by_offset(h.offset) is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"no message at commit-log offset {h.offset}")
        return cmd.response(ResponseCode.SUCCESS, body=data)
