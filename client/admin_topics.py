"""mqadmin's topic, message, queue and cluster commands (RocketMQ 4.x's names,
option letters and output): topicClusterList, updateTopicPerm, printMsg,
printMsgByQueue, queryCq, clusterRT, sendMsgStatus, checkMsgSendRT,
cleanExpiredCQ, cleanUnusedTopic. Registered on admin_cli's ``cli`` group
(admin_cli imports this module); docs/mqadmin.md describes them.

Commands that print messages or one line per send stream their output (also
with ``--json``: one document printed as it is made, ``JsonStream``), so a
queue of millions of messages is never held in memory.
"""

from __future__ import annotations

import codecs
import datetime as _dt
import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import click
import trio

from client.admin import MQAdmin, MQAdminError
from client.admin_cli import (
    _echo_json,
    _print_table,
    _run,
    cli,
    json_option,
    message_dict,
    namesrv_option,
    tool_config,
    topic_config_text,
)
from client.errors import MQClientError
from client.pull_result import PullStatus
from protocol.message import Message, MessageExt, MessageQueue
from protocol.route import PERM_MAX

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # RocketMQ's MixAll.TOOLS_CONSUMER_GROUP
PULL_BATCH = 32  # messages per pull, as RocketMQ's print commands
TIME_FORMAT = "%Y-%m-%d#%H:%M:%S"  # RocketMQ's yyyy-MM-dd#HH:mm:ss:SSS, without :SSS
TIME_HELP = "currentTimeMillis, or yyyy-MM-dd#HH:mm:ss:SSS (local time)."
BEGIN_HELP = "From the first message stored at or after this time."
END_HELP = "Up to the first message stored at or after this time (excluded)."


# ---- pure helpers -------------------------------------------------------------------


def parse_timestamp(text: str) -> int:
    """A -b/-e value: milliseconds since the epoch, or ``yyyy-MM-dd#HH:mm:ss:SSS``
    in local time (RocketMQ's ``timestampFormat``). ValueError otherwise."""
    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    seconds, _, millis = value.rpartition(":")
    try:
        if not (millis.isdigit() and len(millis) <= 3):
            raise ValueError(millis)
        when = _dt.datetime.strptime(seconds, TIME_FORMAT)
    except ValueError:
        raise ValueError(f"{text!r} is neither milliseconds nor yyyy-MM-dd#HH:mm:ss:SSS") from None
    return int(when.timestamp()) * 1000 + int(millis)


def check_charset(name: str) -> str:
    """A -c charset name Python knows (UTF-8, GBK, ...); ValueError otherwise."""
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise ValueError(f"unknown charset {name!r}") from None


def java_queue(mq: MessageQueue) -> str:
    """RocketMQ's ``MessageQueue.toString``."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


def _java_map(props: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in props.items()) + "}"


def message_text(m: MessageExt, broker_name: str) -> str:
    """RocketMQ's ``MessageExt.toString`` (the body as its size: the BODY field
    follows it)."""
    return (f"MessageExt [brokerName={broker_name}, queueId={m.queue_id}, "
            f"storeSize={m.store_size}, queueOffset={m.queue_offset}, sysFlag={m.sys_flag}, "
            f"bornTimestamp={m.born_timestamp}, bornHost={m.born_host}, "
            f"storeTimestamp={m.store_timestamp}, storeHost={m.store_host}, "
            f"msgId={m.msg_id}, commitLogOffset={m.commit_log_offset}, bodyCRC={m.body_crc}, "
            f"reconsumeTimes={m.reconsume_times}, "
            f"preparedTransactionOffset={m.prepared_transaction_offset}, "
            f"toString()=Message{{topic='{m.topic}', flag={m.flag}, "
            f"properties={_java_map(m.properties)}, body=[{len(m.body)} bytes]}}]")


def body_text(m: MessageExt, charset: str, print_body: bool) -> str:
    return m.body.decode(charset, errors="replace") if print_body else "NOT PRINT BODY"


def message_line(m: MessageExt, broker_name: str, charset: str, print_body: bool) -> str:
    """One message as printMsg and printMsgByQueue print it."""
    return (f"MSGID: {m.msg_id} {message_text(m, broker_name)} "
            f"BODY: {body_text(m, charset, print_body)}")


def message_json(m: MessageExt, broker_name: str, charset: str, print_body: bool) -> dict[str, Any]:
    doc = message_dict(m)
    doc["brokerName"] = broker_name
    doc["body"] = m.body.decode(charset, errors="replace") if print_body else None
    return doc


def send_result_text(r: Any) -> str:
    """RocketMQ's ``SendResult.toString``."""
    return (f"SendResult [sendStatus={r.send_status.name}, msgId={r.msg_id}, "
            f"offsetMsgId={r.offset_msg_id}, messageQueue={java_queue(r.message_queue)}, "
            f"queueOffset={r.queue_offset}]")


