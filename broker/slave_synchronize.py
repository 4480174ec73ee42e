"""SlaveSynchronize: a slave copies its master's metadata (RocketMQ's SlaveSynchronize).

Every ``slaveSyncInterval`` ms (10 s) a slave asks its master for the topic
configs (GET_ALL_TOPIC_CONFIG), consumer offsets (GET_ALL_CONSUMER_OFFSET),
delay offsets (GET_ALL_DELAY_OFFSET), the timer's checkpoint (GET_TIMER_CHECK_POINT,
kept for a promotion) and subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG). With aclEnable, the master's plain_acl.yml
(GET_BROKER_CLUSTER_ACL_CONFIG) too, by its dataVersion. The master is a peer
like any other: every table it sends is checked as a registration is (names,
queue counts) before anything is taken from it.

What a slave takes never loses what it has (RocketMQ 4.x replaces the
slave's tables, so a master restarted with an empty store empties its slave,
and offsets committed on the slave while the master was down are lost when
it returns):

- Topics and subscription groups are merged, when the master's data version
  differs from the slave's: the master's entries are added or updated, the
  ones only the slave has are kept. So a deletion on the master does not
  reach the slave by this sync (delete there too).
- Consumer offsets only move forward, per ``topic@group`` and queue: the
  slave keeps the larger of its own and the master's. Unless the master
  says the key was reset (its reset counter, ``resetVersions``, is higher
  than the slave's: ConsumerOffsetManager): then the master's offsets of that
  key replace the slave's, even downwards, and the slave records the counter.
- Offsets the slave holds higher than the master's (committed on the slave
  while the master was down) go to the master: UPDATE_CONSUMER_OFFSET with
  ``increaseOnly=true`` and the key's ``resetVersion``, which a master takes
  only forward and only if no reset happened meanwhile; at most
  MAX_PUSHES_PER_ROUND per round, the rest in the next ones.
- Delay offsets: per level, the larger of the two (a master's only grow).

A round runs only while ``master_trusted()`` says the slave trusts its
master's log (the HA link accepted it: the master's commit log continues the
slave's); a master whose store was lost is not a source of metadata.

``parse_*`` and ``merge_*`` are pure; ``SlaveSynchronize.run`` is the trio edge.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
import trio

from acl.admin import AclAdminError, AclDocument, AclVersion
from broker.subscription_group_manager import SubscriptionGroupConfig
from broker.timer.timer_log import TimerCheckpoint
from protocol.body import unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import UpdateConsumerOffsetRequestHeader
from protocol.names import group_problem, shown, topic_problem
from protocol.route import DataVersion, TopicConfig, topic_config_problem
from protocol.trio.client import RemotingClient
from protocol.trio.errors import RemotingError
from protocol.trio.service import Guard, describe

if TYPE_CHECKING:
    from acl.guard import AclFile
    from broker.controller import BrokerController

SYNC_TIMEOUT_S = 5.0
# offsets sent to the master per round (one request each); the rest wait for the next
MAX_PUSHES_PER_ROUND = 10_000

V = TypeVar("V")


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


def parse_reset_versions(body: Any) -> dict[str, int]:
    """GET_ALL_CONSUMER_OFFSET's ``resetVersions`` (``topic@group`` -> reset
    counter); absent from older brokers and RocketMQ's: no counters."""
    out: dict[str, int] = {}
    for key, n in _map(_map(body, "offsets").get("resetVersions") or {},
                       "resetVersions").items():
        topic, sep, group = str(key).partition("@")
        if not sep or topic_problem(topic) or group_problem(group):
            raise RemoteProtocolError(f"reset versions: bad key {shown(key)}")
        if type(n) is not int or not 0 <= n < 2**63:
            raise RemoteProtocolError(f"reset versions: bad counter of {shown(key)}")
        out[str(key)] = n
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


# ---- merging (pure) ----------------------------------------------------------------


def changed_entries(mine: Mapping[str, V], theirs: Mapping[str, V]) -> dict[str, V]:
    """The master's entries that are new here or differ from the slave's: what a
    merge adds or updates (entries only the slave has are kept)."""
    return {name: value for name, value in theirs.items() if mine.get(name) != value}


def merge_delay_offsets(mine: Mapping[int, int], theirs: Mapping[int, int]) -> dict[int, int]:
    """Per delay level the larger offset; levels only the slave has are kept."""
    out = dict(mine)
    for level, offset in theirs.items():
        if offset > out.get(level, -1):
            out[level] = offset
    return out


@dataclass(frozen=True, slots=True)
class OffsetPush:
    """An offset the slave holds higher than its master: sent with increaseOnly."""

    topic: str
    group: str
    queue_id: int
    offset: int
    reset_version: int  # the key's counter both sides had when it was decided


