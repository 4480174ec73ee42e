"""The rocketmq source against a name server and a broker with tlsMode=enforcing
(issue 18): with useTls/tlsCaPath the driver's and the executors' consumers read
over TLS; without useTls the read fails with the server's "requires TLS"; a wrong
CA fails certificate verification; TLS paths without useTls are refused as options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from client import Message, Producer, SendStatus
from client.admin import MQAdmin
from protocol.trio.tls import ENV_ENABLE
from tests.integration.cluster import Cluster
from tests.tls_certs import Certs, tls_certs_fixture  # noqa: F401 (the tls_certs fixture)
from tests.waits import routed, wait_until

TOPIC = "SparkTlsTopic"


def enforcing(certs: Certs) -> dict[str, Any]:
    return {"tlsMode": "enforcing", "tls.server.certPath": certs.server_cert,
            "tls.server.keyPath": certs.server_key, "tls.server.trustCertPath": certs.ca}


def test_source_reads_over_tls(spark: Any, tmp_path: Path, tls_certs: Certs,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_ENABLE, raising=False)  # only the options decide
    cluster = Cluster(tmp_path)
    try:
        ns = cluster.namesrv(**enforcing(tls_certs))
        # the broker registers with the name server over TLS
        broker = cluster.broker("broker-sparktls", ns.addr, **enforcing(tls_certs),
                                **{"tls.enable": "true",
                                   "tls.client.trustCertPath": tls_certs.ca})
        bodies = sorted(b"tls-%d" % i for i in range(30))

        async def setup() -> None:
            async with MQAdmin(ns.addr, use_tls=True, tls_ca_path=tls_certs.ca) as admin:
                await admin.create_topic(TOPIC, broker_addr=broker.addr, read_queue_nums=2,
                                         write_queue_nums=2)
                await wait_until(routed(admin, TOPIC), 10, "routed")
            async with Producer("spark-tls-producer", ns.addr, use_tls=True,
                                tls_ca_path=tls_certs.ca) as p:
                for body in bodies:
                    assert (await p.send(Message(TOPIC, body))).send_status == SendStatus.SEND_OK
        trio.run(setup)

        def read(**opts: str) -> list[Any]:
            r = spark.read.format("rocketmq").option("namesrv", ns.addr).option("topic", TOPIC)
            for k, v in opts.items():
                r = r.option(k, v)
            return r.load().collect()  # type: ignore[no-any-return]

        rows = read(useTls="true", tlsCaPath=tls_certs.ca)
        assert len(rows) == len(bodies)
        assert sorted(r.body for r in rows) == bodies
        assert {r.queueId for r in rows} == {0, 1}  # both queues: two executor partitions
        with pytest.raises(Exception, match="requires TLS"):
            read()
        with pytest.raises(Exception, match="certificate verification failed"):
            read(useTls="true", tlsCaPath=tls_certs.wrong_ca)
        with pytest.raises(Exception, match="need useTls=true"):
            read(tlsCaPath=tls_certs.ca)
    finally:
        cluster.close()
