"""ConsumeQueue: the index of one topic/queue into the commit log.

    +--------------------------+-------------+----------------+
    | commit-log offset (8)    | size (4)    | tag hash (8)   |   20 bytes per entry
    +--------------------------+-------------+----------------+

Entry n sits at byte n * 20 of the queue's log (files named by byte offset).

The queue lives in ``<root>/<topic>/<queueId>``: only a valid topic name
(protocol.names) and queue id make a path, and the directory must resolve
inside ``root``. Anything else raises InvalidQueueError before any file
system call.
"""

from __future__ import annotations

import bisect
import struct
from itertools import starmap
from pathlib import Path

from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.status import StoreError
from protocol.names import shown, topic_problem

CQ_STORE_UNIT_SIZE = 20
CQ_ENTRY = struct.Struct(">qiq")
MAX_QUEUE_ID = 2**31 - 1


class InvalidQueueError(StoreError):
    """A topic or queue id that cannot name a consume-queue directory."""


def queue_problem(topic: object, queue_id: object) -> str | None:
    """Why (topic, queue_id) cannot have a consume queue; None when it can."""
    problem = topic_problem(topic)
    if problem is not None:
        return problem
    if not isinstance(queue_id, int) or not 0 <= queue_id <= MAX_QUEUE_ID:
        return f"the queue id {shown(queue_id)} is out of range"
    return None


