"""Queue allocation strategies for clustering consumers (RocketMQ's AllocateMessageQueue*).

Pure functions: given the same sorted consumer ids and queues, every member of
a group computes the same assignment, so each queue has exactly one owner.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

from protocol.message import MessageQueue

AllocateStrategy = Callable[[str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]


def _check(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
    if not current_cid:
        raise ValueError("current consumer id is empty")
    return current_cid in cid_all and bool(mq_all)


def allocate_averagely(current_cid: str, mq_all: Sequence[MessageQueue],
                       cid_all: Sequence[str]) -> list[MessageQueue]:
    """Contiguous blocks: with 8 queues and 3 consumers, 3 + 3 + 2."""
    if not _check(current_cid, mq_all, cid_all):
        return []
    mqs, cids = sorted(mq_all), sorted(cid_all)
    index, n, m = cids.index(current_cid), len(mqs), len(cids)
    mod = n % m
    if n <= m:
        size = 1
    else:
        size = n // m + 1 if mod > 0 and index < mod else n // m
    start = index * size if mod > 0 and index < mod else index * size + mod
    rng = min(size, n - start)
    return [mqs[(start + i) % n] for i in range(max(rng, 0))]


def allocate_averagely_by_circle(current_cid: str, mq_all: Sequence[MessageQueue],
                                 cid_all: Sequence[str]) -> list[MessageQueue]:
    """Round robin: queue i goes to consumer i mod m."""
    if not _check(current_cid, mq_all, cid_all):
        return []
    mqs, cids = sorted(mq_all), sorted(cid_all)
    index = cids.index(current_cid)
    return [mq for i, mq in enumerate(mqs) if i % len(cids) == index]


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:8], "big")


class AllocateByConsistentHash:
    """Consistent hashing with virtual nodes: a member leaving moves only its queues."""

    def __init__(self, virtual_node_count: int = 10) -> None:
        if virtual_node_count < 1:
            raise ValueError("virtual_node_count must be >= 1")
        self.virtual_node_count = virtual_node_count

    def __call__(self, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(current_cid, mq_all, cid_all):
            return []
        ring = sorted((_hash(f"{cid}-{i}"), cid) for cid in cid_all
                      for i in range(self.virtual_node_count))
        keys = [h for h, _ in ring]
        out = []
        for mq in sorted(mq_all):
            pos = bisect.bisect_left(keys, _hash(str(mq))) % len(ring)
            if ring[pos][1] == current_cid:
                out.append(mq)
        return out


allocate_by_consistent_hash = AllocateByConsistentHash()
