"""The operators' admin requests and mqadmin's tables against fake brokers and a fake
name server speaking the contract of issue 17 (the real ones: tests/integration/
test_admin_ops.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from click.testing import CliRunner

from client.admin import MQAdmin, MQAdminError, is_system_topic, parse_properties
from client.admin_cli import cli, format_key_values, format_table
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio import RemotingConnection
from tests.client.fakes import FakeCluster, ThreadedCluster

TOPIC = FakeCluster.TOPIC


def stats(minute_tps: float, day_sum: int, hour_sum: int = 0) -> dict[str, Any]:
    return {"statsMinute": {"sum": 0, "tps": minute_tps, "avgpt": 0.0},
            "statsHour": {"sum": hour_sum, "tps": 0.0, "avgpt": 0.0},
            "statsDay": {"sum": day_sum, "tps": 0.0, "avgpt": 0.0}}


def install_ops(cluster: FakeCluster) -> dict[str, Any]:
    """Operator requests on the fakes; returns the state tests steer and read."""
    state: dict[str, Any] = {
        "config": {b.addr: {"brokerName": b.name, "flushDiskType": "ASYNC_FLUSH",
                            "maxMessageSize": "4194304"} for b in cluster.brokers},
        "stats": {},  # (addr, statsName, statsKey) -> body
        "groups": {},  # (addr, topic) -> [group]
        "producers": {},  # (addr, group) -> [connection]
        "lag": {},  # (addr, group, topic) -> (brokerOffset, consumerOffset)
        "perm": [],
    }
    ns = cluster.namesrv
    ns.handlers.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, lambda conn, cmd: cmd.response(
        ResponseCode.SUCCESS, body=pack_body({"topicList": sorted(ns.routes)})))

    def cluster_info(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        body = {"brokerAddrTable": {b.name: {"cluster": b.cluster, "brokerName": b.name,
                                             "brokerAddrs": {"0": b.addr}} for b in cluster.brokers},
                "clusterAddrTable": {"DefaultCluster": [b.name for b in cluster.brokers]}}
        return cmd.response(ResponseCode.SUCCESS, body=pack_body(body))

    ns.handlers.register(RequestCode.GET_BROKER_CLUSTER_INFO, cluster_info)

    def perm(code: int, header: str) -> Any:
        def handle(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
            state["perm"].append((code, cmd.ext_fields["brokerName"]))
            return cmd.response(ResponseCode.SUCCESS, ext_fields={header: 3})
        return handle

    ns.handlers.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                         perm(RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount"))
    ns.handlers.register(RequestCode.ADD_WRITE_PERM_OF_BROKER,
                         perm(RequestCode.ADD_WRITE_PERM_OF_BROKER, "addTopicCount"))

    for b in cluster.brokers:
        addr = b.addr

        def get_config(conn: RemotingConnection, cmd: RemotingCommand, addr: str = addr
                       ) -> RemotingCommand:
            text = "".join(f"{k}={v}\n" for k, v in state["config"][addr].items())
            return cmd.response(ResponseCode.SUCCESS, body=text.encode())

        def update_config(conn: RemotingConnection, cmd: RemotingCommand, addr: str = addr
                          ) -> RemotingCommand:
            props = parse_properties((cmd.body or b"").decode())
            for key in props:
                if key == "brokerName":
                    return cmd.response(ResponseCode.SYSTEM_ERROR,
                                        f"the key {key} cannot change at run time")
            state["config"][addr].update(props)
            return cmd.response(ResponseCode.SUCCESS)

        def view_stats(conn: RemotingConnection, cmd: RemotingCommand, addr: str = addr
                       ) -> RemotingCommand:
            body = state["stats"].get((addr, cmd.ext_fields["statsName"], cmd.ext_fields["statsKey"]))
            if body is None:
                f = cmd.ext_fields
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    f"The stats <{f['statsName']}> <{f['statsKey']}> not exist")
            return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body))

        def consume_by_who(conn: RemotingConnection, cmd: RemotingCommand, addr: str = addr
                           ) -> RemotingCommand:
            groups = state["groups"].get((addr, cmd.ext_fields["topic"]), [])
            return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"groupList": groups}))

        def producers(conn: RemotingConnection, cmd: RemotingCommand, addr: str = addr
                      ) -> RemotingCommand:
            group = cmd.ext_fields["producerGroup"]
            conns = state["producers"].get((addr, group))
            if not conns:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
            return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"connectionSet": conns}))

        def consume_stats(conn: RemotingConnection, cmd: RemotingCommand, addr: str = addr,
                          name: str = b.name) -> RemotingCommand:
            group, topic = cmd.ext_fields["consumerGroup"], cmd.ext_fields.get("topic")
            rows = [{"topic": t, "brokerName": name, "queueId": 0, "brokerOffset": bo,
                     "consumerOffset": co, "lastTimestamp": 0}
                    for (a, g, t), (bo, co) in state["lag"].items()
                    if a == addr and g == group and (topic is None or t == topic)]
            # each broker pulled 1.25 messages/s for the group over the last minute
            return cmd.response(ResponseCode.SUCCESS,
                                body=pack_body({"offsetTable": rows, "consumeTps": 1.25}))

        def runtime(conn: RemotingConnection, cmd: RemotingCommand, name: str = b.name
                    ) -> RemotingCommand:
            table = {"brokerName": name, "brokerRole": "ASYNC_MASTER", "putTps": "1.0 2.5 3.0",
                     "putTps1m": 2.5, "commitLogMaxOffset": 1234, "bootTimestamp": 1_700_000_000_000,
                     "ha": {"slaves": [{"ackedOffset": 10, "behind": 0}], "lag": 0}}
            return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body({"table": table}))

        h = b.handlers
        h.register(RequestCode.GET_BROKER_CONFIG, get_config)
        h.register(RequestCode.UPDATE_BROKER_CONFIG, update_config)
        h.register(RequestCode.VIEW_BROKER_STATS_DATA, view_stats)
        h.register(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, consume_by_who)
        h.register(RequestCode.GET_PRODUCER_CONNECTION_LIST, producers)
        h.register(RequestCode.GET_CONSUME_STATS, consume_stats)
        h.register(RequestCode.GET_BROKER_RUNTIME_INFO, runtime)
    return state


def fill_stats(cluster: FakeCluster, state: dict[str, Any]) -> None:
    a, b = cluster.brokers
    cluster.namesrv.set_route("Quiet", [a])
    cluster.namesrv.set_route("%RETRY%g1", [a])
    state["stats"][(a.addr, "TOPIC_PUT_NUMS", TOPIC)] = stats(1.5, 100)
    state["stats"][(b.addr, "TOPIC_PUT_NUMS", TOPIC)] = stats(2.0, 0, hour_sum=50)
    state["stats"][(a.addr, "GROUP_GET_NUMS", f"{TOPIC}@g1")] = stats(0.5, 60)
    state["stats"][(a.addr, "TOPIC_PUT_NUMS", "Quiet")] = stats(0.0, 7)
    state["groups"][(a.addr, TOPIC)] = ["g1"]
    state["groups"][(b.addr, TOPIC)] = ["g1", "g2"]
    state["lag"][(a.addr, "g1", TOPIC)] = (100, 60)
    state["lag"][(b.addr, "g1", TOPIC)] = (50, 50)
    state["lag"][(b.addr, "g2", TOPIC)] = (50, 0)


async def test_admin_requests(cluster: FakeCluster) -> None:
    state = install_ops(cluster)
    fill_stats(cluster, state)
    a, b = cluster.brokers
    state["producers"][(a.addr, "pg")] = [{"clientId": "c1", "clientAddr": "1.2.3.4:5",
                                          "language": "PYTHON", "version": 1}]
    state["producers"][(b.addr, "pg")] = [
        {"clientId": "c1", "clientAddr": "1.2.3.4:5", "language": "PYTHON", "version": 1},
        {"clientId": "c2", "clientAddr": "1.2.3.4:6", "language": "JAVA", "version": 2}]
    async with MQAdmin(cluster.namesrv_addr) as admin:
        assert (await admin.get_broker_config(a.addr))["maxMessageSize"] == "4194304"
        await admin.update_broker_config(a.addr, {"maxMessageSize": "1024"})
        assert state["config"][a.addr]["maxMessageSize"] == "1024"
        with pytest.raises(MQAdminError, match="brokerName cannot change"):
            await admin.update_broker_config(a.addr, {"brokerName": "x"})
        with pytest.raises(MQAdminError, match="line break"):
            await admin.update_broker_config(a.addr, {"k": "1\nbrokerName=x"})

        s = await admin.view_broker_stats_data(a.addr, "TOPIC_PUT_NUMS", TOPIC)
        assert s.minute.tps == 1.5 and s.sum_24h() == 100
        with pytest.raises(MQAdminError, match="SYSTEM_ERROR"):
            await admin.view_broker_stats_data(a.addr, "TOPIC_PUT_NUMS", "nope")
        assert await admin.query_topic_consume_by_who(b.addr, TOPIC) == ["g1", "g2"]

        conns = await admin.producer_connection("pg", TOPIC)
        assert [(c.client_id, c.language) for c in conns] == [("c1", "PYTHON"), ("c2", "JAVA")]
        with pytest.raises(MQAdminError, match=r"producer group\[nobody\] not exist"):
            await admin.producer_connection("nobody", TOPIC)

        assert await admin.wipe_write_perm("broker-a") == {cluster.namesrv_addr: 3}
        assert await admin.add_write_perm("broker-a") == {cluster.namesrv_addr: 3}
        assert state["perm"] == [(RequestCode.WIPE_WRITE_PERM_OF_BROKER, "broker-a"),
                                 (RequestCode.ADD_WRITE_PERM_OF_BROKER, "broker-a")]

        rows = await admin.stats_all()
        assert [(r.topic, r.group) for r in rows] == [("Quiet", None), (TOPIC, "g1"), (TOPIC, "g2")]
        quiet, g1, g2 = rows
        assert quiet.in_msg_24h == 7 and quiet.accumulation is None and quiet.out_tps is None
        assert g1.in_tps == 3.5 and g1.in_msg_24h == 150  # day sum on a, hour sum on b
        assert g1.out_tps == 0.5 and g1.out_msg_24h == 60 and g1.accumulation == 40
        assert g2.out_tps == 0.0 and g2.out_msg_24h == 0 and g2.accumulation == 50
        assert [r.topic for r in await admin.stats_all(include_system=True)].count("%RETRY%g1") == 1
        assert [r.group for r in await admin.stats_all(TOPIC)] == ["g1", "g2"]


def test_system_topics() -> None:
    for t in ("TBW102", "%RETRY%g", "%DLQ%g", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_x",
              "SCHEDULE_TOPIC_XXXX"):
        assert is_system_topic(t)
    assert not is_system_topic("TopicTest")


def test_parse_properties() -> None:
    text = "# comment\n\na=1\nb = x=y \n!bang\nc:3\n"
    assert parse_properties(text) == {"a": "1", "b": "x=y", "c": "3"}


def test_table_alignment() -> None:
    lines = format_table(["#Topic", "#Group", "#Accumulation", "#InTPS"],
                         [["T", "g", 5, 1.5], ["LongerTopic", "", None, 12.25]])
    assert lines == [
        "#Topic       #Group  #Accumulation  #InTPS",
        "T            g                   5    1.50",
        "LongerTopic                          12.25",
    ]
    kv = format_key_values({"b": 1, "a": "x"})
    assert kv == [f"{'a':<32}: x", f"{'b':<32}: 1"]


# ---- the commands, through click against the fakes on their own thread ------------------


@pytest.fixture
def ops() -> Any:
    with ThreadedCluster() as tc:
        state = tc.call(install_ops, tc.cluster)
        tc.call(fill_stats, tc.cluster, state)
        yield tc, state


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_commands(ops: Any) -> None:
    tc, state = ops
    ns = tc.cluster.namesrv_addr
    a = tc.cluster.brokers[0]

    out = run("statsAll", "-n", ns)
    lines = out.splitlines()
    assert lines[0].split() == ["#Topic", "#Consumer", "Group", "#Accumulation", "#InTPS", "#OutTPS",
                                "#InMsg24Hour", "#OutMsg24Hour"]
    assert lines[1].split() == ["Quiet", "0.00", "7"]
    assert lines[2].split() == [TOPIC, "g1", "40", "3.50", "0.50", "150", "60"]
    # numbers right-aligned under their headers
    assert lines[2].index("40") + 2 == lines[0].index("#Accumulation") + len("#Accumulation")
    assert lines[2].rindex("60") + 2 == len(lines[0])
    doc = json.loads(run("statsAll", "-n", ns, "--json"))
    assert doc[1] == {"topic": TOPIC, "group": "g1", "accumulation": 40, "in_tps": 3.5,
                      "out_tps": 0.5, "in_msg_24h": 150, "out_msg_24h": 60}

    out = run("brokerStatus", "-n", ns, "-b", a.addr)
    assert f"{'putTps':<32}: 1.0 2.5 3.0" in out
    assert f"{'slave0AckedOffset':<32}: 10" in out and "haLag" in out
    assert "bootTimestamp" in out and "(2023-11-1" in out
    assert json.loads(run("brokerStatus", "-n", ns, "-b", a.addr, "--json"))["putTps1m"] == 2.5

    out = run("getBrokerConfig", "-n", ns, "-b", a.addr)
    assert f"============{a.addr}============" in out
    assert f"{'maxMessageSize':<50}=  4194304" in out
    out = run("updateBrokerConfig", "-n", ns, "-b", a.addr, "-k", "maxMessageSize", "-v", "2048")
    assert out.strip() == f"update broker config success, {a.addr}"
    assert json.loads(run("getBrokerConfig", "-n", ns, "-b", a.addr, "--json"))["maxMessageSize"] == "2048"
    every = json.loads(run("getBrokerConfig", "-n", ns, "-c", "DefaultCluster", "--json"))
    assert sorted(every) == sorted(b.addr for b in tc.cluster.brokers)
    bad = CliRunner().invoke(cli, ["updateBrokerConfig", "-n", ns, "-b", a.addr, "-k", "brokerName",
                                   "-v", "x"])
    assert bad.exit_code != 0 and "cannot change at run time" in bad.output

    out = run("wipeWritePerm", "-n", ns, "-b", "broker-a")
    assert out.strip() == f"wipe write perm of broker[broker-a] in name server[{ns}] OK, 3"
    out = run("addWritePerm", "-n", ns, "-b", "broker-a")
    assert out.strip() == f"add write perm of broker[broker-a] in name server[{ns}] OK, 3"

    missing = CliRunner().invoke(cli, ["producerConnection", "-n", ns, "-g", "pg", "-t", TOPIC])
    assert missing.exit_code != 0 and "not exist" in missing.output
    tc.call(state["producers"].__setitem__, (a.addr, "pg"),
            [{"clientId": "127.0.0.1@1", "clientAddr": "127.0.0.1:5", "language": "PYTHON",
              "version": 317}])
    out = run("producerConnection", "-n", ns, "-g", "pg", "-t", TOPIC)
    assert out.splitlines()[1].split() == ["0001", "127.0.0.1@1", "127.0.0.1:5", "PYTHON", "317"]
    assert json.loads(run("producerConnection", "-n", ns, "-g", "pg", "-t", TOPIC, "--json")) == [
        {"clientId": "127.0.0.1@1", "clientAddr": "127.0.0.1:5", "language": "PYTHON",
         "version": 317}]

    # --json on the older list commands
    assert TOPIC in json.loads(run("topicList", "-n", ns, "--json"))
    clusters = json.loads(run("clusterList", "-n", ns, "--json"))
    assert {(c["brokerName"], c["brokerId"], c["role"]) for c in clusters} == {
        ("broker-a", 0, "ASYNC_MASTER"), ("broker-b", 0, "ASYNC_MASTER")}
    progress = json.loads(run("consumerProgress", "-n", ns, "-g", "g1", "--json"))
    assert progress["diffTotal"] == 40 and len(progress["offsetTable"]) == 2
    assert progress["consumeTps"] == 2.5  # both brokers' figures added
    out = run("consumerProgress", "-n", ns, "-g", "g1")
    assert "Diff Total: 40" in out and "Consume TPS: 2.50" in out


async def test_timeouts_are_admin_errors(cluster: FakeCluster) -> None:
    cluster.brokers[0].handlers.register(RequestCode.GET_BROKER_CONFIG, lambda conn, cmd: None)
    async with MQAdmin(cluster.namesrv_addr, timeout=0.3) as admin:
        with trio.fail_after(5), pytest.raises(MQAdminError):
            await admin.get_broker_config(cluster.brokers[0].addr)
