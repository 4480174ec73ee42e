"""A broker and several name servers: it registers with all of them at once, a
silent one costing the others nothing; ``namesrvAddr`` from -n, the config
file, then NAMESRV_ADDR."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from click.testing import CliRunner

from broker.cli import main as mqbroker
from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.out_api import BrokerOuterAPI
from broker.topic_config_manager import TopicConfigManager
from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.route import TopicConfig
from protocol.trio.errors import RemotingTimeoutError
from tests.broker.test_topic_scale_register import NS, Conn, NamesrvClient

SILENT = "127.0.0.1:3"


class OneSilent(NamesrvClient):
    """Name servers 127.0.0.1:1 and :2 answer at once; :3 never does (the
    request times out after its timeout, as RemotingClient's would)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: dict[str, list[float]] = {}

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        if cmd.code == RequestCode.REGISTER_BROKER:
            self.times.setdefault(addr, []).append(trio.current_time())
        if addr == SILENT:
            await trio.sleep(timeout)
            raise RemotingTimeoutError(f"request to {addr} timed out")
        return await super().invoke(addr, cmd, timeout)


async def test_a_silent_name_server_delays_no_other(autojump_clock: trio.testing.MockClock,
                                                    tmp_path: Path) -> None:
    client = OneSilent()
    config = BrokerConfig(store_path_root_dir=str(tmp_path),
                          namesrv_addr=";".join([*client.routes, SILENT]))
    topics = TopicConfigManager(config)
    topics.put(TopicConfig("T", 4, 4))
    api = BrokerOuterAPI(config, client)  # type: ignore[arg-type]
    t0 = trio.current_time()
    assert await api.register_broker_all(topics) == 2
    took = trio.current_time() - t0
    # all three asked at once; the live two have the broker at once
    assert {a: ts[0] - t0 for a, ts in client.times.items()} == {
        "127.0.0.1:1": 0, "127.0.0.1:2": 0, SILENT: 0}
    for addr in client.routes:
        assert "T" in client.routes[addr].topic_queue_table
    # the round is bounded by the registration timeout
    assert took == pytest.approx(config.register_broker_timeout_ms / 1000, rel=0.01)


def test_namesrv_addr_from_flag_file_then_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    def effective(*args: str) -> str:
        result = CliRunner().invoke(mqbroker, [*args, "-p"])
        assert result.exit_code == 0, result.output
        [line] = [ln for ln in result.output.splitlines() if ln.startswith("namesrvAddr=")]
        return line.partition("=")[2]

    conf = tmp_path / "broker.conf"
    conf.write_text("namesrvAddr=f1:9876;f2:9876\n")
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    assert effective() == ""
    monkeypatch.setenv("NAMESRV_ADDR", "e1:9876;e2:9876;e3:9876")
    assert effective() == "e1:9876;e2:9876;e3:9876"
    assert effective("-c", str(conf)) == "f1:9876;f2:9876"
    assert effective("-c", str(conf), "-n", "n1:9876") == "n1:9876"
    assert effective("-o", "namesrvAddr=o1:9876") == "o1:9876"
    monkeypatch.setenv("NAMESRV_ADDR", "nonsense")
    bad = CliRunner().invoke(mqbroker, ["-p"])
    assert bad.exit_code != 0 and "NAMESRV_ADDR" in bad.output
    assert effective("-c", str(conf)) == "f1:9876;f2:9876"  # not used: not read


async def test_each_name_server_has_its_own_registration_loop(
    autojump_clock: trio.testing.MockClock, tmp_path: Path,
) -> None:
    """A hanging name server holds up only its own loop: every topic change
    reaches the live ones at once, not after the hanging one's timeout."""
    client = OneSilent()
    addrs = [*client.routes, SILENT]
    c = BrokerController(BrokerConfig(store_path_root_dir=str(tmp_path),
                                      namesrv_addr=";".join(addrs)))
    c.outer_api = api = BrokerOuterAPI(c.config, client)  # type: ignore[arg-type]
    topics = c.topic_config_manager
    await c.register_broker_all()  # start-up: all at once, bounded by the timeout
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c._register_loop)
        for i in range(5):
            t0 = trio.current_time()
            topics.put(TopicConfig(f"T{i}", 4, 4))
            c.trigger_register()
            await trio.sleep(0.01)
            for addr in client.routes:
                assert f"T{i}" in client.routes[addr].topic_queue_table, (i, addr)
            assert trio.current_time() - t0 < 0.1
            await trio.sleep(1)
        nursery.cancel_scope.cancel()
    # the silent one was asked again (its loop runs on its own), never in between
    # its own timeouts
    times = client.times[SILENT]
    assert len(times) >= 2
    timeout = c.config.register_broker_timeout_ms / 1000
    assert all(b - a >= timeout for a, b in zip(times, times[1:], strict=False))
    assert api.incremental_registrations >= 10


