"""Dispatchers: what builds the indexes from each stored record."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from broker.store.commit_log import DispatchRequest
from protocol.speedups import compiled

if TYPE_CHECKING:
    from broker.store.message_store import DefaultMessageStore


def compiled_dispatch_kernel(name: str) -> Callable[..., Any] | None:
    """Dispatch loop ``name`` (``cq_entries``, ``index_hashes``) of
    ``batch_records_kernel`` compiled (deploy/speedups.py), when built from the
    source beside this file and not turned off; else None."""
    return compiled("broker.store._batch_records_kernel_c",
                    Path(__file__).with_name("batch_records_kernel.py"), name)


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
        # batch_records_kernel.cq_entries compiled, or None: the entries packed by struct
        self.cq_entries: Callable[[list[DispatchRequest]], bytearray | None] | None = \
            compiled_dispatch_kernel("cq_entries")

    def dispatch(self, request: DispatchRequest) -> None:
        cq = self.store.find_consume_queue(request.topic, request.queue_id)
        cq.put_entry(request.commit_log_offset, request.msg_size, request.tags_code,
                     request.consume_queue_offset)

    def dispatch_batch(self, requests: list[DispatchRequest]) -> None:
        first = requests[0]
        cq = self.store.find_consume_queue(first.topic, first.queue_id)
        pack = self.cq_entries
        if pack is not None:
            packed = pack(requests)
            if packed is not None:
                last = requests[-1]
                if cq.put_packed(packed, first.consume_queue_offset,
                                 last.commit_log_offset + last.msg_size):
                    return
        cq.put_entries(list(map(_CQ_FIELDS, requests)), first.consume_queue_offset)
