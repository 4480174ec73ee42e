"""Dispatchers: what builds the indexes from each stored record."""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Protocol

from broker.store.commit_log import DispatchRequest

if TYPE_CHECKING:
    from broker.store.message_store import DefaultMessageStore


# (commit_log_offset, msg_size, tags_code) of a DispatchRequest, taken in C
_CQ_FIELDS = itemgetter(
    DispatchRequest._fields.index("commit_log_offset"),
    DispatchRequest._fields.index("msg_size"),
    DispatchRequest._fields.index("tags_code"),
)


class CommitLogDispatcher(Protocol):
    def dispatch(self, request: DispatchRequest) -> None: ...

    def dispatch_batch(self, requests: list[DispatchRequest]) -> None:
        """Records of one append, all to one topic and queue, consecutive offsets."""


class CommitLogDispatcherBuildConsumeQueue:
    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store

    def dispatch(self, request: DispatchRequest) -> None:
        cq = self.store.find_consume_queue(request.topic, request.queue_id)
        cq.put_entry(request.commit_log_offset, request.msg_size, request.tags_code,
                     request.consume_queue_offset)

    def dispatch_batch(self, requests: list[DispatchRequest]) -> None:
        first = requests[0]
        cq = self.store.find_consume_queue(first.topic, first.queue_id)
        cq.put_entries(list(map(_CQ_FIELDS, requests)), first.consume_queue_offset)
