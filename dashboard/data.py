"""What the dashboard shows, read through the SDK (``MQAdmin``, ``PullConsumer``).

Everything here is bounded: each call runs under ``trio.fail_after(timeout)`` and
message reads stop at ``MAX_MESSAGES``. Failures raise ``DataError`` (shown as a
message on the page); bad form input raises ``InputError`` (a 400 page). Nothing
here reads a broker's files.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from client.admin import MQAdmin, MQAdminError
from client.errors import MQBrokerError, MQClientError
from client.pull_consumer import PullConsumer
from client.pull_result import PullStatus
from protocol.body import unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.message import MessageExt, MessageQueue
from protocol.names import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_TRACE_TOPIC,
    group_problem,
    topic_problem,
)
from protocol.route import PERM_RW, perm_to_string
from protocol.trace_data import TraceView
from protocol.trio.client import RemotingClient
from protocol.trio.errors import RemotingError

DEFAULT_TIMEOUT = 5.0
MAX_MESSAGES = 64  # per message query page
MAX_GROUPS = 200  # groups whose lag the group list computes
MAX_QUEUE_NUMS = 1024
DASHBOARD_CONSUMER_GROUP = "DASHBOARD_CONSUMER"

T = TypeVar("T")


class DataError(Exception):
    """A read or an update failed; the text is shown to the user."""


class InputError(ValueError):
    """A form or query parameter is invalid; the text is shown with a 400."""


# ---- pure helpers -------------------------------------------------------------------


def fmt_ts(ms: int | None) -> str:
    if not ms or ms <= 0:
        return "-"
    return _dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def body_view(body: bytes, mode: str) -> str:
    """A message body as text (UTF-8, bad bytes replaced) or hex (16 bytes a line)."""
    if mode == "hex":
        return "\n".join(
            f"{i:08x}  " + " ".join(f"{b:02x}" for b in body[i:i + 16])
            for i in range(0, len(body), 16)
        )
    return body.decode("utf-8", errors="replace")


def parse_time(value: str, what: str) -> int:
    """Milliseconds since the epoch from a form value: digits (ms), ``now``, or a
    local ``YYYY-MM-DDTHH:MM[:SS]`` / ``YYYY-MM-DD HH:MM[:SS]`` (HTML datetime-local)."""
    value = value.strip()
    if not value:
        raise InputError(f"{what}: a time is required")
    if value == "now":
        return int(time.time() * 1000)
    if value.isascii() and value.isdigit():
        return int(value)
    try:
        parsed = _dt.datetime.fromisoformat(value)
    except ValueError:
        raise InputError(f"{what}: {value[:40]!r} is not a time (YYYY-MM-DDTHH:MM[:SS] "
                         "or milliseconds since the epoch)") from None
    return int(parsed.timestamp() * 1000)


def check_topic_name(topic: str) -> str:
    topic = topic.strip()
    problem = topic_problem(topic)
    if problem:
        raise InputError(problem)
    return topic


def check_group_name(group: str) -> str:
    group = group.strip()
    problem = group_problem(group)
    if problem:
        raise InputError(problem)
    return group


def parse_int(value: str, what: str, low: int, high: int) -> int:
    value = value.strip()
    if not (value.isascii() and value.lstrip("-").isdigit()):
        raise InputError(f"{what}: {value[:20]!r} is not a whole number")
    n = int(value)
    if not low <= n <= high:
        raise InputError(f"{what}: {n} is not between {low} and {high}")
    return n


def is_system_topic(topic: str) -> bool:
    return (topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, "RMQ_SYS_"))
            or topic in {"TBW102", "SCHEDULE_TOPIC_XXXX", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
                         "TRANS_CHECK_MAX_TIME_TOPIC"})


@dataclass(frozen=True, slots=True)
class TopicForm:
    topic: str
    cluster: str | None
    broker_addr: str | None
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool


def parse_topic_form(form: Mapping[str, str]) -> TopicForm:
    """The create/update topic form. Raises InputError."""
    topic = check_topic_name(form.get("topic", ""))
    target = form.get("target", "").strip()
    cluster = broker_addr = None
    if target.startswith("cluster:"):
        cluster = target[len("cluster:"):]
    elif target.startswith("broker:"):
        broker_addr = target[len("broker:"):]
    if not (cluster or broker_addr):
        raise InputError("choose a cluster or a broker to create the topic on")
    read = parse_int(form.get("readQueueNums", "8"), "read queues", 1, MAX_QUEUE_NUMS)
    write = parse_int(form.get("writeQueueNums", "8"), "write queues", 1, MAX_QUEUE_NUMS)
    perm = parse_int(form.get("perm", str(PERM_RW)), "permission", 0, 7)
    if perm not in (2, 4, 6):
        raise InputError("permission: 2 (write), 4 (read) or 6 (read and write)")
    return TopicForm(topic, cluster, broker_addr, read, write, perm, form.get("order") == "on")


@dataclass(slots=True)
class BrokerRow:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    role: str = "?"
    runtime: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    tps: str = "-"
    write_rate: str = "-"
    disk: str = "-"
    stats_tps: str | None = None  # from VIEW_BROKER_STATS_DATA, when the broker has it


@dataclass(slots=True)
class MessageRow:
    msg: MessageExt
    broker_name: str
    # its trace (message id pages): the records found, or why none could be read
    trace: list[TraceView] | None = None
    trace_error: str | None = None

    @property
    def client_msg_id(self) -> str:
        """The id trace records use: the producer's unique key, else the offset id."""
        return self.msg.uniq_key or self.msg.msg_id

    @property
    def store_time(self) -> str:
        return fmt_ts(self.msg.store_timestamp)

    @property
    def born_time(self) -> str:
        return fmt_ts(self.msg.born_timestamp)