async def test_loops_needing_the_whole_table_at_once_encode_it_once(tmp_path: Path) -> None:
    client = NamesrvClient()
    config = BrokerConfig(store_path_root_dir=str(tmp_path), namesrv_addr=";".join(client.routes))
    topics = TopicConfigManager(config)
    for i in range(50):
        topics.put(TopicConfig(f"T{i}", 4, 4))
    api = BrokerOuterAPI(config, client)  # type: ignore[arg-type]
    encoded = 0
    real_encode = api._encode

    async def counting(*args: Any, **kw: Any) -> Any:
        nonlocal encoded
        encoded += 1
        await trio.testing.wait_all_tasks_blocked()  # the other loop arrives meanwhile
        return await real_encode(*args, **kw)

    api._encode = counting  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        for addr in client.routes:  # two loops, both with a name server new to the broker
            nursery.start_soon(api.register_broker_all, topics, None, [addr])
    assert encoded == 1 and api.full_registrations == 2
    assert api._full is None  # not kept once no registration is under way
    for addr in client.routes:
        assert set(client.routes[addr].topic_queue_table) == set(topics.table)


class OwnConnection:
    """One broker's connection to a shared in-process name server."""

    def __init__(self, table: Any, peer: str) -> None:
        self.table = table
        self.conn = Conn(peer)
        self.sent: list[RemotingCommand] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.sent.append(cmd)
        handler, _ = self.table.lookup(cmd.code)
        assert handler is not None
        response = handler(self.conn, cmd)
        assert response is not None
        return response  # type: ignore[no-any-return]


async def test_registrations_carry_the_epochs_and_the_newer_master_is_kept(
        tmp_path: Path) -> None:
    """Controller mode: the master epoch of the role taken goes with every
    registration; a master elected later replaces the isolated one at the name
    server, and the slave's answer names it (RocketMQ's #6316)."""
    routes = RouteInfoManager()
    table = NamesrvProcessor(routes, lambda: 0.0).handler_table()
    apis = {}
    for port, bid in ((10911, 0), (10921, 0), (10931, 3)):
        config = BrokerConfig(store_path_root_dir=str(tmp_path / str(port)), namesrv_addr=NS[0],
                              broker_ip1="127.0.0.1", listen_port=port, broker_id=bid)
        apis[port] = BrokerOuterAPI(config, OwnConnection(table, f"127.0.0.1:{port + 30000}"))
    topics = TopicConfigManager(apis[10911].config)
    topics.put(TopicConfig("T", 4, 4))
    apis[10911].master_epoch, apis[10911].sync_state_set_epoch = 1, 2
    assert await apis[10911].register_broker_all(topics, "127.0.0.1:10912") == 1
    sent = apis[10911].client.sent[-1].ext_fields  # type: ignore[attr-defined]
    assert (str(sent["masterEpoch"]), str(sent["syncStateSetEpoch"])) == ("1", "2")
    # a broker outside controller mode sends no epoch
    plain = BrokerOuterAPI(BrokerConfig(store_path_root_dir=str(tmp_path / "plain")),
                           OwnConnection(table, "127.0.0.1:40999"))
    assert "masterEpoch" not in plain._header(await plain._encode({}, 0), None, False)

    apis[10921].master_epoch = 2  # elected while 10911 was cut off from the controller
    assert await apis[10921].register_broker_all(topics, "127.0.0.1:10922") == 1
    assert routes.broker_addr_table[apis[10911].config.broker_name].broker_addrs[0] \
        == "127.0.0.1:10921"
    assert await apis[10911].register_broker_all(topics, "127.0.0.1:10912") == 0  # stale
    apis[10931].master_epoch = 2
    assert await apis[10931].register_broker_all(topics) == 1
    assert apis[10931].master_addr == "127.0.0.1:10921"
    assert apis[10931].master_ha_addr == "127.0.0.1:10922"
