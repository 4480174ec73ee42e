"""Consumer offsets and queue offsets on the remoting wire:
QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, a thin adapter over
``OffsetService`` (broker/service/offsets.py, where the rules live)."""

from __future__ import annotations

from broker.new_group_offset import NOT_FOUND_REMARK
from broker.service.offsets import CommitKind, CommitStatus, OffsetCommit, OffsetService
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


def commit_of(h: UpdateConsumerOffsetRequestHeader) -> OffsetCommit:
    """The commit an UPDATE_CONSUMER_OFFSET header asks for: ``increaseOnly``
    (a slave's offset for its returned master) before ``adminReset``."""
    kind = (CommitKind.INCREASE_ONLY if h.increase_only
            else CommitKind.ADMIN_RESET if h.admin_reset else CommitKind.COMMIT)
    return OffsetCommit(h.consumer_group, h.topic, h.queue_id, h.commit_offset, kind,
                        h.reset_version)


class ConsumerManageProcessor:
    def __init__(self, service: OffsetService) -> None:
        self.service = service

    def query_consumer_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.service.query(h.consumer_group, h.topic, h.queue_id,
                                    zero_if_not_found=h.set_zero_if_not_found is not False)
        if offset is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields())

    def update_consumer_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_fields(cmd.ext_fields)
        if self.service.commit(commit_of(h)) is CommitStatus.ILLEGAL_OFFSET:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "commitOffset must not be negative")
        return cmd.response(ResponseCode.SUCCESS)

    def get_max_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.service.max_offset(h.topic, h.queue_id)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields())

    def get_min_offset(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.service.min_offset(h.topic, h.queue_id)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).to_fields())
