"""SlaveSynchronize: a slave copies its master's metadata (RocketMQ's SlaveSynchronize).

Every ``slaveSyncInterval`` ms (10 s) a slave asks its master for the topic
configs (GET_ALL_TOPIC_CONFIG), consumer offsets (GET_ALL_CONSUMER_OFFSET),
delay offsets (GET_ALL_DELAY_OFFSET) and subscription groups
(GET_ALL_SUBSCRIPTIONGROUP_CONFIG), and replaces its own copy when the data
version differs (offsets, which carry none, every time). With aclEnable, the
master's plain_acl.yml (GET_BROKER_CLUSTER_ACL_CONFIG) too, by its dataVersion. The master is a
peer like any other: every table it sends is checked as a registration is
(names, queue counts) before it replaces anything.

``parse_*`` are pure; ``SlaveSynchronize.run`` is the trio edge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
import trio

from broker.acl.admin import AclAdminError, AclDocument, AclVersion
from broker.subscription_group_manager import SubscriptionGroupConfig
from protocol.body import unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.names import group_problem, shown, topic_problem
from protocol.route import DataVersion, TopicConfig, topic_config_problem
from protocol.trio.client import RemotingClient
from protocol.trio.errors import RemotingError
from protocol.trio.service import Guard, describe

if TYPE_CHECKING:
    from broker.acl.guard import AclFile
    from broker.controller import BrokerController

SYNC_TIMEOUT_S = 5.0


def _map(obj: Any, what: str) -> dict[Any, Any]:
    if not isinstance(obj, dict):
        raise RemoteProtocolError(f"{what} must be a map")
    return obj


def parse_topics(body: Any, max_queue_nums: int) -> tuple[dict[str, TopicConfig], DataVersion]:
    d = _map(body, "topic table")
    out: dict[str, TopicConfig] = {}
    for name, raw in _map(d.get("topicConfigTable") or {}, "topicConfigTable").items():
        cfg = TopicConfig.from_dict(raw)
        problem = topic_config_problem(cfg, max_queue_nums) if cfg.topic_name == name else \
            f"key {shown(name)} differs from its topicName"
        if problem is not None:
            raise RemoteProtocolError(f"topic table: {problem}")
        out[name] = cfg
    return out, DataVersion.from_dict(d.get("dataVersion"))


def parse_offsets(body: Any) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for key, queues in _map(_map(body, "offsets").get("offsetTable") or {}, "offsetTable").items():
        topic, sep, group = str(key).partition("@")
        if not sep or topic_problem(topic) or group_problem(group):
            raise RemoteProtocolError(f"offset table: bad key {shown(key)}")
        table: dict[int, int] = {}
        for q, o in _map(queues, "queue offsets").items():
            try:
                qid, off = int(q), int(o)
            except (TypeError, ValueError) as exc:
                raise RemoteProtocolError(f"offset table: bad entry of {key}") from exc
            if not (0 <= qid < 2**31 and 0 <= off < 2**63):
                raise RemoteProtocolError(f"offset table: entry out of range in {key}")
            table[qid] = off
        out[key] = table
    return out


def parse_delay_offsets(body: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    for level, off in _map(_map(body, "delay offsets").get("offsetTable") or {},
                           "offsetTable").items():
        try:
            lvl, value = int(level), int(off)
        except (TypeError, ValueError) as exc:
            raise RemoteProtocolError("delay offsets: bad entry") from exc
        if not (0 < lvl <= 1000 and 0 <= value < 2**63):
            raise RemoteProtocolError("delay offsets: entry out of range")
        out[lvl] = value
    return out


def parse_groups(body: Any) -> tuple[dict[str, SubscriptionGroupConfig], DataVersion]:
    d = _map(body, "subscription groups")
    out: dict[str, SubscriptionGroupConfig] = {}
    for name, raw in _map(d.get("subscriptionGroupTable") or {},
                          "subscriptionGroupTable").items():
        try:
            cfg = SubscriptionGroupConfig.from_dict(raw)
        except ValueError as exc:
            raise RemoteProtocolError(f"subscription groups: {exc}") from exc
        if cfg.group_name != name or group_problem(name):
            raise RemoteProtocolError(f"subscription groups: bad group {shown(name)}")
        out[name] = cfg
    return out, DataVersion.from_dict(d.get("dataVersion"))


class SlaveSynchronize:
    def __init__(self, controller: BrokerController, master_addr: Callable[[], str | None]
                 ) -> None:
        self.c = controller
        self.master_addr = master_addr
        self.interval = controller.config.slave_sync_interval / 1000
        self.log = structlog.get_logger("broker.slave_sync").bind(
            broker=controller.config.broker_name)
        self.guard = Guard(self.log, "slave synchronize")
        self.synced = 0  # rounds completed

    async def run(self, client: RemotingClient,
                  task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            addr = self.master_addr()
            if addr is not None:
                await self.guard.run(self._sync_logged, client, addr)
            await trio.sleep(self.interval if addr is not None else 1.0)

    async def _sync_logged(self, client: RemotingClient, addr: str) -> None:
        """One round; the master being unreachable or sending a bad table is an
        expected condition (a warning, rate-limited), anything else a failure."""
        try:
            await self.sync_all(client, addr)
        except (RemotingError, RemoteProtocolError) as exc:
            self.guard.note("metadata sync from the master failed", type(exc).__name__,
                            master=addr, error=describe(exc))

    async def _fetch(self, client: RemotingClient, addr: str, code: int) -> Any:
        resp = await client.invoke(addr, RemotingCommand.request(code), SYNC_TIMEOUT_S)
        if resp.code != ResponseCode.SUCCESS:
            raise RemoteProtocolError(f"master answered {resp.code}: {shown(resp.remark or '')}")
        return unpack_body(resp.body)

    async def sync_all(self, client: RemotingClient, addr: str) -> None:
        c = self.c
        topics, version = parse_topics(
            await self._fetch(client, addr, RequestCode.GET_ALL_TOPIC_CONFIG),
            c.config.max_queue_nums)
        tm = c.topic_config_manager
        if version != tm.data_version:
            tm.replace(topics, version)
        offsets = parse_offsets(await self._fetch(client, addr,
                                                  RequestCode.GET_ALL_CONSUMER_OFFSET))
        c.consumer_offset_manager.replace(offsets)
        delay = parse_delay_offsets(await self._fetch(client, addr,
                                                      RequestCode.GET_ALL_DELAY_OFFSET))
        if delay != c.schedule_service.offset_table:
            c.schedule_service.offset_table = delay
            snap = c.schedule_service.snapshot(force=True)
            if snap is not None:
                await trio.to_thread.run_sync(snap.write)
        groups, gversion = parse_groups(
            await self._fetch(client, addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        sm = c.subscription_group_manager
        if gversion != sm.data_version:
            sm.replace(groups, gversion)
        if c.acl_file is not None:
            await self.sync_acl(client, addr, c.acl_file)
        self.synced += 1

    async def sync_acl(self, client: RemotingClient, addr: str, acl_file: AclFile) -> None:
        """The master's plain_acl.yml (GET_BROKER_CLUSTER_ACL_CONFIG): written here when
        its data version differs from the slave's file."""
        resp = await client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG),
            SYNC_TIMEOUT_S)
        if resp.code != ResponseCode.SUCCESS:
            raise RemoteProtocolError(f"master answered {resp.code} to the ACL config: "
                                      f"{shown(resp.remark or '')}")
        version = AclVersion.from_json((resp.ext_fields or {}).get("version"))
        try:
            doc = AclDocument.from_acl_config(unpack_body(resp.body), version)
        except AclAdminError as exc:
            raise RemoteProtocolError(f"ACL config: {exc}") from exc
        await acl_file.follow(doc)
