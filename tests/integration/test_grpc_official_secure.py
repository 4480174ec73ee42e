"""TLS, plain ACL and namespaces on the gRPC port, with RocketMQ's official Python client 5.x
(.venv-rmq5; skipped, saying why, without it) against one real broker (tlsMode=enforcing,
aclEnable, the remoting ports' certificates):

- signed credentials over TLS: sends and receives work;
- a wrong secret and an anonymous client are refused (their start-up fails);
- two apps with the same topic and group names in namespaces app1 and app2 each get
  their own messages, and see the names without the namespace;
- a QueryRoute whose x-mq-date-time is 20 minutes old is refused UNAUTHORIZED, the same
  call signed now is answered;
- a plain (non-TLS) connection is closed without an HTTP/2 answer;
- a new secret in plain_acl.yml is in force for gRPC calls without a restart.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
import trio

from broker.grpc.access import date_time_text
from tests.integration.cluster import Cluster, free_port
from tests.integration.test_grpc_official_client import RMQ5
from tests.tls_certs import Certs, tls_certs_fixture  # noqa: F401 (the tls_certs fixture)
from tests.waits import wait_until

SCRIPT = Path(__file__).with_name("rmq5_secure.py")
pytestmark = pytest.mark.skipif(
    RMQ5 is None, reason="RocketMQ's official Python client 5.x is not installed: `make rmq5` "
    "makes .venv-rmq5 with it (needs PyPI), or set RMQ5_PYTHON to a Python that has it")

ACL = """
accounts:
  - accessKey: appAccess1
    secretKey: appSecret1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""
COUNT = 4
UNAUTHORIZED = 40100


async def run_client(certs: Certs, *args: str) -> dict[str, object]:
    assert RMQ5 is not None
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": certs.ca}
    done = await trio.run_process([RMQ5, str(SCRIPT), *args], capture_stdout=True,
                                  capture_stderr=True, env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result: dict[str, object] = json.loads(done.stdout)
    return result


async def test_tls_acl_and_namespaces(cluster: Cluster, tmp_path: Path,
                                      tls_certs: Certs) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv()
    grpc_port = free_port(1)
    broker = cluster.broker("grpc-secure", ns.addr, enableGrpc="true", grpcListenPort=grpc_port,
                   aclEnable="true", aclPlainFile=acl, aclReloadInterval=200,
                   tlsMode="enforcing",
                   **{"tls.server.certPath": tls_certs.server_cert,
                      "tls.server.keyPath": tls_certs.server_key})
    endpoint = f"127.0.0.1:{grpc_port}"
    signed = ("--ak", "appAccess1", "--sk", "appSecret1", "--tls")
    results: dict[str, dict[str, object]] = {}

    async def one(name: str, *args: str) -> None:
        results[name] = await run_client(tls_certs, *args)

    now = int(time.time() * 1000)
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for app in ("app1", "app2"):
                nursery.start_soon(one, app, "roundtrip", endpoint, "SharedTopic", "SharedGroup",
                                   str(COUNT), *signed, "--namespace", app, "--label", app)
            nursery.start_soon(one, "wrong", "roundtrip", endpoint, "SharedTopic", "G", "1",
                               "--ak", "appAccess1", "--sk", "notTheSecret", "--tls")
            nursery.start_soon(one, "anonymous", "roundtrip", endpoint, "SharedTopic", "G", "1",
                               "--tls")
            nursery.start_soon(one, "stale", "raw", endpoint, "SharedTopic", "G", "0", *signed,
                               "--date-time", date_time_text(now - 20 * 60_000))
            nursery.start_soon(one, "fresh", "raw", endpoint, "SharedTopic", "G", "0", *signed,
                               "--date-time", date_time_text(now))

    for app in ("app1", "app2"):
        r = results[app]
        assert r["error"] is None, r
        assert r["sent"] == [f"{app}-{i}" for i in range(COUNT)]
        received = r["received"]
        assert isinstance(received, list)
        # only its own app's messages, under the name it gave
        assert sorted(m["body"] for m in received) == r["sent"], r
        assert {m["topic"] for m in received} == {"SharedTopic"}
    for refused in ("wrong", "anonymous"):
        r = results[refused]
        assert r["error"] is not None and not r["sent"], r
    # the client only says its route was not fetched: the broker's log says why
    refusals = [line for line in broker.log_text().splitlines()
                if "gRPC call refused by ACL" in line]
    assert any("access_key=appAccess1" in line and "reason=signature" in line
               for line in refusals), refusals
    assert any("access_key=None" in line and "reason=no_access_key" in line
               for line in refusals), refusals
    assert results["stale"]["code"] == UNAUTHORIZED, results["stale"]
    assert "stale" in str(results["stale"]["message"])
    assert results["fresh"]["code"] == 20000 and results["fresh"]["queues"], results["fresh"]

    # a plain client of the enforcing port: closed at once, no HTTP/2 answer
    def plain_attempt() -> bytes:
        with socket.create_connection(("127.0.0.1", grpc_port), timeout=10) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            try:
                return s.recv(100)
            except ConnectionResetError:  # closed with the preface unread
                return b""

    assert await trio.to_thread.run_sync(plain_attempt) == b""

    # the accounts file changed (a new secret): the gRPC port follows it without a restart
    acl.write_text(ACL.replace("appSecret1", "appSecret2"))

    async def old_secret_refused() -> bool:
        answer = await run_client(tls_certs, "raw", endpoint, "SharedTopic", "G", "0", *signed,
                                  "--date-time", date_time_text(int(time.time() * 1000)))
        return answer.get("code") == UNAUTHORIZED

    await wait_until(old_secret_refused, 20, "the old secret refused after the reload")
