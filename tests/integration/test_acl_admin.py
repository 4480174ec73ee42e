"""Issue 18: ACL administration against live daemons. mqadmin's updateAclConfig,
deleteAccessConfig, updateGlobalWhiteAddr and clusterAclConfigVersion (signed with
--access-key/--secret-key or ROCKETMQ_ACCESS_KEY/ROCKETMQ_SECRET_KEY) change the
broker's plain_acl.yml and take effect at once; refusals are counted in /metrics; a
master's file reaches its slave."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
import trio
import yaml
from prometheus_client.parser import text_string_to_metric_families

from acl.plain import SIGNATURE_REFUSED, parse_plain_acl
from client import AclCredentials, Message, Producer
from client.admin import MQAdmin
from tests.integration.cluster import BIN, Cluster, free_port
from tests.waits import routed, wait_until

TOPIC = "AclAdminTopic"
ADMIN = AclCredentials("rocketmq2", "12345678")
NEW = AclCredentials("newuser1", "newsecret1")
# a reload interval far longer than the test: every change must be in force at once
NO_RELOAD = 600_000


def acl_text(white: str = "10.254.254.254") -> str:
    return (f"globalWhiteRemoteAddresses:\n  - {white}\n"
            "accounts:\n  - accessKey: rocketmq2\n    secretKey: '12345678'\n    admin: true\n")


def run_tool(tool: str, *args: str, cred: AclCredentials | None = ADMIN,
             env_creds: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")}
    opts: list[str] = []
    if cred is not None and env_creds:
        env.update(ROCKETMQ_ACCESS_KEY=cred.access_key, ROCKETMQ_SECRET_KEY=cred.secret_key)
    elif cred is not None:
        opts = ["--access-key", cred.access_key, "--secret-key", cred.secret_key]
    return subprocess.run([str(BIN / tool), *opts, *args], capture_output=True,
                          text=True, timeout=60, env=env)


async def mqadmin(*args: str, cred: AclCredentials | None = ADMIN, env_creds: bool = False,
                  ok: bool = True, tool: str = "mqadmin") -> str:
    out = await trio.to_thread.run_sync(
        lambda: run_tool(tool, *args, cred=cred, env_creds=env_creds))
    if ok:
        assert out.returncode == 0, out.stderr
        return out.stdout
    assert out.returncode != 0, out.stdout
    return out.stderr


async def send(n: str, cred: AclCredentials | None) -> None:
    async with Producer("acl_admin_producer", n, credentials=cred,
                        retry_times_when_send_failed=0) as p:
        await p.send(Message(TOPIC, b"x"))


async def refused(n: str, cred: AclCredentials | None) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - the remark is checked
        await send(n, cred)
    return str(info.value)


def versions(out: str, addr: str) -> int:
    """The AclConfigVersionNum clusterAclConfigVersion prints for ``addr``."""
    m = re.search(rf"{re.escape(addr)}\s+(\d+)\s", out)
    assert m is not None, out
    return int(m.group(1))


def scrape_refusals(port: int) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "rocketmq_acl_refusals_total":
                out[(s.labels["code"], s.labels["reason"])] = s.value
    return out


async def test_acl_admin_commands(cluster: Cluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(acl_text())
    ns = cluster.namesrv()
    metrics_port = free_port(1)
    broker = cluster.broker("broker-acladm", ns.addr, aclEnable="true", aclPlainFile=acl,
                            aclReloadInterval=NO_RELOAD, metricsPort=metrics_port)
    n, b = ns.addr, broker.addr
    async with MQAdmin(n, credentials=ADMIN) as admin:
        await admin.create_topic(TOPIC, broker_addr=b, read_queue_nums=1, write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), 10, "routed")
        v0 = (await admin.acl_config_version(b)).counter

    assert SIGNATURE_REFUSED in await refused(n, NEW)
    # create an account (credentials from the environment): it sends at once
    out = await mqadmin("updateAclConfig", "-n", n, "-b", b, "-a", NEW.access_key,
                        "-s", NEW.secret_key, "-i", "DENY", "-u", "SUB", "-t", f"{TOPIC}=PUB",
                        env_creds=True)
    assert f"create or update plain access config to {b} success." in out
    await send(n, NEW)
    # mqbench signs with its credentials too
    out = await mqadmin("producer", "-n", n, "-t", TOPIC, "-c", "10", "-s", "8", "-w", "2",
                        "--json", cred=NEW, tool="mqbench")
    assert json.loads(out.strip().splitlines()[-1])["count"] == 10, out
    err = await mqadmin("producer", "-n", n, "-t", TOPIC, "-c", "10", "-s", "8", "-w", "2",
                        cred=None, tool="mqbench", ok=False)
    assert "No accessKey is configured" in err, err
    out = await mqadmin("clusterAclConfigVersion", "-n", n, "-c", "DefaultCluster")
    assert "#AclConfigVersionNum" in out and "broker-acladm" in out
    v1 = versions(out, b)
    assert v1 == v0 + 1

    # the file on disk is RocketMQ's format and reparses
    text = acl.read_text()
    config = parse_plain_acl(text)
    assert set(config.accounts) == {ADMIN.access_key, NEW.access_key}
    assert yaml.safe_load(text)["dataVersion"][0]["counter"] == v1

    # a non-admin cannot administer; a bad update changes nothing
    err = await mqadmin("updateAclConfig", "-n", n, "-b", b, "-a", NEW.access_key,
                        "-m", "true", cred=NEW, ok=False)
    assert "admin" in err, err
    err = await mqadmin("updateAclConfig", "-n", n, "-b", b, "-a", "another1", "-s", "123",
                        ok=False)
    assert "secretKey" in err, err
    err = await mqadmin("updateAclConfig", "-n", n, "-b", b, "-a", "another1", "-s", "secret9",
                        "-t", "T1=WRITE", ok=False)
    assert "T1=WRITE" in err, err
    err = await mqadmin("clusterAclConfigVersion", "-n", n, "-b", b, cred=None, ok=False)
    assert "NO_PERMISSION" in err, err
    assert acl.read_text() == text

    # an update keeps the secret; a DENY on the topic applies at once
    await mqadmin("updateAclConfig", "-n", n, "-b", b, "-a", NEW.access_key,
                  "-t", f"{TOPIC}=DENY")
    assert "DENY" in await refused(n, NEW)

    # delete: refused at once
    out = await mqadmin("deleteAccessConfig", "-n", n, "-c", "DefaultCluster",
                        "-a", NEW.access_key)
    assert f"delete plain access config account from {b} success." in out
    assert SIGNATURE_REFUSED in await refused(n, NEW)
    err = await mqadmin("deleteAclConfig", "-n", n, "-b", b, "-a", NEW.access_key, ok=False)
    assert "no account" in err, err

    # global white addresses: unsigned clients from 127.0.0.1 pass, then not
    assert "accessKey" in await refused(n, None)
    out = await mqadmin("updateGlobalWhiteAddr", "-n", n, "-b", b, "-g", "127.0.0.1,10.1.*.*")
    assert f"update global white remote addresses to {b} success." in out
    await send(n, None)
    await mqadmin("updateGlobalWhiteAddr", "-n", n, "-b", b, "-g", "10.254.254.254")
    assert "accessKey" in await refused(n, None)

    async with MQAdmin(n, credentials=ADMIN) as admin:
        v_end = (await admin.acl_config_version(b)).counter
        body = await admin.acl_config(b)
    assert v_end == v1 + 4
    assert body["globalWhiteAddrs"] == ["10.254.254.254"]
    assert [c["accessKey"] for c in body["plainAccessConfigs"]] == [ADMIN.access_key]
    assert yaml.safe_load(acl.read_text())["globalWhiteRemoteAddresses"] == ["10.254.254.254"]

    # refusals counted, by request code and reason
    counts = await trio.to_thread.run_sync(scrape_refusals, metrics_port)
    assert counts.get(("50", "admin"), 0) == 1, counts
    assert counts.get(("52", "no_access_key"), 0) == 1, counts

    def sends(reason: str) -> float:  # SEND_MESSAGE or SEND_MESSAGE_V2, as the SDK sends
        return sum(v for (code, why), v in counts.items() if code in ("10", "310") and why == reason)
    assert sends("unknown_account") == 2, counts  # before creation and after deletion
    assert sends("permission") == 1, counts  # the DENY
    assert sends("no_access_key") >= 3, counts  # unsigned: mqbench, then two sends
    assert "request refused by ACL" in broker.log_text()


async def test_slave_follows_master_acl_file(cluster: Cluster, tmp_path: Path) -> None:
    master_acl = tmp_path / "master_acl.yml"
    slave_acl = tmp_path / "slave_acl.yml"
    # no white address: the slave signs its metadata sync and its HA hello with its
    # own account (brokerAccessKey, an admin of the master's file)
    master_acl.write_text(acl_text())
    slave_acl.write_text(acl_text(white="10.254.254.253"))
    ns = cluster.namesrv()
    common: dict[str, object] = {"aclEnable": "true", "aclReloadInterval": NO_RELOAD,
                                 "slaveSyncInterval": 300, "brokerName": "broker-acl-ha",
                                 "brokerAccessKey": ADMIN.access_key,
                                 "brokerSecretKey": ADMIN.secret_key}
    master = cluster.broker("broker-acl-m", ns.addr, aclPlainFile=master_acl, **common)
    cluster.broker("broker-acl-s", ns.addr, aclPlainFile=slave_acl, brokerId=1,
                   brokerRole="SLAVE", **common)

    def slave_doc() -> dict[str, object]:
        try:
            data = yaml.safe_load(slave_acl.read_text())
        except (OSError, yaml.YAMLError):
            return {}
        return data if isinstance(data, dict) else {}

    def master_counter() -> int:
        return int(yaml.safe_load(master_acl.read_text())["dataVersion"][0]["counter"])

    async def slave_has(access_key: str, present: bool) -> bool:
        d = slave_doc()
        keys = [a.get("accessKey") for a in d.get("accounts") or []]  # type: ignore[attr-defined]
        version = (d.get("dataVersion") or [{}])[0].get("counter")  # type: ignore[index]
        return (access_key in keys) == present and version == master_counter()

    await mqadmin("updateAclConfig", "-n", ns.addr, "-c", "DefaultCluster",
                  "-a", NEW.access_key, "-s", NEW.secret_key, "-i", "PUB")
    await wait_until(lambda: slave_has(NEW.access_key, True), 20, "the slave's file copied")
    assert parse_plain_acl(slave_acl.read_text()).accounts[NEW.access_key].secret_key == \
        NEW.secret_key
    assert slave_doc()["globalWhiteRemoteAddresses"] == ["10.254.254.254"]
    async def hello_accepted() -> bool:
        return "slave hello accepted" in master.log_text()

    await wait_until(hello_accepted, 20, "the slave's signed HA hello")  # replication signed too

    await mqadmin("deleteAccessConfig", "-n", ns.addr, "-b", master.addr, "-a", NEW.access_key)
    await wait_until(lambda: slave_has(NEW.access_key, False), 20, "the deletion copied")
    assert master_acl.read_text() == slave_acl.read_text()
