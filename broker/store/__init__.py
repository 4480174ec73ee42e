"""The storage engine: commit log, consume queues, checkpoint, recovery.

Synchronous and sans-trio; the broker runs the blocking parts in worker threads.
"""

from broker.store.commit_log import CommitLog, DispatchRequest, MessageExtBrokerInner
from broker.store.config import StoreConfig
from broker.store.consume_queue import CQ_STORE_UNIT_SIZE, ConsumeQueue
from broker.store.dispatch import CommitLogDispatcher, CommitLogDispatcherBuildConsumeQueue
from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.message_store import DefaultMessageStore
from broker.store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    StoreError,
)
from broker.store.store_checkpoint import StoreCheckpoint

__all__ = [
    "CQ_STORE_UNIT_SIZE",
    "AppendMessageResult",
    "AppendMessageStatus",
    "CommitLog",
    "CommitLogDispatcher",
    "CommitLogDispatcherBuildConsumeQueue",
    "ConsumeQueue",
    "DefaultMessageStore",
    "DispatchRequest",
    "GetMessageResult",
    "GetMessageStatus",
    "MappedFile",
    "MappedFileQueue",
    "MessageExtBrokerInner",
    "PutMessageResult",
    "PutMessageStatus",
    "StoreCheckpoint",
    "StoreConfig",
    "StoreError",
]