def queue_dir(root: Path, topic: str, queue_id: int) -> Path:
    """``root/topic/queueId``, checked; raises InvalidQueueError."""
    problem = queue_problem(topic, queue_id)
    if problem is not None:
        raise InvalidQueueError(problem)
    path = root / topic / str(queue_id)
    try:
        base, resolved = root.resolve(), path.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        raise InvalidQueueError(f"the queue directory of {shown(topic)} cannot be resolved") from exc
    if resolved == base or not resolved.is_relative_to(base):
        raise InvalidQueueError(f"the queue directory of {shown(topic)} is outside {root}")
    return path


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root: Path, file_size: int) -> None:
        if file_size % CQ_STORE_UNIT_SIZE:
            raise StoreError(f"consume-queue file size {file_size} is not a multiple of 20")
        self.store_dir = queue_dir(root, topic, queue_id)
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_queue = MappedFileQueue(self.store_dir, file_size, "consume-queue file")
        self.file_size = file_size
        self.min_logic_offset = 0  # byte offset of the first live entry
        self.max_physic_offset = 0  # end of the last indexed commit-log record

    # ---- offsets (in entries) -----------------------------------------------------

    @property
    def max_offset_in_queue(self) -> int:
        return self.mapped_file_queue.max_offset // CQ_STORE_UNIT_SIZE

    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def roll_next_file(self, index: int) -> int:
        """The first entry of the consume-queue file after the one holding entry ``index``."""
        per_file = self.file_size // CQ_STORE_UNIT_SIZE
        return index + per_file - index % per_file

    # ---- write ---------------------------------------------------------------------

    def put_entry(self, phys_offset: int, size: int, tags_code: int, cq_index: int) -> bool:
        """Write entry ``cq_index``; duplicates are ignored, gaps zero-filled."""
        mfq = self.mapped_file_queue
        expected = cq_index * CQ_STORE_UNIT_SIZE
        current = mfq.max_offset
        if not mfq.files:
            current = expected - expected % self.file_size
            mfq.last_for_append(current)
            self.min_logic_offset = expected
        if expected < current:
            return False  # already indexed (replayed during recovery)
        while current < expected:  # a hole: keep entry n at byte n * 20
            mf = mfq.last_for_append()
            n = min(expected - current, mf.remaining)
            mf.append(bytes(n))
            current += n
        mf = mfq.last_for_append()
        mf.append(CQ_ENTRY.pack(phys_offset, size, tags_code))
        self.max_physic_offset = phys_offset + size
        return True

    def put_entries(self, entries: list[tuple[int, int, int]], first_index: int) -> None:
        """Write consecutive entries from ``first_index`` (one append when they fit)."""
        mfq = self.mapped_file_queue
        last = mfq.last()
        blob_size = len(entries) * CQ_STORE_UNIT_SIZE
        if (
            last is not None
            and mfq.max_offset == first_index * CQ_STORE_UNIT_SIZE
            and last.remaining >= blob_size
        ):
            last.append(b"".join(starmap(CQ_ENTRY.pack, entries)))
            self.max_physic_offset = entries[-1][0] + entries[-1][1]
            return
        for i, (phys, size, tag) in enumerate(entries):
            self.put_entry(phys, size, tag, first_index + i)

    def put_packed(self, packed: bytes | bytearray, first_index: int, end: int) -> bool:
        """``put_entries``' one-append case for entries already packed (20
        bytes each, from ``first_index``; ``end`` is where the last one's
        record ends): True when written, False (nothing written) when they do
        not follow the queue's last entry in its last file, with room; the
        caller then goes through ``put_entries``."""
        mfq = self.mapped_file_queue
        last = mfq.last()
        if last is None or mfq.max_offset != first_index * CQ_STORE_UNIT_SIZE \
                or last.remaining < len(packed):
            return False
        last.append(packed)
        self.max_physic_offset = end
        return True

    # ---- read ----------------------------------------------------------------------

    def get_entries(self, index: int, max_count: int) -> list[tuple[int, int, int]]:
        """Up to ``max_count`` entries from ``index``, within one file."""
        return list(CQ_ENTRY.iter_unpack(self.get_entry_bytes(index, max_count)))

    def get_entry_bytes(self, index: int, max_count: int) -> bytes:
        """``get_entries``' entries as they lie in the file (20 bytes each)."""
        offset = index * CQ_STORE_UNIT_SIZE
        mf = self.mapped_file_queue.find_by_offset(offset)
        if mf is None or not mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
            mf = self._file_holding(offset)  # the files have a gap: look it up
            if mf is None:
                return b""
        pos = offset - mf.file_from_offset
        n = min(max_count, (mf.wrote_position - pos) // CQ_STORE_UNIT_SIZE)
        if n <= 0:
            return b""
        return mf.read(pos, n * CQ_STORE_UNIT_SIZE)

    def _file_holding(self, offset: int) -> MappedFile | None:
        files = self.mapped_file_queue.files
        i = bisect.bisect_right([mf.file_from_offset for mf in files], offset) - 1
        if i >= 0 and offset < files[i].file_from_offset + self.file_size:
            return files[i]
        return None

    def get_entry(self, index: int) -> tuple[int, int, int] | None:
        entries = self.get_entries(index, 1)
        return entries[0] if entries else None

    # ---- recovery -------------------------------------------------------------------

    def load(self) -> None:
        self.mapped_file_queue.load()

    def recover(self) -> None:
        """Find the last valid entry in the last files (entries with size > 0)."""
        files = self.mapped_file_queue.files
        if not files:
            return
        end = files[0].file_from_offset
        for mf in files[max(0, len(files) - 3):]:
            end = mf.file_from_offset
            data = mf.read(0, mf.file_size)
            pos = 0
            last_valid = 0
            for phys, size, _tag in CQ_ENTRY.iter_unpack(data):
                pos += CQ_STORE_UNIT_SIZE
                if phys >= 0 and size > 0:
                    last_valid = pos
                    self.max_physic_offset = phys + size
                elif phys == 0 and size == 0:
                    # a zero entry: end of data, unless a filled hole follows
                    continue
                else:
                    break
            end = mf.file_from_offset + last_valid
            if last_valid < mf.file_size:
                break
        self.mapped_file_queue.truncate_dirty_files(end)
        self._correct_min_offset()

    def _correct_min_offset(self) -> None:
        files = self.mapped_file_queue.files
        self.min_logic_offset = files[0].file_from_offset if files else 0
        # skip zero-filled holes at the head
        while self.min_logic_offset < self.mapped_file_queue.max_offset:
            entry = self.get_entry(self.min_logic_offset // CQ_STORE_UNIT_SIZE)
            if entry is None or entry[1] > 0:
                break
            self.min_logic_offset += CQ_STORE_UNIT_SIZE

    def truncate_dirty_logic_files(self, phys_offset: int) -> None:
        """Drop entries pointing at or past ``phys_offset`` (the commit-log end)."""
        mfq = self.mapped_file_queue
        while mfq.files:
            last = mfq.files[-1]
            if last.wrote_position == 0:
                last.destroy()
                mfq.files.pop()
                continue
            cut = None
            for i in range(last.wrote_position // CQ_STORE_UNIT_SIZE - 1, -1, -1):
                phys, size, _ = CQ_ENTRY.unpack_from(last.mm, i * CQ_STORE_UNIT_SIZE)
                if size > 0 and phys + size <= phys_offset:
                    cut = (i + 1) * CQ_STORE_UNIT_SIZE
                    self.max_physic_offset = phys + size
                    break
            if cut is None:
                last.destroy()
                mfq.files.pop()
                continue
            if cut < last.wrote_position:
                last.truncate(cut)
            break
        if not mfq.files:
            self.max_physic_offset = 0
        self._correct_min_offset()

    def delete_expired(self, min_phys_offset: int) -> int:
        """Drop files whose entries all point below the commit log's min offset,
        then move the min offset to the first entry still in the log."""
        files = self.mapped_file_queue.files
        deleted = 0
        while len(files) > 1:
            mf = files[0]
            phys, size, _ = CQ_ENTRY.unpack_from(mf.mm, mf.file_size - CQ_STORE_UNIT_SIZE)
            if phys + size > min_phys_offset:
                break
            mf.destroy()
            files.pop(0)
            deleted += 1
        if files:
            self.min_logic_offset = max(self.min_logic_offset, files[0].file_from_offset)
            max_off = self.mapped_file_queue.max_offset
            while self.min_logic_offset < max_off:
                entry = self.get_entry(self.min_logic_offset // CQ_STORE_UNIT_SIZE)
                if entry is None or (entry[1] > 0 and entry[0] >= min_phys_offset):
                    break
                self.min_logic_offset += CQ_STORE_UNIT_SIZE
        return deleted

    def flush(self) -> bool:
        return self.mapped_file_queue.flush()

    def destroy(self) -> None:
        self.mapped_file_queue.delete_all()

    def close(self) -> None:
        self.mapped_file_queue.close()
