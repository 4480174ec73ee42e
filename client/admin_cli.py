"""``mqadmin``: RocketMQ's admin commands, with the same names and option letters."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Awaitable, Callable
from typing import Any

import click
import trio

from client.admin import MQAdmin, MQAdminError
from protocol.logs import configure_logging
from protocol.names import RMQ_SYS_TRANS_HALF_TOPIC
from protocol.record import TRANSACTION_COMMIT_TYPE, transaction_type
from protocol.route import perm_to_string
from protocol.trio.daemon import first_leaf

NAMESRV_HELP = 'Name server address list, "host:port;host:port".'


def _run(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    try:
        return trio.run(fn, *args)
    except (Exception, BaseExceptionGroup) as exc:
        leaf = first_leaf(exc)
        if isinstance(leaf, click.ClickException):
            raise leaf from None
        if isinstance(leaf, MQAdminError):
            raise click.ClickException(str(leaf)) from None
        if type(leaf).__module__.startswith(("client", "protocol")):  # SDK errors
            raise click.ClickException(f"{type(leaf).__name__}: {leaf}") from None
        raise


def _fmt_ts(ms: int) -> str:
    if ms <= 0:
        return "-"
    return _dt.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Administer trio-rocketmq name servers and brokers."""


@cli.command("updateTopic")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-c", "--clusterName", "cluster", default=None, help="Create on every master of the cluster.")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Create on this broker only.")
@click.option("-t", "--topic", required=True)
@click.option("-r", "--readQueueNums", "read", type=int, default=8, show_default=True)
@click.option("-w", "--writeQueueNums", "write", type=int, default=8, show_default=True)
@click.option("-p", "--perm", type=int, default=6, show_default=True, help="2 write, 4 read, 6 both.")
@click.option("-o", "--order", type=bool, default=False, show_default=True)
def update_topic(namesrv: str, cluster: str | None, broker_addr: str | None, topic: str,
                 read: int, write: int, perm: int, order: bool) -> None:
    """Create or update a topic."""

    async def go() -> list[str]:
        async with MQAdmin(namesrv) as admin:
            return await admin.create_topic(topic, cluster=cluster, broker_addr=broker_addr,
                                            read_queue_nums=read, write_queue_nums=write,
                                            perm=perm, order=order)

    for addr in _run(go):
        click.echo(f"create topic to {addr} success.")
    click.echo(f"TopicConfig [topicName={topic}, readQueueNums={read}, writeQueueNums={write}, "
               f"perm={perm_to_string(perm)}, order={str(order).lower()}]")


@cli.command("deleteTopic")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-c", "--clusterName", "cluster", required=True)
@click.option("-t", "--topic", required=True)
def delete_topic(namesrv: str, cluster: str, topic: str) -> None:
    """Delete a topic from a cluster's brokers and the name servers."""

    async def go() -> None:
        async with MQAdmin(namesrv) as admin:
            await admin.delete_topic(topic, cluster)

    _run(go)
    click.echo(f"delete topic [{topic}] from cluster [{cluster}] success.")


@cli.command("topicList")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
def topic_list(namesrv: str) -> None:
    """List every topic the name servers know."""

    async def go() -> list[str]:
        async with MQAdmin(namesrv) as admin:
            return await admin.topic_list()

    for topic in _run(go):
        click.echo(topic)


@cli.command("topicRoute")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", required=True)
def topic_route(namesrv: str, topic: str) -> None:
    """Show a topic's route: brokers and queues."""
    import json

    async def go() -> Any:
        async with MQAdmin(namesrv) as admin:
            return await admin.topic_route(topic)

    click.echo(json.dumps(_run(go).to_dict(), indent=2, sort_keys=True))


@cli.command("topicStatus")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", required=True)
def topic_status(namesrv: str, topic: str) -> None:
    """Min and max offset of every queue of a topic."""

    async def go() -> Any:
        async with MQAdmin(namesrv) as admin:
            return await admin.topic_status(topic)

    rows = _run(go)
    click.echo(f"{'#Broker Name':<24}{'#QID':<6}{'#Min Offset':<14}{'#Max Offset':<14}#Last Updated")
    for r in rows:
        click.echo(f"{r.broker_name:<24}{r.queue_id:<6}{r.min_offset:<14}{r.max_offset:<14}"
                   f"{_fmt_ts(r.last_update_timestamp)}")


