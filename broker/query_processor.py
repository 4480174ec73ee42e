"""QueryMessageProcessor: messages by id, by time and (with the index) by key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.acl.stored import message_needs
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    OffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    SearchOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from protocol.names import shown
from protocol.record import decode_record
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController

# A query by message id (RocketMQ's MixAll.UNIQUE_MSG_QUERY_FLAG) and how many
# records it takes (messageStoreConfig.defaultQueryMaxNum); any query takes at
# most MAX_QUERY_NUM (maxMsgsNumBatch).
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
DEFAULT_QUERY_MAX_NUM = 32
MAX_QUERY_NUM = 64


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
        """Records indexed under a key (KEYS or UNIQ_KEY), newest first. The
        response header says how far the index goes (RocketMQ's clients read
        it on every answer); ``_UNIQUE_KEY_QUERY=true`` (a query by message
        id) takes up to DEFAULT_QUERY_MAX_NUM records, as RocketMQ."""
        h = QueryMessageRequestHeader.from_fields(cmd.ext_fields)
        store = self.controller.message_store
        max_num = h.max_num
        if str(cmd.ext_fields.get(UNIQUE_MSG_QUERY_FLAG, "")).lower() == "true":
            max_num = DEFAULT_QUERY_MAX_NUM
        max_num = max(1, min(max_num, MAX_QUERY_NUM))
        records = store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        if self.controller.acl_check.enabled:
            # the guard checked SUB on the header's topic; a system topic's message
            # (a half or delayed one) also needs SUB on its real topic: others are left out
            records = [r for r in records if self.controller.acl_check.allows(
                conn, cmd, message_needs(h.topic, decode_record(r).properties))]
        header = self._index_progress().to_fields()
        if not records:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                "can not find message, maybe time range not correct (key "
                                f"{shown(h.key)}, topic {h.topic})", ext_fields=header)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=header, body=b"".join(records))

    def _index_progress(self) -> QueryMessageResponseHeader:
        """The newest index entry's store time and commit-log offset (0, 0
        without an index)."""
        index = self.controller.message_store.index_service
        for f in reversed(index.files if index is not None else []):
            if f.index_count > 1:
                return QueryMessageResponseHeader(f.end_timestamp, f.end_phy_offset)
        return QueryMessageResponseHeader(0, 0)

    def view_message_by_id(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_fields(cmd.ext_fields)
        store = self.controller.message_store
        head = store.commit_log.get_data(h.offset, 4)
        size = int.from_bytes(head, "big", signed=True) if head else 0
        data = store.commit_log.get_data(h.offset, size) if size > 0 else None
        msg = store.look_message_by_offset(h.offset) if data is not None else None
        if data is None or msg is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"no message at commit-log offset {h.offset}")
        # ACL: the request names no topic, the message has one: SUB on it (the
        # answer does not say which topic the caller lacks)
        refused = self.controller.acl_check.refusal(
            conn, cmd, message_needs(msg.topic, msg.properties),
            remark=f"No permission to read the message at commit-log offset {h.offset}: "
                   "SUB on its topic needed")
        if refused is not None:
            return cmd.response(ResponseCode.NO_PERMISSION, refused.remark)
        return cmd.response(ResponseCode.SUCCESS, body=data)