def average_rt(rts: list[float]) -> float:
    """RocketMQ's average send RT: the first send (connections, routes) is left
    out, unless it is the only one."""
    timed = rts[1:] if len(rts) > 1 else rts
    return sum(timed) / len(timed) if timed else 0.0


def tag_counts(counts: dict[str, int]) -> list[tuple[str, int]]:
    """printMsgByQueue -f: tags by count, most first (then by name)."""
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def hello_body(size: int) -> bytes:
    """sendMsgStatus's body: ``hello jodie`` repeated up to ``size`` bytes or just past."""
    return b"hello jodie" * max(1, math.ceil(size / 11))


def cq_entry_text(row: dict[str, Any]) -> str:
    """RocketMQ's ``ConsumeQueueData.toString`` (no consume-queue extension here)."""
    evaluated = str(bool(row.get("eval", False))).lower()
    return (f"ConsumeQueueData{{physicOffset={row.get('physicOffset')}, "
            f"physicSize={row.get('physicSize')}, tagsCode={row.get('tagsCode')}, "
            f"extendDataJson='null', bitMap='null', eval={evaluated}, msg='null'}}")


class JsonStream:
    """One JSON document printed while it is made: ``head``'s fields, then the
    list ``field`` item by item (one a line: memory bounded however many), then
    ``close``'s fields."""

    def __init__(self, head: dict[str, Any], field: str) -> None:
        self.count = 0
        inner = json.dumps(head, sort_keys=True, default=str)[1:-1]
        click.echo("{" + (inner + ", " if inner else "") + json.dumps(field) + ": [")

    def add(self, item: Any) -> None:
        click.echo(("," if self.count else "") + json.dumps(item, sort_keys=True, default=str))
        self.count += 1

    def close(self, tail: dict[str, Any] | None = None) -> None:
        inner = json.dumps(tail or {}, sort_keys=True, default=str)[1:-1]
        click.echo("]" + (", " + inner if inner else "") + "}")


def _timestamp_option(letter: str, name: str, dest: str, help_text: str) -> Callable[..., Any]:
    return click.option(f"-{letter}", f"--{name}", dest, default=None, metavar="TIME",
                        help=help_text + " " + TIME_HELP)


def _times(begin: str | None, end: str | None) -> tuple[int | None, int | None]:
    try:
        return (None if begin is None else parse_timestamp(begin),
                None if end is None else parse_timestamp(end))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _charset(name: str) -> str:
    try:
        return check_charset(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="-c/--charsetName") from None


# ---- Topic ----------------------------------------------------------------------------


@cli.command("topicClusterList")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@json_option
def topic_cluster_list(namesrv: str, topic: str, as_json: bool) -> None:
    """Get cluster info for topic: the clusters its brokers belong to."""

    async def go() -> list[str]:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.topic_clusters(topic)

    clusters = _run(go)
    if as_json:
        _echo_json(clusters)
        return
    for name in clusters:
        click.echo(name)


@cli.command("updateTopicPerm")
@namesrv_option()
@click.option("-b", "--brokerAddr", "broker_addr", default=None,
              help="Only this master (host:port) of the topic's route.")
@click.option("-c", "--clusterName", "cluster", default=None,
              help="Every master of this cluster holding the topic.")
