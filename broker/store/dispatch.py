"""Dispatchers: what builds the indexes from each stored record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from broker.store.commit_log import DispatchRequest

if TYPE_CHECKING:
    from broker.store.message_store import DefaultMessageStore


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
        cq.put_entries(
            [(r.commit_log_offset, r.msg_size, r.tags_code) for r in requests],
            first.consume_queue_offset,
        )
