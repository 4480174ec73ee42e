"""TLS between real daemons (issue 18, test 6): enforcing refuses plain clients
with a clear error, permissive serves TLS and plain clients on one port, a wrong
CA fails with a clear message, need.client.auth refuses a client without a
certificate, a TLS broker registers with a TLS name server, and SYNC_MASTER
replication runs over TLS."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from client import Message, MQClientError, Producer, PullConsumer, SendStatus
from client.admin import MQAdmin, MQAdminError
from protocol.trio.tls import ENV_CA, ENV_ENABLE, REQUIRES_TLS
from tests.integration.cluster import Cluster
from tests.tls_certs import Certs, tls_certs_fixture  # noqa: F401 (the tls_certs fixture)
from tests.waits import routed, wait_until

TOPIC = "TlsTopic"


def server_keys(certs: Certs, mode: str, **extra: object) -> dict[str, object]:
    return {"tlsMode": mode, "tls.server.certPath": certs.server_cert,
            "tls.server.keyPath": certs.server_key, "tls.server.trustCertPath": certs.ca,
            **extra}


def broker_keys(certs: Certs, mode: str, **extra: object) -> dict[str, Any]:
    return {**server_keys(certs, mode), "tls.enable": "true",
            "tls.client.trustCertPath": certs.ca, **extra}


def secure_admin(ns: str, certs: Certs) -> MQAdmin:
    return MQAdmin(ns, use_tls=True, tls_ca_path=certs.ca)


async def create_topic(ns: str, broker: str, certs: Certs) -> None:
    async with secure_admin(ns, certs) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "topic routed")


async def test_enforcing_daemons_refuse_plain_clients_and_serve_tls_ones(
        cluster: Cluster, tls_certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = cluster.namesrv(**server_keys(tls_certs, "enforcing"))
    # the broker registers over TLS ("broker started" follows its first registration)
    broker = cluster.broker("broker-a", ns.addr, **broker_keys(tls_certs, "enforcing"))
    await create_topic(ns.addr, broker.addr, tls_certs)
    async with secure_admin(ns.addr, tls_certs) as admin:
        route = await admin.topic_route(TOPIC)
        assert route.broker_datas[0].broker_addrs == {0: broker.addr}

    # plain clients: told the server requires TLS
    for addr in (ns.addr, broker.addr):
        async with MQAdmin(addr) as plain:
            with pytest.raises(MQAdminError, match="requires TLS"):
                await plain.topic_route(TOPIC) if addr == ns.addr else \
                    await plain.broker_runtime_info(addr)
    # a wrong CA: certificate verification failed
    async with MQAdmin(ns.addr, use_tls=True, tls_ca_path=tls_certs.wrong_ca) as wrong:
        with pytest.raises(MQAdminError, match="certificate verification failed"):
            await wrong.topic_route(TOPIC)
    # the CLI: --tls --tls-ca, and the same clear errors
    bin_dir = Path(sys.executable).parent
    ok = subprocess.run([str(bin_dir / "mqadmin"), "--tls", "--tls-ca", tls_certs.ca,
                         "topicRoute", "-n", ns.addr, "-t", TOPIC],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and broker.addr in ok.stdout, ok.stderr
    bad = subprocess.run([str(bin_dir / "mqadmin"), "topicRoute", "-n", ns.addr, "-t", TOPIC],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "requires TLS" in bad.stdout + bad.stderr

    # producers over TLS (ROCKETMQ_TLS_* as RocketMQ's tls.enable system property)
    monkeypatch.setenv(ENV_ENABLE, "true")
    monkeypatch.setenv(ENV_CA, tls_certs.ca)
    async with Producer("tls-producer", ns.addr) as producer:
        for i in range(20):
            r = await producer.send(Message(TOPIC, f"m-{i}".encode()))
            assert r.send_status == SendStatus.SEND_OK
    assert REQUIRES_TLS  # the text the plain clients were given


async def test_permissive_serves_tls_and_plain_clients_on_one_port(
        cluster: Cluster, tls_certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = cluster.namesrv(**server_keys(tls_certs, "permissive"))
    broker = cluster.broker("broker-a", ns.addr, **server_keys(tls_certs, "permissive"))
    await create_topic(ns.addr, broker.addr, tls_certs)
    monkeypatch.delenv(ENV_ENABLE, raising=False)
    sent = []
    for use_tls in (False, True, False):
        ca = tls_certs.ca if use_tls else None
        async with Producer(f"permissive-{use_tls}", ns.addr, use_tls=use_tls,
                            tls_ca_path=ca) as producer:
            r = await producer.send(Message(TOPIC, f"tls={use_tls}".encode()))
            assert r.send_status == SendStatus.SEND_OK
            sent.append(r.queue_offset)
    assert sent == sorted(sent) and len(set(sent)) == 3
    for use_tls in (True, False):
        ca = tls_certs.ca if use_tls else None
        async with PullConsumer("permissive-group", ns.addr, use_tls=use_tls,
                                tls_ca_path=ca) as pc:
            mqs = await pc.fetch_subscribe_message_queues(TOPIC)
            result = await pc.pull(mqs[0], "*", 0, 32)
            assert [m.body for m in result.msg_found_list] == \
                [b"tls=False", b"tls=True", b"tls=False"]
    # the keywords are checked: a wrong CA fails clearly, a CA without use_tls is refused
    async with Producer("permissive-wrong-ca", ns.addr, use_tls=True,
                        tls_ca_path=tls_certs.wrong_ca,
                        retry_times_when_send_failed=0) as producer:
        with pytest.raises(MQClientError, match="certificate verification failed"):
            await producer.send(Message(TOPIC, b"never"))
    with pytest.raises(MQClientError, match="without use_tls"):
        Producer("permissive-no-flag", ns.addr, tls_ca_path=tls_certs.ca)
    async with MQAdmin(ns.addr) as plain, secure_admin(ns.addr, tls_certs) as secure:
        assert (await plain.topic_route(TOPIC)).broker_datas
        assert (await secure.topic_route(TOPIC)).broker_datas
        stats = await secure.broker_runtime_info(broker.addr)
        assert stats


async def test_need_client_auth_refuses_a_client_without_a_certificate(
        cluster: Cluster, tls_certs: Certs) -> None:
    ns = cluster.namesrv(**server_keys(tls_certs, "enforcing",
                                       **{"tls.server.need.client.auth": "true"}))
    async with secure_admin(ns.addr, tls_certs) as anonymous:
        with pytest.raises(MQAdminError, match="client certificate"):
            await anonymous.topic_route(TOPIC)
    async with MQAdmin(ns.addr, use_tls=True, tls_ca_path=tls_certs.ca,
                       tls_cert_path=tls_certs.client_cert,
                       tls_key_path=tls_certs.client_key) as admin:
        with pytest.raises(MQAdminError, match="TOPIC_NOT_EXIST|No topic route|not exist"):
            await admin.topic_route("NoSuchTopic")  # an answer: the connection works


async def test_sync_master_replicates_over_tls(
        cluster: Cluster, tls_certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = cluster.namesrv(**server_keys(tls_certs, "enforcing"))
    common = {"mapedFileSizeCommitLog": 256 * 1024, "mapedFileSizeConsumeQueue": 20 * 1000,
              "slaveSyncInterval": 300, **broker_keys(tls_certs, "enforcing")}
    master = cluster.broker("broker-a", ns.addr, brokerRole="SYNC_MASTER", **common)
    slave = cluster.broker("broker-a-s", ns.addr, brokerName="broker-a", brokerId=1,
                           brokerRole="SLAVE", **common)
    await create_topic(ns.addr, master.addr, tls_certs)
    monkeypatch.setenv(ENV_ENABLE, "true")
    monkeypatch.setenv(ENV_CA, tls_certs.ca)
    async with Producer("tls-ha-producer", ns.addr) as producer:
        async def replicated() -> bool:
            r = await producer.send(Message(TOPIC, b"probe"))
            return r.send_status == SendStatus.SEND_OK
        # SEND_OK from a SYNC_MASTER: the slave acknowledged it over the (TLS-only) HA port
        await wait_until(replicated, 30, "a slave acknowledging sends over TLS")
        for i in range(50):
            r = await producer.send(Message(TOPIC, f"ha-{i}".encode() * 10))
            assert r.send_status == SendStatus.SEND_OK, r
    async with secure_admin(ns.addr, tls_certs) as admin:
        m = await admin.broker_runtime_info(master.addr)
        slaves = m["ha"]["slaves"]
        assert len(slaves) == 1 and slaves[0]["ackedOffset"] > 0
        s = await admin.broker_runtime_info(slave.addr)
        assert s["brokerRole"] == "SLAVE" and s["ha"]["masterHaAddress"] is not None
    assert "TLS handshake failed" not in master.log_text()


def test_daemons_refuse_to_start_with_tls_settings_that_cannot_work(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    conf = tmp_path / "namesrv.properties"
    conf.write_text("listenPort=0\ntlsMode=enforcing\n")
    out = subprocess.run([str(bin_dir / "mqnamesrv"), "-c", str(conf), "--log-dir",
                          str(tmp_path / "logs")], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "tlsMode=enforcing needs tls.server.certPath" in out.stderr
    out = subprocess.run([str(bin_dir / "mqbroker"), "--tls-mode", "permissive",
                          "-o", "tls.server.certPath=/nonexistent/server.pem",
                          "-o", "tls.server.keyPath=/nonexistent/server.key",
                          "-o", f"storePathRootDir={tmp_path / 'store'}",
                          "--log-dir", str(tmp_path / "logs")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "tls.server.certPath: no such file: /nonexistent/server.pem" in out.stderr