@cli.command("clusterList")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
def cluster_list(namesrv: str) -> None:
    """Clusters, their brokers and addresses."""

    async def go() -> Any:
        async with MQAdmin(namesrv) as admin:
            info = await admin.cluster_info()
            roles: dict[str, str] = {}
            for bd in info["brokerAddrTable"].values():
                for addr in bd.broker_addrs.values():
                    try:
                        roles[addr] = str((await admin.broker_runtime_info(addr))["brokerRole"])
                    except (MQAdminError, KeyError):
                        roles[addr] = "?"
            return info, roles

    info, roles = _run(go)
    click.echo(f"{'#Cluster Name':<20}{'#Broker Name':<24}{'#BID':<6}{'#Role':<14}#Addr")
    for cluster, names in sorted(info["clusterAddrTable"].items()):
        for name in sorted(names):
            bd = info["brokerAddrTable"].get(name)
            if bd is None:
                continue
            for bid, addr in sorted(bd.broker_addrs.items()):
                click.echo(f"{cluster:<20}{name:<24}{bid:<6}{roles.get(addr, '?'):<14}{addr}")


@cli.command("brokerStatus")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-b", "--brokerAddr", "broker_addr", required=True, help="Broker address host:port.")
def broker_status(namesrv: str, broker_addr: str) -> None:
    """A broker's runtime figures; HA: each slave's acknowledged offset and lag
    on a master, the master and lag on a slave."""

    async def go() -> Any:
        async with MQAdmin(namesrv) as admin:
            return await admin.broker_runtime_info(broker_addr)

    table = _run(go)
    ha = table.pop("ha", None)
    for key, value in sorted(table.items()):
        click.echo(f"{key:<28}: {value}")
    if isinstance(ha, dict):
        for i, slave in enumerate(ha.pop("slaves", None) or []):
            click.echo(f"{f'slave{i}AckedOffset':<28}: {slave.get('ackedOffset')}")
            click.echo(f"{f'slave{i}BehindBytes':<28}: {slave.get('behind')}")
        for key, value in sorted(ha.items()):
            click.echo(f"{'ha' + key[:1].upper() + key[1:]:<28}: {value}")


@cli.command("sendMessage")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", required=True)
@click.option("-p", "--body", required=True, help="Message body (UTF-8).")
@click.option("-k", "--keys", default=None)
@click.option("-c", "--tags", default=None)
@click.option("-b", "--broker", "broker_name", default=None, help="Send to this broker name.")
@click.option("-i", "--qid", "queue_id", type=int, default=None, help="Send to this queue id.")
def send_message(namesrv: str, topic: str, body: str, keys: str | None, tags: str | None,
                 broker_name: str | None, queue_id: int | None) -> None:
    """Send one message and print where it went."""
    from client import Message, Producer
    from protocol.message import MessageQueue

    async def go() -> Any:
        async with Producer("TOOLS_PRODUCER", namesrv_addr=namesrv) as producer:
            msg = Message(topic, body.encode(), tags=tags, keys=keys)
            if broker_name is not None or queue_id is not None:
                if broker_name is None or queue_id is None:
                    raise click.UsageError("-b and -i go together")
                return await producer.send(msg, MessageQueue(topic, broker_name, queue_id))
            return await producer.send(msg)

    r = _run(go)
    click.echo(f"{'#Broker Name':<24}{'#QID':<6}{'#Send Result':<14}#MsgId")
    click.echo(f"{r.message_queue.broker_name:<24}{r.message_queue.queue_id:<6}"
               f"{r.send_status.name:<14}{r.msg_id}")


@cli.command("consumeMessage")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", required=True)
@click.option("-g", "--consumerGroup", "group", default="TOOLS_CONSUMER", show_default=True)
@click.option("-b", "--brokerName", "broker_name", default=None, help="Only this broker's queues.")
@click.option("-i", "--queueId", "queue_id", type=int, default=None, help="Only this queue.")
@click.option("-o", "--offset", type=int, default=None, help="Start offset (default: the queue's min).")
@click.option("-c", "--messageCount", "count", type=int, default=128, show_default=True,
              help="Stop after this many messages.")