@click.option("-t", "--topic", required=True)
@click.option("-p", "--perm", type=click.IntRange(0, PERM_MAX), required=True,
              help="The topic's permission: 2 W, 4 R, 6 RW.")
@json_option
def update_topic_perm(namesrv: str, broker_addr: str | None, cluster: str | None, topic: str,
                      perm: int, as_json: bool) -> None:
    """Update topic perm (its queue counts and flags stay as each broker has them)."""
    if not broker_addr and not cluster:
        raise click.UsageError("give a broker address (-b) or a cluster (-c)")

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.update_topic_perm(topic, perm, broker_addr=broker_addr,
                                                 cluster=cluster)

    changes = _run(go)
    if as_json:
        _echo_json([{"brokerAddr": c.broker_addr, "brokerName": c.broker_name,
                     "oldPerm": c.old_perm, "newPerm": perm, "changed": c.changed,
                     "topicConfig": c.config.to_dict()} for c in changes])
        return
    for c in changes:
        if not c.changed:
            click.echo(f"new perm equals to the old one! ({c.broker_addr})")
            continue
        click.echo(f"update topic perm from {c.old_perm} to {perm} in {c.broker_addr} success.")
        if broker_addr:
            click.echo(f"{topic_config_text(c.config)}.")


# ---- Message ----------------------------------------------------------------------------


async def _print_queue(consumer: Any, mq: MessageQueue, expression: str, lo: int, hi: int,
                       on_messages: Callable[[list[MessageExt]], None],
                       on_unmatched: Callable[[int], None] | None = None) -> tuple[str, int]:
    """Pull ``mq`` from ``lo`` to ``hi`` (exclusive) in batches, handing on each
    batch's messages below ``hi``; returns the status the walk ended on and the
    offset it reached."""
    offset = lo
    status = PullStatus.NO_NEW_MSG.name
    while offset < hi:
        r = await consumer.pull(mq, expression, offset, PULL_BATCH)
        status = r.pull_status.name
        if r.pull_status is PullStatus.FOUND:
            on_messages([m for m in r.msg_found_list if m.queue_offset < hi])
        elif r.pull_status is PullStatus.NO_MATCHED_MSG:
            if on_unmatched is not None:
                on_unmatched(r.next_begin_offset)
        else:  # NO_NEW_MSG, OFFSET_ILLEGAL: this queue is done
            return status, r.next_begin_offset
        if r.next_begin_offset <= offset:  # no progress: never loop
            return status, offset
        offset = r.next_begin_offset
    return status, offset


async def _queue_range(consumer: Any, mq: MessageQueue, begin: int | None, end: int | None
                       ) -> tuple[int, int]:
    lo = await consumer.min_offset(mq) if begin is None else await consumer.search_offset(mq, begin)
    hi = await consumer.max_offset(mq) if end is None else await consumer.search_offset(mq, end)
    return lo, hi


@cli.command("printMsg")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-c", "--charsetName", "charset", default="UTF-8", show_default=True,
              help="The bodies' charset (e.g. UTF-8, GBK).")
@click.option("-s", "--subExpression", "expression", default="*", show_default=True,
              help="Subscribe expression, e.g. TagA || TagB.")
@_timestamp_option("b", "beginTimestamp", "begin", BEGIN_HELP)
@_timestamp_option("e", "endTimestamp", "end", END_HELP)
@click.option("-d", "--printBody", "print_body", type=click.BOOL, default=True, show_default=True,
              help="Print the bodies (true|false).")
