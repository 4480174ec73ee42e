"""Expected outcomes of store operations: status enums and result records."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum

_TOTAL_SIZE = struct.Struct(">i")  # a record's first field


class StoreError(Exception):
    """Misuse of the store, or corruption it cannot repair."""


class PutMessageStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    # No space for a new commit-log, consume-queue or index file: nothing was
    # written; the next put tries again, so writes resume once space is back.
    DISK_FULL = "DISK_FULL"
    # Stored records are not all in their consume queues yet (their dispatch
    # failed for a reason other than space): puts wait until a reput succeeds.
    DISPATCH_BEHIND = "DISPATCH_BEHIND"
    # Controller mode: the SyncStateSet has fewer members than minInSyncReplicas,
    # so nothing was written (RocketMQ 5's status of the same name)
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"


class AppendMessageStatus(Enum):
    PUT_OK = "PUT_OK"
    END_OF_FILE = "END_OF_FILE"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetMessageStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class AppendMessageResult:
    status: AppendMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    msg_id: str = ""
    store_timestamp: int = 0
    logics_offset: int = 0
    msg_num: int = 1


@dataclass(slots=True)
class PutMessageResult:
    put_message_status: PutMessageStatus
    append_result: AppendMessageResult | None = None
    # why a put was refused, e.g. "disk full: cannot allocate a new commit-log
    # file (4194304 bytes, 1048576 bytes free)"; bounded, safe for a remark
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.put_message_status == PutMessageStatus.PUT_OK


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    # the records found, in order: each piece one or more whole records lying
    # back to back (what one read returned, or a slice of it)
    pieces: list[bytes | memoryview] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False
    message_count: int = 0

    @property
    def buffers(self) -> list[memoryview]:
        """One view per record, cut from the pieces by each record's TOTALSIZE."""
        out: list[memoryview] = []
        for piece in self.pieces:
            view = memoryview(piece)
            at = 0
            while at < len(view):
                size = _TOTAL_SIZE.unpack_from(view, at)[0]
                if size <= 0 or at + size > len(view):
                    raise ValueError(f"no whole record at {at} of a {len(view)}-byte piece")
                out.append(view[at:at + size])
                at += size
        return out
