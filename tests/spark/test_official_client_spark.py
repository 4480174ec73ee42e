"""Messages sent by the official RocketMQ C++ client (PyPI ``rocketmq``), read
by the Spark source: every field as the C++ producer set it, the msg id it
reported. (The other way round, our producer to the C++ push consumer, is in
tests/integration/test_official_client.py.) Skipped where the wheel's library
cannot load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.official_client import cpp_send, load_error, message
from tests.spark.conftest import Pair

_why = load_error()
if _why is not None:
    pytest.skip(f"the official RocketMQ client (PyPI rocketmq) cannot load here: {_why}",
                allow_module_level=True)


def test_spark_reads_what_the_cpp_producer_sent(spark: Any, pair: Pair, tmp_path: Path) -> None:
    topic = "SparkCppTopic"
    pair.create_topic(topic)
    n = 120
    sent = {
        str(i): message(topic, f"cpp-{i}-" + "ü" * (i % 4) + "y" * (i % 100),
                        tags=("TagA", "TagB")[i % 2], keys=f"k-{i} order-{i % 5}",
                        props={"idx": str(i), "note": "ü-€ ok"})
        for i in range(n)
    }
    answers = cpp_send(pair.ns.addr, [{"op": "sync", "message": m} for m in sent.values()],
                       tmp_path / "cpp")
    assert all(a["status"] == "OK" for a in answers)
    ids = {str(i): a["msg_id"] for i, a in enumerate(answers)}

    rows = (spark.read.format("rocketmq").option("namesrv", pair.ns.addr)
            .option("topic", topic).load().collect())
    got = {r.properties["idx"]: r for r in rows}
    assert len(rows) == n and set(got) == set(sent)
    assert {r.brokerName for r in rows} == {b.name for b in pair.brokers}
    for idx, r in got.items():
        want = sent[idx]
        assert r.topic == topic
        assert r.body == want["body"].encode()
        assert r.tags == want["tags"] and r.keys == want["keys"]
        assert r.properties["note"] == "ü-€ ok"
        assert r.msgId == ids[idx] == r.properties["UNIQ_KEY"]
    assert len({(r.brokerName, r.queueId, r.queueOffset) for r in rows}) == n

    tagged = (spark.read.format("rocketmq").option("namesrv", pair.ns.addr)
              .option("topic", topic).option("subExpression", "TagA").load().collect())
    assert sorted(r.properties["idx"] for r in tagged) == sorted(
        k for k, m in sent.items() if m["tags"] == "TagA")
