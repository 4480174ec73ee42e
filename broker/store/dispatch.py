"""Dispatchers: what builds the indexes from each stored record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from broker.store.commit_log import DispatchRequest

if TYPE_CHECKING:
    from broker.store.message_store import DefaultMessageStore


class CommitLogDispatcher(Protocol):
    def dispatch(self, request: DispatchRequest) -> None: ...


class CommitLogDispatcherBuildConsumeQueue:
    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store

    def dispatch(self, request: DispatchRequest) -> None:
        cq = self.store.find_consume_queue(request.topic, request.queue_id)
        cq.put_entry(request.commit_log_offset, request.msg_size, request.tags_code,
                     request.consume_queue_offset)
