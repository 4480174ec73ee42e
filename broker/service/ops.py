"""OpsService: what operators read of a broker's traffic and clients, in
domain terms (VIEW_BROKER_STATS_DATA, QUERY_TOPIC_CONSUME_BY_WHO and
GET_PRODUCER_CONNECTION_LIST without the remoting: broker/ops_processor.py
is their adapter; GET/UPDATE_BROKER_CONFIG go through ConfigService).

- ``stats``: the minute, hour and day windows of one statistic for one key
  (broker/stats.py): a topic, ``topic@group`` or the broker's name; ``None``
  when the broker keeps no such item.
- ``groups_of_topic``: the groups that consume a topic here, those with a
  committed offset of it and, while the topic exists, those with an online
  member subscribed to it (what consumerProgress reports on, narrowed to the
  topic); sorted.
- ``producers``: the online members of a producer group, each with its
  channel (the transport's handle, which alone knows the address, language
  and version it reports), sorted by client id; ``None`` when none is online.

Nothing here changes state or awaits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from broker.service.types import GroupMembers
from broker.stats import StatsSnapshot


class StatsSource(Protocol):
    """broker/stats.py BrokerStats's part the service reads."""

    def stats(self, name: str, key: str) -> dict[str, StatsSnapshot] | None: ...


class OffsetGroups(Protocol):
    """ConsumerOffsetManager's part the service reads."""

    def groups_of_topic(self, topic: str) -> set[str]: ...


class TopicTable(Protocol):
    def get(self, topic: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class Member:
    """An online member of a group: its client id and its transport's channel."""

    client_id: str
    channel: Any


class OpsService:
    def __init__(self, *, stats: StatsSource, offsets: OffsetGroups, topics: TopicTable,
                 consumers: GroupMembers, producers: GroupMembers) -> None:
        self._stats = stats
        self.offsets = offsets
        self.topics = topics
        self.consumers = consumers
        self._producers = producers

    def stats(self, name: str, key: str) -> dict[str, StatsSnapshot] | None:
        """The windows ("statsMinute", "statsHour", "statsDay") of statistic
        ``name`` for ``key``, or None when there is no such item."""
        return self._stats.stats(name, key)

    def groups_of_topic(self, topic: str) -> list[str]:
        """The groups consuming ``topic`` here (see the module's doc), sorted."""
        groups = set(self.offsets.groups_of_topic(topic))
        if self.topics.get(topic) is not None:
            groups.update(g for g, info in self.consumers.groups.items()
                          if topic in info.subscriptions)
        return sorted(groups)

    def producers(self, group: str) -> list[Member] | None:
        """The online members of producer group ``group`` by client id, or None."""
        info = self._producers.groups.get(group)
        if info is None or not info.clients:
            return None
        return [Member(cid, ch.conn) for cid, ch in sorted(info.clients.items())]


__all__ = ["Member", "OpsService"]
