"""Incremental registration: the whole table once, then only what changed.

The broker's BrokerOuterAPI talks to real name-server processors (one
RouteInfoManager each) through a client that hands each request to the
handler, over one stand-in connection per name server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.out_api import BrokerOuterAPI
from broker.topic_config_manager import TopicConfigManager
from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager
from protocol.body import decompress_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.route import DataVersion, TopicConfig

NS = ("127.0.0.1:1", "127.0.0.1:2")


class Conn:
    closed = False

    def __init__(self, peer: str) -> None:
        self.remote_addr = peer


class NamesrvClient:
    """Each address is a name server; ``restart(addr)`` forgets everything."""

    def __init__(self) -> None:
        self.routes: dict[str, RouteInfoManager] = {}
        self.tables: dict[str, Any] = {}
        self.conns: dict[str, Conn] = {}
        self.sent: list[tuple[str, RemotingCommand]] = []
        for addr in NS:
            self.restart(addr)

    def restart(self, addr: str) -> None:
        self.routes[addr] = RouteInfoManager()
        self.tables[addr] = NamesrvProcessor(self.routes[addr], lambda: 0.0).handler_table()
        self.conns[addr] = Conn(f"127.0.0.1:{40000 + len(self.sent)}")

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.sent.append((addr, cmd))
        handler, _ = self.tables[addr].lookup(cmd.code)
        assert handler is not None
        response = handler(self.conns[addr], cmd)  # type: ignore[arg-type]
        assert response is not None
        return response

    def bodies(self, addr: str) -> list[tuple[bool, dict[str, Any]]]:
        """(incremental, decoded body) of every registration sent to ``addr``."""
        out = []
        for a, cmd in self.sent:
            if a != addr or cmd.code != RequestCode.REGISTER_BROKER:
                continue
            raw = cmd.body or b""
            if cmd.ext_fields.get("compressed"):
                raw = decompress_body(raw, 1 << 30)
            out.append((bool(cmd.ext_fields.get("incremental")), unpack_body(raw)))
        return out


@pytest.fixture
def setup(tmp_path: Path) -> tuple[TopicConfigManager, BrokerOuterAPI, NamesrvClient]:
    config = BrokerConfig(store_path_root_dir=str(tmp_path), namesrv_addr=";".join(NS))
    topics = TopicConfigManager(config)
    topics.log.info = lambda *a, **k: None  # type: ignore[method-assign]
    for i in range(50):
        topics.put(TopicConfig(f"T{i}", 4, 4))
    client = NamesrvClient()
    return topics, BrokerOuterAPI(config, client), client  # type: ignore[arg-type]


def routed(client: NamesrvClient, addr: str) -> set[str]:
    return set(client.routes[addr].topic_queue_table)


async def test_the_second_registration_carries_only_the_changes(
    setup: tuple[TopicConfigManager, BrokerOuterAPI, NamesrvClient],
) -> None:
    topics, api, client = setup
    assert await api.register_broker_all(topics) == 2
    for addr in NS:
        ((incremental, body),) = client.bodies(addr)
        assert not incremental and len(body["topicConfigTable"]) == len(topics.table)
        assert routed(client, addr) == set(topics.table)

    topics.put(TopicConfig("New", 2, 2))
    topics.put(TopicConfig("T3", 8, 8))
    topics.remove("T7")
    assert await api.register_broker_all(topics) == 2
    for addr in NS:
        incremental, body = client.bodies(addr)[-1]
        assert incremental
        assert set(body["topicConfigTable"]) == {"New", "T3"}
        assert body["deletedTopics"] == ["T7"]
        assert routed(client, addr) == set(topics.table)
        assert client.routes[addr].topic_queue_table["T3"]["broker-a"].write_queue_nums == 8
        live = client.routes[addr].broker_live_table[api.config.broker_addr]
        assert live.data_version == topics.data_version

    # the periodic registration with nothing changed: a keep-alive carrying nothing
    assert await api.register_broker_all(topics) == 2
    for addr in NS:
        incremental, body = client.bodies(addr)[-1]
        assert incremental and body["topicConfigTable"] == {} and body["deletedTopics"] == []
    assert (api.full_registrations, api.incremental_registrations) == (2, 4)


async def test_a_restarted_name_server_gets_the_whole_table_at_once(
    setup: tuple[TopicConfigManager, BrokerOuterAPI, NamesrvClient],
) -> None:
    topics, api, client = setup
    await api.register_broker_all(topics)
    client.restart(NS[0])
    topics.put(TopicConfig("New", 1, 1))
    assert await api.register_broker_all(topics) == 2
    # the delta was refused (needFull), the whole table followed in the same round
    (_, first), (inc, delta), (again, full) = client.bodies(NS[0])
    assert inc and set(delta["topicConfigTable"]) == {"New"}
    assert not again and len(full["topicConfigTable"]) == len(topics.table)
    assert routed(client, NS[0]) == set(topics.table) == routed(client, NS[1])
    assert [inc for inc, _ in client.bodies(NS[1])] == [False, True]


async def test_a_name_server_that_does_not_take_increments_keeps_getting_the_table(
    setup: tuple[TopicConfigManager, BrokerOuterAPI, NamesrvClient],
) -> None:
    """An old name server never answers incrementalOk."""
    topics, api, client = setup

    class OldNamesrv(NamesrvClient):
        async def invoke(self, addr: str, cmd: RemotingCommand,
                         timeout: float) -> RemotingCommand:
            self.sent.append((addr, cmd))
            return cmd.response(ResponseCode.SUCCESS)

    old = OldNamesrv()
    api.client = old  # type: ignore[assignment]
    for i in range(3):
        topics.put(TopicConfig(f"More{i}", 1, 1))
        assert await api.register_broker_all(topics) == 2
    assert [inc for inc, _ in old.bodies(NS[0])] == [False, False, False]


async def test_many_changes_or_a_copied_table_go_whole(
    setup: tuple[TopicConfigManager, BrokerOuterAPI, NamesrvClient],
) -> None:
    topics, api, client = setup
    await api.register_broker_all(topics)
    for i in range(1500):  # more than INCREMENTAL_MAX_CHANGES and half the table
        topics.put(TopicConfig(f"Bulk{i}", 1, 1))
    await api.register_broker_all(topics)
    assert [inc for inc, _ in client.bodies(NS[0])] == [False, False]
    topics.replace({"Theirs": TopicConfig("Theirs", 1, 1)}, DataVersion(5, 5))  # a slave's copy
    await api.register_broker_all(topics)
    assert [inc for inc, _ in client.bodies(NS[0])] == [False, False, False]
    assert routed(client, NS[0]) == {"Theirs"}
    topics.put(TopicConfig("Next", 1, 1))
    await api.register_broker_all(topics)
    inc, body = client.bodies(NS[0])[-1]
    assert inc and set(body["topicConfigTable"]) == {"Next"}


async def test_a_large_table_goes_compressed_and_encoded_off_the_loop(
    setup: tuple[TopicConfigManager, BrokerOuterAPI, NamesrvClient],
) -> None:
    topics, api, client = setup
    for i in range(30_000):
        topics.put(TopicConfig(f"%RETRY%consumer-group-{i:06d}", 1, 1))
    assert await api.register_broker_all(topics) == 2
    addr, cmd = client.sent[0]
    assert cmd.ext_fields["compressed"] is True and len(cmd.body or b"") < 1024 * 1024
    assert len(client.routes[addr].topic_queue_table) == len(topics.table)
