"""Several name servers, client side: the SDK's instance and MQAdmin ask one,
keep it while it answers, move on when it is dead or silent; changes every name
server must make reach all the live ones; NAMESRV_ADDR when no address is given.
Fake name servers on 127.0.0.1 (tests/client/fakes.py); the real daemons:
tests/integration/test_namesrvs.py."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from click.testing import CliRunner

from client.admin import MQAdmin, MQAdminError
from client.admin_cli import cli
from client.instance import DEFAULT_NAMESRV_ADDR, MQClientInstance
from client.lite_pull_consumer import LitePullConsumer
from client.producer import Producer
from client.pull_consumer import PullConsumer
from client.push_consumer import PushConsumer
from client.transaction import LocalTransactionState, TransactionProducer
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio import RemotingConnection
from tests.client.fakes import FakeCluster, FakeNameServer, ThreadedCluster, closed_port_addr

TOPIC = FakeCluster.TOPIC


def silence(ns: FakeNameServer) -> list[str]:
    """``ns`` takes route requests and never answers; returns what it was asked."""
    asked: list[str] = []

    def never(conn: RemotingConnection, cmd: RemotingCommand) -> None:
        asked.append(cmd.ext_fields.get("topic", ""))

    ns.handlers.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, never)
    return asked


async def second_namesrv(cluster: FakeCluster, nursery: trio.Nursery) -> FakeNameServer:
    """Another fake name server with the cluster's routes."""
    ns = FakeNameServer()
    await ns.start(nursery)
    ns.routes = cluster.namesrv.routes
    return ns


# ---- the client instance ------------------------------------------------------------


async def test_instance_moves_past_a_silent_name_server_and_keeps_the_next(
    cluster: FakeCluster, nursery: trio.Nursery,
) -> None:
    mute = await second_namesrv(cluster, nursery)
    asked_mute = silence(mute)
    good = cluster.namesrv
    instance = MQClientInstance(f"{mute.addr};{good.addr}", request_timeout=0.5)
    instance._namesrvs.index = 0  # the silent one first, whatever the random start
    await instance.start()
    try:
        assert instance.current_namesrv == mute.addr
        t0 = trio.current_time()
        assert await instance.update_topic_route(TOPIC) is not None
        took = trio.current_time() - t0
        assert 0.5 <= took < 1.5  # one timeout, then the next name server
        assert instance.current_namesrv == good.addr
        for _ in range(5):  # kept: the silent one is not asked again
            t0 = trio.current_time()
            await instance.update_topic_route(TOPIC)
            assert trio.current_time() - t0 < 0.5
        assert asked_mute == [TOPIC] and good.route_requests == [TOPIC] * 6
    finally:
        await instance.shutdown()


async def test_instance_moves_past_a_name_server_that_dies(cluster: FakeCluster) -> None:
    good = cluster.namesrv
    async with trio.open_nursery() as doomed_nursery:
        doomed = await second_namesrv(cluster, doomed_nursery)
        instance = MQClientInstance(f"{doomed.addr};{good.addr}")
        instance._namesrvs.index = 0
        await instance.start()
        try:
            await instance.update_topic_route(TOPIC)
            assert doomed.route_requests == [TOPIC] and good.route_requests == []
            doomed_nursery.cancel_scope.cancel()  # it dies: its connection closes
            await trio.sleep(0)
            await instance.update_topic_route(TOPIC)
            assert instance.current_namesrv == good.addr and good.route_requests == [TOPIC]
            await instance.update_topic_route(TOPIC)
            assert good.route_requests == [TOPIC] * 2
        finally:
            await instance.shutdown()


class Listener:
    def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


def test_clients_take_the_list_from_namesrv_addr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", "n1:9876;n2:9876")
    made: list[Producer | PushConsumer | LitePullConsumer | PullConsumer] = [
        Producer("pg"), PushConsumer("cg"), LitePullConsumer("cg"), PullConsumer("cg"),
        TransactionProducer("tg", None, Listener())]
    assert {c.namesrv_addr for c in made} == {"n1:9876;n2:9876"}
    assert Producer("pg", "x:1").namesrv_addr == "x:1"  # explicit wins
    monkeypatch.delenv("NAMESRV_ADDR")
    assert PushConsumer("cg").namesrv_addr == DEFAULT_NAMESRV_ADDR