@dataclass(slots=True)
class OffsetMerge:
    """What a round does with consumer offsets (``merge_offsets``)."""

    # topic@group -> its queue offsets on the slave from now on (None: the key goes)
    updates: dict[str, dict[int, int] | None] = field(default_factory=dict)
    # topic@group -> the slave's reset counter from now on (0: none)
    versions: dict[str, int] = field(default_factory=dict)
    # offsets for the master, at most ``max_pushes`` of them
    to_master: list[OffsetPush] = field(default_factory=list)
    more_to_master: int = 0  # found beyond ``max_pushes`` (sent in later rounds)
    resets_taken: int = 0  # keys taken from the master as they are (a reset)


def merge_offsets(mine: Mapping[str, Mapping[int, int]], my_versions: Mapping[str, int],
                  theirs: Mapping[str, Mapping[int, int]], their_versions: Mapping[str, int],
                  max_pushes: int = MAX_PUSHES_PER_ROUND) -> OffsetMerge:
    """The slave's offsets (``mine``, reset counters ``my_versions``) against its
    master's, per ``topic@group``:

    - the master's counter is higher (an admin reset, a rewind or a deleted
      topic there since the slave last looked): the master's offsets of the key
      replace the slave's as they are (the key goes when the master has none),
      and the slave takes the counter;
    - else each queue's offset is the larger of the two, and the queues where
      the slave's is the larger are sent to the master (``to_master``). A
      master's counter lower than the slave's (a master that lost its table)
      becomes the slave's, so the master's next reset is seen.
    """
    out = OffsetMerge()
    keys = dict.fromkeys([*mine, *theirs, *my_versions, *their_versions])
    for key in keys:
        master_version = their_versions.get(key, 0)
        slave_version = my_versions.get(key, 0)
        slave, master = mine.get(key), theirs.get(key)
        if master_version != slave_version:
            out.versions[key] = master_version
        elif slave == master:
            continue
        if master_version > slave_version:
            if slave != master:
                out.updates[key] = dict(master) if master else None
                out.resets_taken += 1
            continue
        merged = dict(slave) if slave else {}
        grew = False
        for qid, offset in (master or {}).items():
            if offset > merged.get(qid, -1):
                merged[qid] = offset
                grew = True
        if grew:
            out.updates[key] = merged
        topic, _, group = key.partition("@")
        for qid, offset in (slave or {}).items():
            if offset > (master or {}).get(qid, -1):
                if len(out.to_master) < max_pushes:
                    out.to_master.append(OffsetPush(topic, group, qid, offset, master_version))
                else:
                    out.more_to_master += 1
    return out


def merge_offsets_from_slave(mine: Mapping[str, Mapping[int, int]],
                             my_versions: Mapping[str, int],
                             theirs: Mapping[str, Mapping[int, int]],
                             their_versions: Mapping[str, int]) -> OffsetMerge:
    """A master takes a slave's offsets (``theirs``): after restoring its log
    from it, and from each slave heard as it starts (offsets committed to a
    slave while this master was down). Per queue the larger of the two, per
    key the larger reset counter (the slave's mirror the counters this master
    lost); a key this master reset since the slave last copied it (its counter
    is higher) keeps this master's offsets. Nothing is replaced downwards,
    nothing sent back."""
    out = OffsetMerge()
    for key, queues in theirs.items():
        if their_versions.get(key, 0) < my_versions.get(key, 0):
            continue  # reset here since: the slave's offsets are from before
        merged = dict(mine.get(key) or {})
        grew = False
        for qid, offset in queues.items():
            if offset > merged.get(qid, -1):
                merged[qid] = offset
                grew = True
        if grew:
            out.updates[key] = merged
    for key, n in their_versions.items():
        if n > my_versions.get(key, 0):
            out.versions[key] = n
    return out


# ---- the service ---------------------------------------------------------------------