@json_option
def print_msg(namesrv: str, topic: str, charset: str, expression: str, begin: str | None,
              end: str | None, print_body: bool, as_json: bool) -> None:
    """Print Message Detail: every message of a topic, queue by queue."""
    from client import PullConsumer

    charset = _charset(charset)
    begin_ms, end_ms = _times(begin, end)

    async def go() -> None:
        stream = JsonStream({"topic": topic}, "messages") if as_json else None
        queues_seen = []
        async with PullConsumer(TOOLS_CONSUMER_GROUP, namesrv_addr=namesrv,
                                config=tool_config()) as consumer:
            for mq in await consumer.fetch_subscribe_message_queues(topic):
                lo, hi = await _queue_range(consumer, mq, begin_ms, end_ms)
                if stream is None:
                    click.echo(f"minOffset={lo}, maxOffset={hi}, {java_queue(mq)}")

                def found(msgs: list[MessageExt], mq: MessageQueue = mq) -> None:
                    for m in msgs:
                        if stream is not None:
                            stream.add(message_json(m, mq.broker_name, charset, print_body))
                        else:
                            click.echo(message_line(m, mq.broker_name, charset, print_body))

                def unmatched(offset: int, mq: MessageQueue = mq) -> None:
                    if stream is None:
                        click.echo(f"{java_queue(mq)} no matched msg. status=NO_MATCHED_MSG, "
                                   f"offset={offset}")

                status, reached = await _print_queue(consumer, mq, expression, lo, hi, found,
                                                     unmatched)
                queues_seen.append({"brokerName": mq.broker_name, "queueId": mq.queue_id,
                                    "minOffset": lo, "maxOffset": hi, "status": status})
                if stream is None:
                    if status in (PullStatus.NO_NEW_MSG.name, PullStatus.OFFSET_ILLEGAL.name):
                        click.echo(f"{java_queue(mq)} print msg finished. status={status}, "
                                   f"offset={reached}")
                    click.echo("-" * 56)
        if stream is not None:
            stream.close({"queues": queues_seen})

    _run(go)


@cli.command("printMsgByQueue")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-a", "--brokerName", "broker_name", required=True)
@click.option("-i", "--queueId", "queue_id", type=click.IntRange(min=0), required=True)
@click.option("-c", "--charsetName", "charset", default="UTF-8", show_default=True,
              help="The bodies' charset (e.g. UTF-8, GBK).")
@click.option("-s", "--subExpression", "expression", default="*", show_default=True,
              help="Subscribe expression, e.g. TagA || TagB.")
@_timestamp_option("b", "beginTimestamp", "begin", BEGIN_HELP)
@_timestamp_option("e", "endTimestamp", "end", END_HELP)
@click.option("-p", "--printMsg", "print_messages", type=click.BOOL, default=False,
              show_default=True, help="Print the messages (true|false).")
@click.option("-d", "--printBody", "print_body", type=click.BOOL, default=False,
              show_default=True, help="Print the bodies (true|false).")
@click.option("-f", "--calculate", "by_tag", type=click.BOOL, default=False, show_default=True,
              help="Count the messages by tag (true|false).")
@json_option
def print_msg_by_queue(namesrv: str, topic: str, broker_name: str, queue_id: int, charset: str,
                       expression: str, begin: str | None, end: str | None,
                       print_messages: bool, print_body: bool, by_tag: bool,
                       as_json: bool) -> None:
    """Print Message Detail by queueId (and count its messages by tag)."""
    from client import PullConsumer

    charset = _charset(charset)
    begin_ms, end_ms = _times(begin, end)
    mq = MessageQueue(topic, broker_name, queue_id)

    async def go() -> None:
        counts: dict[str, int] = {}
        async with PullConsumer(TOOLS_CONSUMER_GROUP, namesrv_addr=namesrv,
                                config=tool_config()) as consumer:
            lo, hi = await _queue_range(consumer, mq, begin_ms, end_ms)
            stream = JsonStream({"topic": topic, "brokerName": broker_name, "queueId": queue_id,
                                 "minOffset": lo, "maxOffset": hi}, "messages") if as_json else None

            def found(msgs: list[MessageExt]) -> None:
                for m in msgs:
                    if by_tag and m.tags:
                        counts[m.tags] = counts.get(m.tags, 0) + 1
                    if not print_messages:
                        continue
                    if stream is not None:
                        stream.add(message_json(m, broker_name, charset, print_body))
                    else:
                        click.echo(message_line(m, broker_name, charset, print_body))

            await _print_queue(consumer, mq, expression, lo, hi, found)
        ordered = tag_counts(counts)
        if stream is not None:
            stream.close({"tagCounts": [{"tag": t, "count": n} for t, n in ordered]}
                         if by_tag else None)
            return
        for tag, n in ordered:
            click.echo(f"Tag: {tag:<30} Count: {n}")

    _run(go)


