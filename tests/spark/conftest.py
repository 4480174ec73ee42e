"""One SparkSession for the whole test session, and a real broker pair."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from client.admin import MQAdmin
from tests.integration.cluster import Cluster, Daemon
from tests.integration.log_scan import LogWatch, report
from tests.waits import wait_until


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from client.spark import spark_session

    session = spark_session(
        "rocketmq-tests", "local[2]",
        **{"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
           "spark.sql.session.timeZone": "UTC", "spark.driver.memory": "1g"},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


class Pair:
    def __init__(self, cluster: Cluster, ns: Daemon, brokers: list[Daemon]) -> None:
        self.cluster = cluster
        self.ns = ns
        self.brokers = brokers

    def create_topic(self, topic: str, queues: int = 4, brokers: list[Daemon] | None = None) -> None:
        targets = brokers or self.brokers

        async def go() -> None:
            async with MQAdmin(self.ns.addr) as admin:
                for b in targets:
                    await admin.create_topic(topic, broker_addr=b.addr, read_queue_nums=queues,
                                             write_queue_nums=queues)

                async def routed() -> bool:
                    try:
                        route = await admin.topic_route(topic)
                    except Exception:
                        return False
                    return len(route.queue_datas) == len(targets)
                await wait_until(routed, 15, f"{topic} routed on every broker")
        trio.run(go)


@pytest.fixture(scope="session")
def pair_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root: Path = tmp_path_factory.mktemp("spark-cluster")
    cluster = Cluster(root)
    try:
        ns = cluster.namesrv()
        brokers = [cluster.broker(n, ns.addr, enablePropertyFilter="true")  # SQL92 reads
                   for n in ("broker-a", "broker-b")]
        yield Pair(cluster, ns, brokers)
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def pair_log_watch() -> LogWatch:
    return LogWatch()


@pytest.fixture
def pair(pair_cluster: Pair, pair_log_watch: LogWatch) -> Iterator[Pair]:
    """The session's broker pair; a test fails if a daemon logged a traceback during it."""
    names = {d.log_path: d.name for d in pair_cluster.cluster.daemons}
    pair_log_watch.new_tracebacks(names)  # what earlier tests logged was theirs
    yield pair_cluster
    names = {d.log_path: d.name for d in pair_cluster.cluster.daemons}
    found = pair_log_watch.new_tracebacks(names)
    if found:
        pytest.fail(report(found, names), pytrace=False)
