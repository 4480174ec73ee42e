"""OpsService with fakes: a statistic's windows, who consumes a topic (committed
offsets, and online subscriptions while the topic exists), a producer group's
members."""

from __future__ import annotations

from broker.client_manager import ClientGroups
from broker.service.ops import Member, OpsService
from broker.stats import StatsSnapshot
from protocol.route import TopicConfig

T = "OpsTopic"


class Stats:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def stats(self, name: str, key: str) -> dict[str, StatsSnapshot] | None:
        self.asked.append((name, key))
        return {"statsMinute": StatsSnapshot(sum=3)} if key == T else None


class OffsetGroups:
    def __init__(self, table: dict[str, set[str]]) -> None:
        self.table = table

    def groups_of_topic(self, topic: str) -> set[str]:
        return set(self.table.get(topic, set()))


class Topics:
    def __init__(self, *names: str) -> None:
        self.table = {n: TopicConfig(n) for n in names}

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)


def subscribed(groups: ClientGroups, group: str, cid: str, *topics: str) -> None:
    groups.register(group, cid, object(), 0.0, {"subscriptionDataSet": [
        {"topic": t, "subString": "*"} for t in topics]})


def service(topics: Topics, offsets: dict[str, set[str]] | None = None,
            consumers: ClientGroups | None = None,
            producers: ClientGroups | None = None) -> OpsService:
    return OpsService(stats=Stats(), offsets=OffsetGroups(offsets or {}), topics=topics,
                      consumers=consumers or ClientGroups("consumer"),
                      producers=producers or ClientGroups("producer"))


def test_stats_are_the_source_s() -> None:
    svc = service(Topics(T))
    assert svc.stats("TOPIC_PUT_NUMS", T) == {"statsMinute": StatsSnapshot(sum=3)}
    assert svc.stats("TOPIC_PUT_NUMS", "other") is None


def test_groups_of_a_topic() -> None:
    consumers = ClientGroups("consumer")
    subscribed(consumers, "online", "c1", T, "Else")
    subscribed(consumers, "elsewhere", "c2", "Else")
    svc = service(Topics(T, "Else"), {T: {"committed", "online"}}, consumers)
    assert svc.groups_of_topic(T) == ["committed", "online"]
    assert svc.groups_of_topic("Else") == ["elsewhere", "online"]
    # a topic this broker does not have: only the committed offsets count
    gone = service(Topics(), {T: {"committed"}}, consumers)
    assert gone.groups_of_topic(T) == ["committed"]
    assert gone.groups_of_topic("Else") == []


def test_producers_by_client_id() -> None:
    producers = ClientGroups("producer")
    a, b = object(), object()
    producers.register("pg", "b@2", b, 0.0)
    producers.register("pg", "a@1", a, 0.0)
    svc = service(Topics(), producers=producers)
    assert svc.producers("pg") == [Member("a@1", a), Member("b@2", b)]
    assert svc.producers("nobody") is None
    producers.unregister("pg", "a@1")
    producers.unregister("pg", "b@2")
    assert svc.producers("pg") is None