@cli.command("checkMsgSendRT")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-a", "--amount", type=click.IntRange(min=1), default=100, show_default=True,
              help="How many messages to send (queue after queue).")
@click.option("-s", "--size", type=click.IntRange(min=1), default=128, show_default=True,
              help="Body size in bytes.")
@json_option
def check_msg_send_rt(namesrv: str, topic: str, amount: int, size: int, as_json: bool) -> None:
    """Check message send response time: one line per send, then the average."""
    from client import Producer

    async def go() -> None:
        rts: list[float] = []
        msg = Message(topic, b"a" * size)
        async with Producer(str(int(time.time() * 1000)), namesrv_addr=namesrv,
                            config=tool_config()) as producer:
            queues = await producer.fetch_publish_message_queues(topic)
            stream = JsonStream({"topic": topic}, "sends") if as_json else None
            if stream is None:
                click.echo(f"{'#Broker Name':<32}  {'#QID':<4}  {'#Send Result':<20}    #RT")
            for i in range(amount):
                mq = queues[i % len(queues)]
                start = time.perf_counter()
                try:
                    await producer.send(msg, mq)
                    ok = True
                except MQClientError:
                    ok = False
                rt = (time.perf_counter() - start) * 1000
                rts.append(rt)
                if stream is not None:
                    stream.add({"brokerName": mq.broker_name, "queueId": mq.queue_id,
                                "sendResult": ok, "rt": round(rt, 3)})
                else:
                    click.echo(f"{mq.broker_name:<32}  {mq.queue_id:<4}  {str(ok).lower():<20}    "
                               f"{rt:.2f}")
        if stream is not None:
            stream.close({"avgRT": round(average_rt(rts), 3)})
        else:
            click.echo(f"Avg RT: {average_rt(rts):.2f}")

    _run(go)


# ---- Broker ---------------------------------------------------------------------------


@cli.command("sendMsgStatus")
@namesrv_option()
@click.option("-b", "--brokerName", "broker_name", required=True,
              help="The broker (its own topic, named after it, takes the messages).")
@click.option("-s", "--messageSize", "size", type=click.IntRange(min=1), default=128,
              show_default=True, help="Body size in bytes.")
@click.option("-c", "--count", type=click.IntRange(min=1), default=50, show_default=True,
              help="How many messages.")
@json_option
def send_msg_status(namesrv: str, broker_name: str, size: int, count: int,
                    as_json: bool) -> None:
    """Send msg to broker: messages to the broker's own topic, each send's RT and result."""
    from client import Producer

    async def go() -> None:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            if broker_name not in (await admin.cluster_info())["brokerAddrTable"]:
                # else the send could create a topic of that name (autoCreateTopicEnable)
                raise click.ClickException(f"no broker named {broker_name} is registered")
        async with Producer("PID_SMSC", namesrv_addr=namesrv,
                            config=tool_config()) as producer:
            try:  # a warm-up, as RocketMQ's
                await producer.send(Message(broker_name, hello_body(16)))
            except MQClientError as exc:
                raise click.ClickException(
                    f"cannot send to the topic {broker_name} (a broker's own topic: is "
                    f"{broker_name} a broker name, with brokerTopicEnable=true?): {exc}") from None
            stream = JsonStream({"brokerName": broker_name}, "sends") if as_json else None
            for _ in range(count):
                start = time.perf_counter()
                r = await producer.send(Message(broker_name, hello_body(size)))
                rt = (time.perf_counter() - start) * 1000
                if stream is not None:
                    stream.add({"rt": round(rt, 3), "sendStatus": r.send_status.name,
                                "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id,
                                "brokerName": r.message_queue.broker_name,
                                "queueId": r.message_queue.queue_id,
                                "queueOffset": r.queue_offset})
                else:
                    click.echo(f"rt={rt:.2f}ms, SendResult={send_result_text(r)}")
            if stream is not None:
                stream.close()

    _run(go)