# ---- the data source (one per app) -------------------------------------------------


class DashboardData:
    """The dashboard's SDK handles: one MQAdmin, one PullConsumer (message reads)
    and one RemotingClient (requests MQAdmin has no method for).

    Use ``async with DashboardData(ns) as data`` (the app's lifespan)."""

    def __init__(self, namesrv_addr: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.namesrv_addr = namesrv_addr
        self.timeout = timeout
        self.admin = MQAdmin(namesrv_addr, timeout=timeout)
        self._consumer = PullConsumer(DASHBOARD_CONSUMER_GROUP, namesrv_addr,
                                      pull_timeout=timeout, request_timeout=timeout)
        self._client = RemotingClient()
        self._stack = AsyncExitStack()
        # addr -> (monotonic seconds, commitLogMaxOffset, put count) of the last look
        self._samples: dict[str, tuple[float, int, int | None]] = {}

    async def __aenter__(self) -> DashboardData:
        await self._stack.__aenter__()
        try:
            await self._stack.enter_async_context(self.admin)
            await self._stack.enter_async_context(self._client)
            await self._stack.enter_async_context(self._consumer)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.aclose()

    async def _bounded(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        """``fn()`` under the timeout; SDK errors become DataError."""
        try:
            with trio.fail_after(self.timeout * 2):
                return await fn()
        except trio.TooSlowError:
            raise DataError(f"{what}: no answer within {self.timeout * 2:.0f} s") from None
        except (MQAdminError, MQClientError, MQBrokerError, RemotingError) as exc:
            raise DataError(f"{what}: {exc}") from None

    async def _invoke(self, addr: str, code: int, fields: dict[str, Any] | None = None
                      ) -> RemotingCommand:
        cmd = RemotingCommand.request(code, fields)
        try:
            return await self._client.invoke(addr, cmd, self.timeout)
        except RemotingError as exc:
            raise MQAdminError(f"{addr}: {exc}") from exc

    # ---- cluster ------------------------------------------------------------------

    async def cluster(self) -> tuple[list[BrokerRow], dict[str, list[str]]]:
        """Every broker of every cluster with its role and runtime figures."""

        async def go() -> tuple[list[BrokerRow], dict[str, list[str]]]:
            info = await self.admin.cluster_info()
            rows: list[BrokerRow] = []
            for cluster, names in sorted(info["clusterAddrTable"].items()):
                for name in sorted(names):
                    bd = info["brokerAddrTable"].get(name)
                    if bd is None:
                        continue
                    for bid, addr in sorted(bd.broker_addrs.items()):
                        rows.append(BrokerRow(cluster, name, int(bid), addr))
            async with trio.open_nursery() as nursery:
                for row in rows:
                    nursery.start_soon(self._fill_runtime, row)
                    nursery.start_soon(self._fill_put_tps, row)
            clusters = {c: sorted(n) for c, n in info["clusterAddrTable"].items()}
            for row in rows:
                if row.stats_tps is not None:
                    row.tps = row.stats_tps
            return rows, clusters

        return await self._bounded("cluster", go)

    async def _fill_runtime(self, row: BrokerRow) -> None:
        try:
            table = await self.admin.broker_runtime_info(row.addr)
        except MQAdminError as exc:
            row.error = str(exc)
            return
        row.runtime = table
        row.role = str(table.get("brokerRole", "?"))
        now = time.monotonic()
        max_off = _int(table.get("commitLogMaxOffset"))
        min_off = _int(table.get("commitLogMinOffset"))
        puts = _int(table.get("putMessageTimesTotal", table.get("putCount")))
        if "putTps" in table:
            row.tps = str(table["putTps"])
        if max_off is not None and min_off is not None:
            row.disk = fmt_bytes(max_off - min_off)
        if "commitLogDiskRatio" in table:
            row.disk += f" (disk {float(table['commitLogDiskRatio']) * 100:.0f}% full)"
        last = self._samples.get(row.addr)
        if max_off is not None:
            self._samples[row.addr] = (now, max_off, puts)
        if last is not None and max_off is not None and now - last[0] > 0.2:
            elapsed = now - last[0]
            row.write_rate = fmt_bytes(int((max_off - last[1]) / elapsed)) + "/s"
            if row.tps == "-" and puts is not None and last[2] is not None:
                row.tps = f"{(puts - last[2]) / elapsed:.1f}"

    async def _fill_put_tps(self, row: BrokerRow) -> None:
        """Messages put and got per second over the last minute, from
        VIEW_BROKER_STATS_DATA (BROKER_PUT_NUMS / BROKER_GET_NUMS keyed by the broker's
        name, or by its cluster as RocketMQ 4.x keys them) where the broker answers it;
        otherwise the page measures puts between two views."""
        tps: dict[str, str] = {}
        for name in ("BROKER_PUT_NUMS", "BROKER_GET_NUMS"):
            for key in (row.broker_name, row.cluster):
                try:
                    resp = await self._invoke(row.addr, RequestCode.VIEW_BROKER_STATS_DATA,
                                              {"statsName": name, "statsKey": key})
                    if resp.code != ResponseCode.SUCCESS:
                        continue
                    minute = (unpack_body(resp.body) or {}).get("statsMinute") or {}
                    tps[name] = f"{float(minute['tps']):.1f}"
                    break
                except Exception:  # best effort: an older broker, an odd body
                    continue
        if "BROKER_PUT_NUMS" in tps:
            row.stats_tps = tps["BROKER_PUT_NUMS"]
            if "BROKER_GET_NUMS" in tps:
                row.stats_tps += f" / {tps['BROKER_GET_NUMS']}"

    async def broker_choices(self) -> tuple[list[str], list[str]]:
        """Cluster names and master addresses, for the create-topic form."""

        async def go() -> tuple[list[str], list[str]]:
            info = await self.admin.cluster_info()
            masters = sorted({bd.master_addr() for bd in info["brokerAddrTable"].values()
                              if bd.master_addr()})
            return sorted(info["clusterAddrTable"]), masters

        return await self._bounded("cluster", go)

    # ---- topics -------------------------------------------------------------------

    async def topics(self) -> list[str]:
        return sorted(await self._bounded("topic list", self.admin.topic_list))

    async def topic_detail(self, topic: str) -> dict[str, Any]:
        """Route (brokers, queue counts, permissions) and min/max offset per queue."""

        async def go() -> dict[str, Any]:
            route = await self.admin.topic_route(topic)
            status = await self.admin.topic_status(topic)
            queue_datas = [
                {"broker_name": q.broker_name, "read": q.read_queue_nums,
                 "write": q.write_queue_nums, "perm": perm_to_string(q.perm)}
                for q in route.queue_datas
            ]
            queues = [
                {"broker_name": s.broker_name, "queue_id": s.queue_id, "min": s.min_offset,
                 "max": s.max_offset, "count": s.max_offset - s.min_offset,
                 "updated": fmt_ts(s.last_update_timestamp)}
                for s in status
            ]
            return {"queue_datas": queue_datas, "queues": queues,
                    "total": sum(q["count"] for q in queues)}

        return await self._bounded(f"topic {topic}", go)

    async def create_topic(self, form: TopicForm) -> list[str]:
        return await self._bounded(f"create topic {form.topic}", lambda: self.admin.create_topic(
            form.topic, cluster=form.cluster, broker_addr=form.broker_addr,
            read_queue_nums=form.read_queue_nums, write_queue_nums=form.write_queue_nums,
            perm=form.perm, order=form.order))

    # ---- consumer groups ----------------------------------------------------------

    async def _masters(self) -> list[str]:
        info = await self.admin.cluster_info()
        return sorted({bd.master_addr() for bd in info["brokerAddrTable"].values()
                       if bd.master_addr()})

    async def groups(self) -> list[dict[str, Any]]:
        """Consumer groups (subscription groups and groups with committed offsets),
        their topics and total lag."""

        async def go() -> list[dict[str, Any]]:
            topics: dict[str, set[str]] = {}
            for addr in await self._masters():
                resp = await self._invoke(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
                if resp.code == ResponseCode.SUCCESS:
                    for key in (unpack_body(resp.body) or {}).get("offsetTable", {}):
                        topic, _, group = str(key).partition("@")
                        if group:
                            topics.setdefault(group, set()).add(topic)
                resp = await self._invoke(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
                if resp.code == ResponseCode.SUCCESS:
                    table = (unpack_body(resp.body) or {}).get("subscriptionGroupTable", {})
                    for group in table:
                        topics.setdefault(str(group), set())
            out = []
            for group in sorted(topics)[:MAX_GROUPS]:
                row: dict[str, Any] = {"group": group, "topics": sorted(topics[group]),
                                       "lag": None}
                if topics[group]:
                    try:
                        stats = await self.admin.consume_stats(group)
                        row["lag"] = sum(r["lag"] for r in stats)
                    except MQAdminError:
                        pass
                out.append(row)
            return out

        return await self._bounded("consumer groups", go)

    async def group_detail(self, group: str) -> dict[str, Any]:
        """Lag per queue and the group's online members."""

        async def go() -> dict[str, Any]:
            stats = await self.admin.consume_stats(group)
            for r in stats:
                r["lastTime"] = fmt_ts(r.get("lastTimestamp"))
            try:
                conns = await self.admin.consumer_connection(group)
                offline = None
            except MQAdminError as exc:
                conns, offline = [], str(exc)
            members: dict[str, dict[str, Any]] = {}
            subs: dict[str, str] = {}
            model = ""
            for b in conns:
                model = f"{b.get('messageModel', '')} {b.get('consumeType', '')} " \
                        f"{b.get('consumeFromWhere', '')}".strip()
                for c in b.get("connectionSet", []):
                    members[c.get("clientId", "?")] = c
                for topic, sub in (b.get("subscriptionTable") or {}).items():
                    subs[topic] = sub.get("subString", "*")
            return {"stats": stats, "total_lag": sum(r["lag"] for r in stats),
                    "topics": sorted({r["topic"] for r in stats} | set(subs)),
                    "members": sorted(members.values(), key=lambda c: c.get("clientId", "")),
                    "subscriptions": sorted(subs.items()), "model": model, "offline": offline}

        return await self._bounded(f"consumer group {group}", go)

    async def reset_offset(self, group: str, topic: str, timestamp_ms: int
                           ) -> list[tuple[str, int, int]]:
        return await self._bounded(
            f"reset {group} on {topic}",
            lambda: self.admin.reset_offset_by_time(group, topic, timestamp_ms))

    # ---- messages -----------------------------------------------------------------

    async def by_key(self, topic: str, key: str) -> list[MessageRow]:
        async def go() -> list[MessageRow]:
            msgs = await self.admin.query_by_key(topic, key, MAX_MESSAGES)
            return [MessageRow(m, _broker_of(m)) for m in msgs]

        return await self._bounded(f"messages of {topic} with key {key}", go)

    async def by_id(self, msg_id: str, topic: str | None) -> list[MessageRow]:
        """An offset msgId (store host + commit-log offset), else, with a topic,
        a producer's unique key (UNIQ_KEY)."""

        async def go() -> list[MessageRow]:
            try:
                return [MessageRow(await self.admin.view_message(msg_id), "")]
            except MQAdminError:
                if not topic:
                    raise
            msgs = await self.admin.query_by_key(topic, msg_id, 32)
            return [MessageRow(m, _broker_of(m)) for m in msgs if m.uniq_key == msg_id]

        return await self._bounded(f"message {msg_id}", go)

    async def trace(self, msg_id: str, trace_topic: str = RMQ_SYS_TRACE_TOPIC
                    ) -> list[TraceView]:
        """The trace records of a message (``MQAdmin.query_msg_trace``), at most
        MAX_MESSAGES trace messages read."""
        return await self._bounded(
            f"trace of {msg_id} in {trace_topic}",
            lambda: self.admin.query_msg_trace(msg_id, trace_topic, MAX_MESSAGES))

    async def add_traces(self, rows: list[MessageRow], trace_topic: str) -> None:
        """Each row's trace, or the reason it could not be read (no trace topic...)."""
        for row in rows:
            try:
                row.trace = await self.trace(row.client_msg_id, trace_topic)
            except DataError as exc:
                row.trace_error = str(exc)

    async def by_time(self, topic: str, begin_ms: int, end_ms: int) -> tuple[list[MessageRow], bool]:
        """Messages of ``topic`` stored in ``[begin_ms, end_ms)``, queue by queue,
        at most MAX_MESSAGES. Returns (rows, truncated)."""

        async def go() -> tuple[list[MessageRow], bool]:
            queues = await self._consumer.fetch_subscribe_message_queues(topic)
            rows: list[MessageRow] = []
            truncated = False
            for mq in queues:
                start = await self._consumer.search_offset(mq, begin_ms)
                end = await self._consumer.search_offset(mq, end_ms)
                if end <= start:
                    continue
                truncated |= await self._read_queue(mq, start, end, begin_ms, end_ms, rows)
                if len(rows) >= MAX_MESSAGES:
                    truncated = True
                    break
            rows.sort(key=lambda r: (r.msg.store_timestamp, r.broker_name, r.msg.queue_id))
            return rows[:MAX_MESSAGES], truncated

        return await self._bounded(f"messages of {topic}", go)

    async def _read_queue(self, mq: MessageQueue, start: int, end: int, begin_ms: int,
                          end_ms: int, rows: list[MessageRow]) -> bool:
        pos = start
        while pos < end and len(rows) < MAX_MESSAGES:
            want = min(32, end - pos, MAX_MESSAGES - len(rows))
            r = await self._consumer.pull(mq, "*", pos, want)
            if r.pull_status is PullStatus.OFFSET_ILLEGAL and pos < r.min_offset:
                pos = r.min_offset
                continue
            if r.pull_status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                return False
            for m in r.msg_found_list:
                if m.queue_offset < end and begin_ms <= m.store_timestamp < end_ms:
                    rows.append(MessageRow(m, mq.broker_name))
            if r.next_begin_offset <= pos:
                return False
            pos = r.next_begin_offset
        return pos < end

    # ---- producers ----------------------------------------------------------------

    async def producers(self, group: str, topic: str) -> list[dict[str, Any]]:
        """The producers of ``group`` connected to the brokers of ``topic``
        (GET_PRODUCER_CONNECTION_LIST)."""

        async def go() -> list[dict[str, Any]]:
            route = await self.admin.topic_route(topic)
            out: list[dict[str, Any]] = []
            errors = []
            for bd in route.broker_datas:
                addr = bd.select_addr()
                if addr is None:
                    continue
                resp = await self._invoke(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                          {"producerGroup": group})
                if resp.code == ResponseCode.SYSTEM_ERROR and "not exist" in (resp.remark or ""):
                    continue  # RocketMQ's answer for a group with no producer connected
                if resp.code != ResponseCode.SUCCESS:
                    name = (ResponseCode(resp.code).name
                            if resp.code in ResponseCode._value2member_map_ else str(resp.code))
                    errors.append(f"{addr}: {name} {resp.remark or ''}".rstrip())
                    continue
                for c in (unpack_body(resp.body) or {}).get("connectionSet", []):
                    out.append({"broker": addr, **c})
            if errors and not out:
                raise MQAdminError("producer connections: " + "; ".join(errors))
            return out

        return await self._bounded(f"producers of {group}", go)


def _broker_of(m: MessageExt) -> str:
    return str(m.store_host)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