# ---- MQAdmin and mqadmin --------------------------------------------------------------


async def test_admin_keeps_a_name_server_that_answers(cluster: FakeCluster) -> None:
    dead = closed_port_addr()
    async with MQAdmin(f"{dead};{cluster.namesrv_addr}", timeout=1.0) as admin:
        admin._namesrvs.index = 0  # the dead one first
        for _ in range(3):
            assert (await admin.topic_route(TOPIC)).broker_datas
        assert admin._namesrvs.current == cluster.namesrv_addr
    assert cluster.namesrv.route_requests == [TOPIC] * 3


def perm_handlers(ns: FakeNameServer) -> list[str]:
    """WIPE/ADD_WRITE_PERM_OF_BROKER on ``ns``; returns the broker names asked."""
    asked: list[str] = []

    def handle(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        asked.append(cmd.ext_fields["brokerName"])
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"wipeTopicCount": 2,
                                                              "addTopicCount": 2})

    ns.handlers.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER, handle)
    ns.handlers.register(RequestCode.ADD_WRITE_PERM_OF_BROKER, handle)
    return asked


async def test_admin_changes_every_live_name_server_when_one_is_dead(
    cluster: FakeCluster, nursery: trio.Nursery,
) -> None:
    other = await second_namesrv(cluster, nursery)
    asked = [perm_handlers(cluster.namesrv), perm_handlers(other)]
    live = f"{cluster.namesrv_addr};{other.addr}"
    async with MQAdmin(live) as admin:
        assert await admin.wipe_write_perm("broker-a") == {cluster.namesrv_addr: 2,
                                                          other.addr: 2}
    silent = FakeNameServer()  # takes the request, never answers
    await silent.start(nursery)
    dead = closed_port_addr()
    async with MQAdmin(f"{dead};{silent.addr};{live}", timeout=0.5) as admin:
        t0 = trio.current_time()
        with pytest.raises(MQAdminError) as info:
            await admin.add_write_perm("broker-a")
        assert trio.current_time() - t0 < 1.5  # all at once: one timeout, not one each
    text = str(info.value)
    assert dead in text and silent.addr in text
    assert text.endswith(f"(done on: {cluster.namesrv_addr}, {other.addr})")
    assert asked == [["broker-a", "broker-a"], ["broker-a", "broker-a"]]


def test_admin_takes_the_list_from_namesrv_addr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", "n1:9876; n2:9876")
    assert MQAdmin().namesrv_list == ["n1:9876", "n2:9876"]
    assert MQAdmin("x:1").namesrv_list == ["x:1"]
    monkeypatch.delenv("NAMESRV_ADDR")
    with pytest.raises(MQAdminError, match="NAMESRV_ADDR"):
        MQAdmin()
    with pytest.raises(MQAdminError, match="bad name server address"):
        MQAdmin("a:1;nonsense")


def test_mqadmin_n_from_namesrv_addr(fakes: ThreadedCluster, monkeypatch: pytest.MonkeyPatch
                                     ) -> None:
    ns = fakes.cluster.namesrv

    def topics(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=pack_body({"topicList": sorted(ns.routes)}))

    fakes.call(ns.handlers.register, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, topics)
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    missing = CliRunner().invoke(cli, ["topicList"])
    assert missing.exit_code != 0 and "NAMESRV_ADDR" in missing.output
    # the variable (a dead name server first: the list is tried in turn)
    env = {"NAMESRV_ADDR": f"{closed_port_addr()};{ns.addr}"}
    out = CliRunner().invoke(cli, ["topicList"], env=env)
    assert out.exit_code == 0 and out.output.splitlines()[-1] == TOPIC, out.output
    # -n wins over it
    out = CliRunner().invoke(cli, ["topicList", "-n", closed_port_addr()], env=env)
    assert out.exit_code != 0 and "no name server answered" in out.output