@click.option("-s", "--subExpression", "expression", default="*", show_default=True)
def consume_message(namesrv: str, topic: str, group: str, broker_name: str | None,
                    queue_id: int | None, offset: int | None, count: int, expression: str) -> None:
    """Print the messages of a topic (queue by queue, from the oldest)."""
    from client import PullConsumer, PullStatus

    async def go() -> None:
        printed = 0
        async with PullConsumer(group, namesrv_addr=namesrv) as consumer:
            queues = await consumer.fetch_subscribe_message_queues(topic)
            for mq in queues:
                if broker_name is not None and mq.broker_name != broker_name:
                    continue
                if queue_id is not None and mq.queue_id != queue_id:
                    continue
                pos = offset if offset is not None else await consumer.min_offset(mq)
                while printed < count:
                    r = await consumer.pull(mq, expression, pos, min(32, count - printed))
                    for m in r.msg_found_list:
                        click.echo(
                            f"MSGID: {m.msg_id} QUEUE: {mq.broker_name}:{mq.queue_id} "
                            f"OFFSET: {m.queue_offset} TAGS: {m.tags or ''} KEYS: {m.keys or ''} "
                            f"STORE: {_fmt_ts(m.store_timestamp)} BODY: "
                            f"{m.body.decode(errors='replace')}"
                        )
                        printed += 1
                    if r.pull_status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                        break
                    pos = r.next_begin_offset
                if printed >= count:
                    break
        click.echo(f"{printed} message(s)")

    _run(go)


def transaction_note(m: Any) -> str:
    """Whether a message took part in a transaction, as queryMsg* show it."""
    tx = transaction_type(m.sys_flag)
    if tx == TRANSACTION_COMMIT_TYPE:
        return ("committed transaction (its half message was at commit-log offset "
                f"{m.prepared_transaction_offset})")
    if m.topic == RMQ_SYS_TRANS_HALF_TOPIC or m.properties.get("TRAN_MSG", "").lower() == "true":
        return "half message of a transaction (prepared, not committed)"
    return "none"


def _print_message(m: Any) -> None:
    click.echo(f"OffsetID:            {m.msg_id}")
    click.echo(f"Topic:               {m.topic}")
    click.echo(f"Tags:                [{m.tags or ''}]")
    click.echo(f"Keys:                [{m.keys or ''}]")
    click.echo(f"Queue ID:            {m.queue_id}")
    click.echo(f"Queue Offset:        {m.queue_offset}")
    click.echo(f"CommitLog Offset:    {m.commit_log_offset}")
    click.echo(f"Reconsume Times:     {m.reconsume_times}")
    click.echo(f"Born Timestamp:      {_fmt_ts(m.born_timestamp)}")
    click.echo(f"Store Timestamp:     {_fmt_ts(m.store_timestamp)}")
    click.echo(f"Born Host:           {m.born_host}")
    click.echo(f"Store Host:          {m.store_host}")
    click.echo(f"Transaction:         {transaction_note(m)}")
    click.echo(f"Properties:          {m.properties}")
    click.echo(f"Message Body:        {m.body.decode(errors='replace')}")
    click.echo("")


@cli.command("queryMsgById")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-i", "--msgId", "msg_id", required=True, help="Offset message id (32 hex digits).")
def query_msg_by_id(namesrv: str, msg_id: str) -> None:
    """Show a message by its offset msgId."""

    async def go() -> Any:
        async with MQAdmin(namesrv) as admin:
            return await admin.view_message(msg_id)

    _print_message(_run(go))


@cli.command("queryMsgByKey")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", required=True)
@click.option("-k", "--msgKey", "key", required=True)
@click.option("-m", "--maxNum", "max_num", type=int, default=64, show_default=True)
def query_msg_by_key(namesrv: str, topic: str, key: str, max_num: int) -> None:
    """Messages of a topic with a key, newest first."""

    async def go() -> Any:
        async with MQAdmin(namesrv) as admin:
            return await admin.query_by_key(topic, key, max_num)

    msgs = _run(go)
    click.echo(f"{'#Message ID':<34}{'#QID':<6}#Offset")
    for m in msgs:
        click.echo(f"{m.msg_id:<34}{m.queue_id:<6}{m.queue_offset}")


@cli.command("queryMsgByUniqueKey")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", required=True)
@click.option("-i", "--msgId", "uniq", required=True, help="The UNIQ_KEY the producer returned.")
def query_msg_by_unique_key(namesrv: str, topic: str, uniq: str) -> None:
    """Show the message(s) with a producer msgId (UNIQ_KEY)."""

    async def go() -> Any:
        async with MQAdmin(namesrv) as admin:
            return [m for m in await admin.query_by_key(topic, uniq, 32) if m.uniq_key == uniq]

    msgs = _run(go)
    if not msgs:
        raise click.ClickException(f"no message with unique key {uniq} in {topic}")
    for m in msgs:
        _print_message(m)


