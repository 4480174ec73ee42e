"""Whether stored data is still "in memory": RocketMQ's accessMessageInMemoryMaxRatio rule.

RocketMQ takes the newest ``accessMessageInMemoryMaxRatio`` percent of the
machine's physical memory worth of commit log as resident in the page cache;
a record further back than that from the commit log's end is "in disk"
(DefaultMessageStore.checkInDiskByCommitOffset). Two decisions use it:

- a pull that reads cold data makes the master suggest a slave
  (``MessageStore.get_message``);
- a consumer group with no stored offset starts at 0 only while a queue's
  first message is not in disk (``broker/new_group_offset.py``).

Pure: memory, ratio and offsets in, a decision out. The machine's memory is
read once per process (``TOTAL_PHYSICAL_MEMORY_SIZE``), as RocketMQ's
StoreUtil does.
"""

from __future__ import annotations

import os

# What RocketMQ's StoreUtil assumes when the JVM does not say.
DEFAULT_PHYSICAL_MEMORY = 24 * 1024 * 1024 * 1024


def physical_memory() -> int:
    """Bytes of physical memory of this machine; RocketMQ's 24 GiB when the
    OS does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return DEFAULT_PHYSICAL_MEMORY
    return total if total > 0 else DEFAULT_PHYSICAL_MEMORY


# Read once, as RocketMQ's StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE.
TOTAL_PHYSICAL_MEMORY_SIZE = physical_memory()


def memory_budget(total_physical_memory: int, ratio_percent: int) -> int:
    """Bytes behind the commit log's end still taken as in memory: RocketMQ's
    ``(long) (TOTAL_PHYSICAL_MEMORY_SIZE * (accessMessageInMemoryMaxRatio / 100.0))``."""
    return int(total_physical_memory * (ratio_percent / 100.0))


def in_disk(commit_log_max_offset: int, commit_log_offset: int, budget: int) -> bool:
    """Whether the record at ``commit_log_offset`` is "in disk": more than
    ``budget`` bytes (``memory_budget``) lie between it and the commit log's end."""
    return commit_log_max_offset - commit_log_offset > budget
