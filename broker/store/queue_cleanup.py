"""Which consume queues mqadmin's ``cleanExpiredCQ`` and ``cleanUnusedTopic`` remove (pure).

RocketMQ's ``DefaultMessageStore.cleanExpiredConsumerQueue`` destroys every queue
(of a non-system topic) whose last entry points below the commit log's min
offset, and ``cleanUnusedTopic`` every queue of a topic without a topic config.
A destroyed queue forgets its offsets: when its topic still exists, the next
message is stored at offset 0 again and a consumer whose committed offset is
past it skips what comes (its offset is "corrected" to the new max).

Here a queue goes only when nothing refers to its topic any more (``Keep``
says what does, in the order it is asked):

- ``cleanExpiredCQ``: a queue with at least one entry, every one pointing
  below the commit log's min offset (its messages are gone), of a topic kept
  by no rule. A queue of an existing topic stays: the store's periodic
  clean-up already dropped its expired files but the last, which holds where
  the next message goes.
- ``cleanUnusedTopic``: every queue of a topic kept by no rule, whether its
  messages are still in the commit log or not (they stay there until the log
  file expires, readable by ``queryMsgById``; no consumer reads them through a
  topic that does not exist).

``expired_queues`` and ``unused_topics`` decide; QueryService
(broker/service/queries.py) builds the ``keep`` rule from the broker's tables
and has the store carry the plan out: ``detach_consume_queues`` on the event
loop, ``DetachedQueues.delete_files`` in a worker thread.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# how many kept topics a report names (the rest are counted)
REPORT_MAX_NAMES = 1000


class Keep(enum.Enum):
    """Why a topic's queues stay, in the order the broker asks."""

    CONFIGURED = "the topic exists"
    SYSTEM = "a system topic"
    OFFSETS = "a consumer group holds offsets on it"
    SUBSCRIBED = "an online consumer group subscribes to it"
    GROUP = "the retry or dead-letter topic of an existing subscription group"


KeepRule = Callable[[str], Keep | None]


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """What the decision needs of one consume queue."""

    topic: str
    queue_id: int
    end: int  # commit-log offset where its last indexed record ends (0: none ever)


@dataclass(slots=True)
class CleanPlan:
    """The queues to remove, and the topics that would have lost queues but are
    kept (a reason other than CONFIGURED: an existing topic is not news)."""

    remove: list[tuple[str, int]] = field(default_factory=list)
    kept: dict[str, Keep] = field(default_factory=dict)

    def by_topic(self) -> dict[str, set[int] | None]:
        """The queues to remove as the store takes them: topic -> queue ids."""
        chosen: dict[str, set[int] | None] = {}
        for topic, queue_id in self.remove:
            ids = chosen.setdefault(topic, set())
            assert ids is not None
            ids.add(queue_id)
        return chosen

    def report(self) -> dict[str, object]:
        """The wire answer: removed queues, kept topics and why (at most
        REPORT_MAX_NAMES of each, the rest counted)."""
        kept = sorted(self.kept.items())
        removed = sorted(self.remove)[:REPORT_MAX_NAMES]
        return {
            "removed": [{"topic": t, "queueId": q} for t, q in removed],
            "removedCount": len(self.remove),
            "kept": [{"topic": t, "reason": k.value} for t, k in kept[:REPORT_MAX_NAMES]],
            "keptCount": len(kept),
        }


def is_expired(q: QueueFacts, min_phy_offset: int) -> bool:
    """Every message the queue points to is gone from the commit log (the
    periodic clean-up already moved its min offset to its max). A queue that
    never had an entry is not (RocketMQ: "maybe created just now")."""
    return 0 < q.end <= min_phy_offset


def expired_queues(queues: Iterable[QueueFacts], min_phy_offset: int, keep: KeepRule) -> CleanPlan:
    """cleanExpiredCQ: the expired queues of topics no rule keeps."""
    plan = CleanPlan()
    for q in queues:
        if not is_expired(q, min_phy_offset):
            continue
        reason = keep(q.topic)
        if reason is None:
            plan.remove.append((q.topic, q.queue_id))
        elif reason is not Keep.CONFIGURED:
            plan.kept[q.topic] = reason
    return plan


def unused_topics(queues: Iterable[QueueFacts], keep: KeepRule) -> CleanPlan:
    """cleanUnusedTopic: every queue of the topics no rule keeps."""
    plan = CleanPlan()
    reasons: dict[str, Keep | None] = {}
    for q in queues:
        if q.topic not in reasons:
            reasons[q.topic] = keep(q.topic)
        reason = reasons[q.topic]
        if reason is None:
            plan.remove.append((q.topic, q.queue_id))
        elif reason is not Keep.CONFIGURED:
            plan.kept[q.topic] = reason
    return plan


def keep_rule(configured: Callable[[str], bool], system: Callable[[str], bool],
              with_offsets: Callable[[str], bool], subscribed: Callable[[str], bool],
              group_topic: Callable[[str], bool]) -> KeepRule:
    """A KeepRule asking each test in Keep's order."""
    tests = ((Keep.CONFIGURED, configured), (Keep.SYSTEM, system), (Keep.OFFSETS, with_offsets),
             (Keep.SUBSCRIBED, subscribed), (Keep.GROUP, group_topic))

    def rule(topic: str) -> Keep | None:
        for reason, test in tests:
            if test(topic):
                return reason
        return None

    return rule