class SlaveSynchronize:
    def __init__(self, controller: BrokerController, master_addr: Callable[[], str | None],
                 master_trusted: Callable[[], bool] = lambda: True) -> None:
        """``master_trusted``: whether the slave trusts its master's log now (the
        HA link to it is accepted); a round runs only then."""
        self.c = controller
        self.master_addr = master_addr
        self.master_trusted = master_trusted
        self.interval = controller.config.slave_sync_interval / 1000
        self.log = structlog.get_logger("broker.slave_sync").bind(
            broker=controller.config.broker_name)
        self.guard = Guard(self.log, "slave synchronize")
        self.synced = 0  # rounds completed
        self.skipped = 0  # rounds not run: the master not trusted
        self.pushed = 0  # offsets sent to the master
        self._trusted: bool | None = None  # as last logged

    def status(self) -> dict[str, int]:
        """A slave's figures for GET_BROKER_RUNTIME_INFO (mqadmin brokerStatus)."""
        return {"slaveSyncRounds": self.synced, "slaveSyncSkipped": self.skipped,
                "slaveSyncOffsetsSent": self.pushed}

    async def run(self, client: RemotingClient,
                  task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            addr = self.master_addr()
            if addr is not None:
                await self.guard.run(self._round, client, addr)
            await trio.sleep(self.interval if addr is not None else 1.0)

    async def _round(self, client: RemotingClient, addr: str) -> None:
        if self.trusted(addr):
            await self._sync_logged(client, addr)
        else:
            self.skipped += 1

    def trusted(self, addr: str) -> bool:
        """``master_trusted()``, logged once each time it changes."""
        trusted = bool(self.master_trusted())
        if trusted != self._trusted:
            if not trusted:
                self.log.warning("metadata sync paused: the master's log is not trusted",
                                 master=addr)
            elif self._trusted is not None:
                self.log.info("metadata sync resumed: the master's log is trusted", master=addr)
            self._trusted = trusted
        return trusted

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

    async def sync_all(self, client: RemotingClient, addr: str, from_slave: bool = False
                       ) -> None:
        """One round from the master at ``addr``. ``from_slave``: this broker is a
        master that restored its log from the slave at ``addr`` and takes its
        tables the same way, except offsets (``merge_offsets_from_slave``) and
        the ACL file (its own); nothing is sent back."""
        c = self.c
        topics, version = parse_topics(
            await self._fetch(client, addr, RequestCode.GET_ALL_TOPIC_CONFIG),
            c.config.max_queue_nums)
        tm = c.topic_config_manager
        if version != tm.data_version:
            tm.merge(changed_entries(tm.table, topics), version)
        body = await self._fetch(client, addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        offsets, resets = parse_offsets(body), parse_reset_versions(body)
        om = c.consumer_offset_manager
        # decided and applied with no await between: commits on this slave meanwhile
        # are either in ``mine`` or come after
        merge = (merge_offsets_from_slave if from_slave else merge_offsets)(
            om.offset_table, om.reset_versions, offsets, resets)
        om.apply_master(merge.updates, merge.versions)
        if merge.resets_taken:
            self.log.info("consumer offsets reset on the master taken", keys=merge.resets_taken)
        delay = parse_delay_offsets(await self._fetch(client, addr,
                                                      RequestCode.GET_ALL_DELAY_OFFSET))
        ss = c.schedule_service
        merged_delay = merge_delay_offsets(ss.offset_table, delay)
        if merged_delay != ss.offset_table:
            ss.offset_table = merged_delay
            snap = ss.snapshot(force=True)
            if snap is not None:
                await trio.to_thread.run_sync(snap.write)
        await self.sync_timer(client, addr)
        groups, gversion = parse_groups(
            await self._fetch(client, addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        sm = c.subscription_group_manager
        if gversion != sm.data_version:
            sm.merge(changed_entries(sm.table, groups), gversion)
        if from_slave:
            return
        if c.acl_file is not None:
            await self.sync_acl(client, addr, c.acl_file)
        if merge.to_master and self.trusted(addr):  # still: the round took a while
            await self.push_offsets(client, addr, merge)
        self.synced += 1

    async def sync_timer(self, client: RemotingClient, addr: str) -> None:
        """The master's timer checkpoint (GET_TIMER_CHECK_POINT), kept for a
        promotion (broker/timer/service.py ``start_following``). A master that
        does not serve it (an older one) or a bad answer leaves the copy as it
        was; the rest of the round goes on."""
        try:
            body = await self._fetch(client, addr, RequestCode.GET_TIMER_CHECK_POINT)
            cp = TimerCheckpoint.decode(json.dumps(body).encode())
        except (RemoteProtocolError, TypeError, ValueError) as exc:
            self.guard.note("timer checkpoint not copied from the master", "timer",
                            master=addr, error=describe(exc))
            return
        await self.c.timer_service.follow_master(cp)

    async def offsets_from_slave(self, client: RemotingClient, addr: str) -> int:
        """A master starting: the consumer offsets of its slave at ``addr``
        (``merge_offsets_from_slave``), so a group that committed to the slave
        while this master was down resumes where it was. Returns how many
        topic@group keys moved."""
        body = await self._fetch(client, addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        om = self.c.consumer_offset_manager
        merge = merge_offsets_from_slave(om.offset_table, om.reset_versions,
                                         parse_offsets(body), parse_reset_versions(body))
        om.apply_master(merge.updates, merge.versions)
        return len(merge.updates)

    async def push_offsets(self, client: RemotingClient, addr: str, merge: OffsetMerge) -> None:
        """The offsets this slave holds higher than its master's, to the master
        (increaseOnly: it takes them only forward, and only if the key was not
        reset since). One request each; a refusal ends the round's pushes."""
        sent = 0
        for push in merge.to_master:
            header = UpdateConsumerOffsetRequestHeader(
                push.group, push.topic, push.queue_id, push.offset,
                increase_only=True, reset_version=push.reset_version)
            resp = await client.invoke(addr, RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET, header.to_fields()), SYNC_TIMEOUT_S)
            if resp.code != ResponseCode.SUCCESS:
                self.guard.note("the master refused a consumer offset", resp.code,
                                master=addr, topic=push.topic, group=push.group,
                                code=resp.code, remark=shown(resp.remark or ""))
                break
            sent += 1
        self.pushed += sent
        self.log.info("consumer offsets committed here sent to the master", master=addr,
                      sent=sent, left_for_next_rounds=merge.more_to_master
                      + len(merge.to_master) - sent)

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
