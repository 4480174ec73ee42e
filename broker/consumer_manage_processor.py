"""Consumer offsets and queue offsets: QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.new_group_offset import NOT_FOUND_REMARK, query_offset_answer
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from protocol.trio.connection import RemotingConnection

if TYPE_CHECKING:
    from broker.controller import BrokerController


class ConsumerManageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def query_consumer_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        """The group's stored offset; for a group with none, 0 while the queue's
        first message is still in memory, else QUERY_NOT_FOUND (RocketMQ 4.x,
        broker/new_group_offset.py). A slave answers from its own store."""
        h = QueryConsumerOffsetRequestHeader.from_fields(cmd.ext_fields)
        stored = self.controller.consumer_offset_manager.query_offset(
            h.consumer_group, h.topic, h.queue_id
        )
        store = self.controller.message_store
        offset = query_offset_answer(
            stored, store.get_min_offset_in_queue(h.topic, h.queue_id),
            lambda: store.check_in_disk_by_consume_offset(h.topic, h.queue_id, 0),
            zero_if_not_found=h.set_zero_if_not_found is not False)
        if offset is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields())

    def update_consumer_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        """A consumer's commit; with ``adminReset``, an admin's reset (counted,
        so slaves take it even downwards); with ``increaseOnly``, a slave's
        offset for its returned master (only forward, see ConsumerOffsetManager)."""
        h = UpdateConsumerOffsetRequestHeader.from_fields(cmd.ext_fields)
        if h.commit_offset < 0:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "commitOffset must not be negative")
        offsets = self.controller.consumer_offset_manager
        if h.increase_only:
            offsets.commit_forward(h.consumer_group, h.topic, h.queue_id, h.commit_offset,
                                   h.reset_version)
        elif h.admin_reset:
            offsets.reset_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        else:
            offsets.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return cmd.response(ResponseCode.SUCCESS)

    def get_max_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.controller.message_store.get_max_offset_in_queue(h.topic, h.queue_id)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields())

    def get_min_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.controller.message_store.get_min_offset_in_queue(h.topic, h.queue_id)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields())