async def _clean_targets(admin: MQAdmin, broker_addr: str | None, cluster: str | None,
                         masters_only: bool) -> list[str]:
    if broker_addr:
        return [broker_addr]
    return await admin.broker_addrs(cluster, masters_only=masters_only)


def _clean_command(name: str, doc: str, masters_only: bool,
                   call: Callable[[MQAdmin, str], Awaitable[Any]]) -> None:
    """cleanExpiredCQ and cleanUnusedTopic: one broker (-b), a cluster's (-c) or
    every cluster's brokers; each one's report, then ``success``; a broker that
    failed makes the command fail once the others are done."""

    @namesrv_option()
    @click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Only this broker.")
    @click.option("-c", "--cluster", "cluster", default=None,
                  help="This cluster's brokers (default: every cluster's).")
    @json_option
    def command(namesrv: str, broker_addr: str | None, cluster: str | None,
                as_json: bool) -> None:
        async def go() -> list[tuple[str, Any]]:
            out: list[tuple[str, Any]] = []
            async with MQAdmin(namesrv, config=tool_config()) as admin:
                for addr in await _clean_targets(admin, broker_addr, cluster, masters_only):
                    try:
                        out.append((addr, await call(admin, addr)))
                    except MQAdminError as exc:
                        out.append((addr, str(exc)))
            return out

        results = _run(go)
        failed = [f"{addr}: {r}" for addr, r in results if isinstance(r, str)]
        if as_json:
            _echo_json([r.to_dict() if not isinstance(r, str) else {"brokerAddr": a, "error": r}
                        for a, r in results])
        else:
            for addr, r in results:
                if isinstance(r, str):
                    continue
                shown = ", ".join(f"{t}/{q}" for t, q in r.removed)
                more = r.removed_count - len(r.removed)
                line = f"{addr}: removed {r.removed_count} consume queue(s)"
                line += f": {shown}" if shown else ""
                click.echo(line + (f" and {more} more" if more > 0 else ""))
                for topic, reason in r.kept:
                    click.echo(f"{addr}: kept {topic}: {reason}")
        if failed:
            raise click.ClickException("false: " + "; ".join(failed))
        if not as_json:
            click.echo("success")

    command.__doc__ = doc
    cli.command(name)(command)


_clean_command(
    "cleanExpiredCQ",
    "Clean expired ConsumeQueue on broker: queues whose messages are all gone, of "
    "topics nothing refers to (masters and slaves).", False,
    lambda admin, addr: admin.clean_expired_consume_queue(addr))
_clean_command(
    "cleanUnusedTopic",
    "Clean unused topic on broker: the queues of topics with no topic config that "
    "nothing refers to (masters).", True,
    lambda admin, addr: admin.clean_unused_topic(addr))


# ---- Queue ----------------------------------------------------------------------------


@cli.command("queryCq")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-q", "--queue", "queue_id", type=click.IntRange(min=0), required=True,
              help="The queue id.")
@click.option("-i", "--index", type=click.IntRange(min=0), required=True,
              help="The first consume-queue index (queue offset) to show.")