@cli.command("queryMsgByOffset")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", required=True)
@click.option("-b", "--brokerName", "broker_name", required=True)
@click.option("-i", "--queueId", "queue_id", type=int, required=True)
@click.option("-o", "--offset", type=int, required=True)
def query_msg_by_offset(namesrv: str, topic: str, broker_name: str, queue_id: int, offset: int) -> None:
    """Show the message at a queue offset."""
    from client import PullConsumer, PullStatus
    from protocol.message import MessageQueue

    async def go() -> Any:
        async with PullConsumer("TOOLS_CONSUMER", namesrv_addr=namesrv) as c:
            r = await c.pull(MessageQueue(topic, broker_name, queue_id), "*", offset, 1)
            if r.pull_status != PullStatus.FOUND or r.msg_found_list[0].queue_offset != offset:
                raise click.ClickException(f"no message at offset {offset}: {r.pull_status.name}")
            return r.msg_found_list[0]

    _print_message(_run(go))


@cli.command("searchOffsetByTime")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-t", "--topic", required=True)
@click.option("-b", "--brokerName", "broker_name", required=True)
@click.option("-i", "--queueId", "queue_id", type=int, required=True)
@click.option("-s", "--timestamp", type=int, required=True, help="Milliseconds since the epoch.")
def search_offset_by_time(namesrv: str, topic: str, broker_name: str, queue_id: int,
                          timestamp: int) -> None:
    """First offset of a queue stored at or after a time."""

    async def go() -> int:
        async with MQAdmin(namesrv) as admin:
            return await admin.search_offset(topic, broker_name, queue_id, timestamp)

    click.echo(str(_run(go)))


@cli.command("consumerProgress")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-g", "--groupName", "group", required=True)
@click.option("-t", "--topicName", "topic", default=None)
def consumer_progress(namesrv: str, group: str, topic: str | None) -> None:
    """Per queue: broker offset, consumer offset, lag; and totals."""

    async def go() -> Any:
        async with MQAdmin(namesrv) as admin:
            return await admin.consume_stats(group, topic)

    rows = _run(go)
    click.echo(f"{'#Topic':<32}{'#Broker Name':<20}{'#QID':<6}{'#Broker Offset':<16}"
               f"{'#Consumer Offset':<18}{'#Diff':<10}#LastTime")
    for r in rows:
        click.echo(f"{r['topic']:<32}{r['brokerName']:<20}{r['queueId']:<6}{r['brokerOffset']:<16}"
                   f"{r['consumerOffset']:<18}{r['lag']:<10}{_fmt_ts(r['lastTimestamp'])}")
    click.echo(f"\nConsume TPS: -\nDiff Total: {sum(r['lag'] for r in rows)}")


@cli.command("consumerConnection")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-g", "--consumerGroup", "group", required=True)
def consumer_connection(namesrv: str, group: str) -> None:
    """The clients of a consumer group and their subscriptions."""

    async def go() -> Any:
        async with MQAdmin(namesrv) as admin:
            return await admin.consumer_connection(group)

    for b in _run(go):
        click.echo(f"Broker {b['broker']}: {b['messageModel']} {b['consumeType']} {b['consumeFromWhere']}")
        for c in b["connectionSet"]:
            click.echo(f"  {c['clientId']:<40}{c['clientAddr']}")
        for topic, sub in sorted(b["subscriptionTable"].items()):
            click.echo(f"  subscription {topic}: {sub.get('subString', '*')}")


@cli.command("resetOffsetByTime")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("-s", "--timestamp", required=True,
              help="Milliseconds since the epoch, or 'now'.")
def reset_offset_by_time(namesrv: str, group: str, topic: str, timestamp: str) -> None:
    """Move a group's offsets to the first message stored at or after a time."""
    import time as _time

    ts = int(_time.time() * 1000) if timestamp == "now" else int(timestamp)

    async def go() -> Any:
        async with MQAdmin(namesrv) as admin:
            return await admin.reset_offset_by_time(group, topic, ts)

    click.echo(f"{'#Broker Name':<20}{'#QID':<6}#Offset")
    for broker_name, qid, offset in _run(go):
        click.echo(f"{broker_name:<20}{qid:<6}{offset}")


def main() -> None:
    configure_logging("WARNING")
    cli()


if __name__ == "__main__":
    main()
