"""The blocking facade over TLS (issue 18): a blocking Producer and PullConsumer
with use_tls / tls_ca_path send to and read from an enforcing broker; the same
PullConsumer without use_tls is told the server requires TLS."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from client.admin import MQAdmin
from client.blocking import (
    Message,
    MQBrokerError,
    MQClientError,
    Producer,
    PullConsumer,
    PullStatus,
    SendStatus,
)
from protocol.record import decode_records
from protocol.trio.tls import ENV_ENABLE
from tests.integration.cluster import Cluster
from tests.tls_certs import Certs, tls_certs_fixture  # noqa: F401 (the tls_certs fixture)
from tests.waits import routed, wait_until

TOPIC = "BlockingTlsTopic"


def enforcing(certs: Certs) -> dict[str, Any]:
    return {"tlsMode": "enforcing", "tls.server.certPath": certs.server_cert,
            "tls.server.keyPath": certs.server_key, "tls.server.trustCertPath": certs.ca}


def test_blocking_clients_use_tls(cluster: Cluster, tls_certs: Certs,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_ENABLE, raising=False)  # only the keywords decide
    ns = cluster.namesrv(**enforcing(tls_certs))
    # the broker registers with the name server over TLS
    broker = cluster.broker("broker-a", ns.addr, **enforcing(tls_certs), **{
        "tls.enable": "true", "tls.client.trustCertPath": tls_certs.ca})

    async def setup() -> None:
        async with MQAdmin(ns.addr, use_tls=True, tls_ca_path=tls_certs.ca) as admin:
            await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=1,
                                     write_queue_nums=1)
            await wait_until(routed(admin, TOPIC), 10, "topic routed")
    trio.run(setup)

    bodies = [b"blocking-tls-%d" % i for i in range(10)]
    with Producer("blocking-tls-producer", ns.addr, use_tls=True,
                  tls_ca_path=tls_certs.ca) as producer:
        for body in bodies:
            assert producer.send(Message(TOPIC, body)).send_status == SendStatus.SEND_OK

    with PullConsumer("blocking-tls-group", ns.addr, use_tls=True,
                      tls_ca_path=tls_certs.ca) as consumer:
        mqs = consumer.fetch_subscribe_message_queues(TOPIC)
        assert len(mqs) == 1
        result = consumer.pull(mqs[0], "*", 0, 32)
        assert result.pull_status == PullStatus.FOUND
        assert [m.body for m in result.msg_found_list] == bodies
        assert consumer.max_offset(mqs[0]) == len(bodies)
        # a range read on a connection of its own: TLS too
        with consumer.read_range_here(mqs[0], "*", 0, len(bodies), batch_size=4) as reader:
            records = [r for chunks in reader for chunk in chunks for body in chunk.bodies
                       for r in decode_records(body)]
        assert [m.body for m in records] == bodies

    with PullConsumer("blocking-plain-group", ns.addr) as plain:
        with pytest.raises((MQClientError, MQBrokerError), match="requires TLS"):
            plain.fetch_subscribe_message_queues(TOPIC)
    with pytest.raises(MQClientError, match="without use_tls"):
        PullConsumer("blocking-no-flag", ns.addr, tls_ca_path=tls_certs.ca)
    with pytest.raises(MQClientError, match="without use_tls"):
        Producer("blocking-no-flag", ns.addr, tls_ca_path=tls_certs.ca)