@click.option("-c", "--count", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many entries (the broker answers at most 1000).")
@click.option("-b", "--broker", "broker_addr", default=None,
              help="Broker address (default: the first broker of the topic's route).")
@click.option("-g", "--consumer", "group", default=None,
              help="A consumer group: its subscription, and whether it selects each entry.")
@json_option
def query_cq(namesrv: str, topic: str, queue_id: int, index: int, count: int,
             broker_addr: str | None, group: str | None, as_json: bool) -> None:
    """Query cq command: a queue's consume-queue entries (commit-log offset, size, tags hash)."""

    async def go() -> tuple[str, dict[str, Any]]:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.query_consume_queue(topic, queue_id, index, count,
                                                   broker_addr=broker_addr, group=group)

    addr, body = _run(go)
    if as_json:
        _echo_json({"brokerAddr": addr, **body})
        return
    rule = "=" * 38
    if body.get("subscriptionData") is not None:
        click.echo(f"Subscription data: \n{json.dumps(body['subscriptionData'], indent=2)}")
        click.echo(rule)
    if body.get("filterData") is not None:
        click.echo(f"Filter data: \n{body['filterData']}")
        click.echo(rule)
    click.echo(f"Queue data: \nmax: {body.get('maxQueueIndex')}, min: {body.get('minQueueIndex')}")
    click.echo(rule)
    for row in body["queueData"]:
        if isinstance(row, dict):
            click.echo(f"idx: {row.get('index')}\n{cq_entry_text(row)}\n{rule}")
    if body.get("remark"):
        click.echo(str(body["remark"]))


# ---- Cluster --------------------------------------------------------------------------


@cli.command("clusterRT")
@namesrv_option()
@click.option("-a", "--amount", type=click.IntRange(min=1), default=100, show_default=True,
              help="Messages sent to each broker per round.")
@click.option("-s", "--size", type=click.IntRange(min=1), default=128, show_default=True,
              help="Body size in bytes.")
@click.option("-c", "--cluster", default=None, help="Only this cluster (default: every cluster).")
@click.option("-p", "--printAsTlog", "tlog", type=click.BOOL, default=False, show_default=True,
              help="Print time|machineRoom|cluster|broker|RT lines (true|false).")
@click.option("-m", "--machineRoom", "machine_room", default="noname", show_default=True,
              help="The machine room named in tlog lines.")
@click.option("-i", "--interval", type=click.FloatRange(min=0), default=10, show_default=True,
              help="Seconds between rounds.")
@click.option("-r", "--rounds", type=click.IntRange(min=0), default=0, show_default=True,
              help="Stop after this many rounds (0: run until interrupted, as RocketMQ's).")
@json_option
def cluster_rt(namesrv: str, amount: int, size: int, cluster: str | None, tlog: bool,
               machine_room: str, interval: float, rounds: int, as_json: bool) -> None:
    """List All clusters Message Send RT: each broker's average send RT, round after round.

    Messages go to each broker's own topic (brokerTopicEnable). With --json: one
    JSON array a line per round."""
    from client import Producer

    async def one_broker(producer: Any, broker_name: str) -> tuple[float, int, int]:
        msg = Message(broker_name, b"a" * size)
        rts: list[float] = []
        ok = failed = 0
        for _ in range(amount):
            start = time.perf_counter()
            try:
                await producer.send(msg)
                ok += 1
            except MQClientError:
                failed += 1
            rts.append((time.perf_counter() - start) * 1000)
        return average_rt(rts), ok, failed

    async def go() -> None:
        async with MQAdmin(namesrv, config=tool_config()) as admin, \
                Producer(str(int(time.time() * 1000)), namesrv_addr=namesrv,
                         config=tool_config()) as producer:
            table = (await admin.cluster_info())["clusterAddrTable"]
            names = [cluster] if cluster else sorted(table)
            for name in names:
                if not table.get(name):
                    raise click.ClickException(f"cluster [{name}] not exist")
            done = 0
            while True:
                rows = []
                for cname in names:
                    for bname in sorted(table[cname]):
                        rt, ok, failed = await one_broker(producer, bname)
                        rows.append([cname, bname, rt, ok, failed])
                        if tlog and not as_json:
                            now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
                            click.echo(f"{now}|{machine_room}|{cname}|{bname}|"
                                       f"{math.floor(rt + 0.5)}")
                if as_json:
                    click.echo(json.dumps([{"clusterName": c, "brokerName": b, "rt": round(rt, 3),
                                            "successCount": ok, "failCount": failed}
                                           for c, b, rt, ok, failed in rows]))
                elif not tlog:
                    if done:
                        click.echo("")
                    _print_table(["#Cluster Name", "#Broker Name", "#RT", "#successCount",
                                  "#failCount"], rows)
                done += 1
                if rounds and done >= rounds:
                    return
                await trio.sleep(interval)

    _run(go)
