"""mqadmin's consumer-group, offset, KV and name-server config commands (RocketMQ 4.x's
names, option letters and output): updateSubGroup, deleteSubGroup, consumerStatus,
cloneGroupOffset, skipAccumulatedMessage, allocateMQ, updateOrderConf, updateKvConfig,
deleteKvConfig, getNamesrvConfig, updateNamesrvConfig.

Registered on ``client.admin_cli.cli`` when this module is imported (admin_cli does).
Where this differs from RocketMQ, docs/mqadmin.md says so.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from client.admin import MQAdmin, MQAdminError
from client.admin_cli import (
    _broker_addrs,
    _echo_json,
    _print_table,
    _run,
    cli,
    config_lines,
    json_option,
    namesrv_option,
    tool_config,
)
from client.running_info import (
    PROP_CLIENT_VERSION,
    RunningInfo,
    analyze_process_queue,
    analyze_subscription,
    format_running_info,
)
from protocol.message import MessageQueue
from protocol.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from protocol.subscription_group import SubscriptionGroupConfig

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"  # the KV namespace of ordered topics' layouts


def _admin(namesrv: str) -> MQAdmin:
    return MQAdmin(namesrv, config=tool_config())


# ---- subscription groups ------------------------------------------------------------

# option -> SubscriptionGroupConfig wire name
_GROUP_OPTIONS = {
    "consume_enable": "consumeEnable",
    "consume_from_min_enable": "consumeFromMinEnable",
    "consume_broadcast_enable": "consumeBroadcastEnable",
    "retry_queue_nums": "retryQueueNums",
    "retry_max_times": "retryMaxTimes",
    "broker_id": "brokerId",
    "which_broker": "whichBrokerWhenConsumeSlowly",
    "notify_ids_changed": "notifyConsumerIdsChangedEnable",
    "orderly": "consumeMessageOrderly",
}


def new_group_config(group: str) -> dict[str, Any]:
    """What RocketMQ's updateSubGroup starts a group from: SubscriptionGroupConfig's
    defaults, but neither consumeBroadcastEnable nor consumeFromMinEnable."""
    base = SubscriptionGroupConfig(group).to_dict()
    base.update(consumeBroadcastEnable=False, consumeFromMinEnable=False)
    return base


def merged_group_config(group: str, current: dict[str, Any] | None,
                        given: dict[str, Any]) -> SubscriptionGroupConfig:
    """The group's config on one broker after updateSubGroup: its current config
    (or ``new_group_config`` for a new group) with the fields ``given`` (wire names)
    replaced. click.BadParameter for a value the broker would refuse."""
    merged = dict(current) if current is not None else new_group_config(group)
    merged.update(given)
    merged["groupName"] = group
    try:
        return SubscriptionGroupConfig.from_dict(merged)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command("updateSubGroup")
@namesrv_option()
@click.option("-b", "--brokerAddr", "broker_addr", default=None,
              help="Create the group on this broker.")
@click.option("-c", "--clusterName", "cluster", default=None,
              help="Create the group on every master of this cluster.")
@click.option("-g", "--groupName", "group", required=True, help="Consumer group name.")
@click.option("-s", "--consumeEnable", "consume_enable", type=bool, default=None,
              help="Pulls allowed (true/false).")
@click.option("-m", "--consumeFromMinEnable", "consume_from_min_enable", type=bool, default=None,
              help="From the min offset (true/false).")
@click.option("-d", "--consumeBroadcastEnable", "consume_broadcast_enable", type=bool,
              default=None, help="Broadcasting consumers allowed (true/false).")
@click.option("-q", "--retryQueueNums", "retry_queue_nums", type=click.IntRange(0),
              default=None, help="Queues of %RETRY%<group>.")
@click.option("-r", "--retryMaxTimes", "retry_max_times", type=click.IntRange(0), default=None,
              help="Reconsume attempts before %DLQ%<group>.")
@click.option("-i", "--brokerId", "broker_id", type=click.IntRange(0), default=None,
              help="Consume from which broker id.")
@click.option("-w", "--whichBrokerWhenConsumeSlowly", "which_broker", type=click.IntRange(0),
              default=None, help="Which broker id when consuming slowly.")
@click.option("-a", "--notifyConsumerIdsChanged", "notify_ids_changed", type=bool, default=None,
              help="Notify the group's consumers when members change (true/false).")
@click.option("-o", "--consumeMessageOrderly", "orderly", type=bool, default=None,
              help="A FIFO group: POP and gRPC consumers get each queue in order (true/false).")
@json_option
def update_sub_group(namesrv: str, broker_addr: str | None, cluster: str | None, group: str,
                     as_json: bool, **options: Any) -> None:
    """Create a subscription group, or update the settings given."""
    given = {_GROUP_OPTIONS[k]: v for k, v in options.items() if v is not None}
    group = group.strip()

    async def go() -> tuple[list[tuple[str, SubscriptionGroupConfig]], list[str]]:
        async with _admin(namesrv) as admin:
            done, notes = [], []
            for addr in await _broker_addrs(admin, broker_addr, cluster):
                cfg = merged_group_config(
                    group, (await admin.subscription_groups(addr)).get(group), given)
                await admin.update_subscription_group(addr, cfg.to_dict())
                done.append((addr, cfg))
                if "retryQueueNums" in given:
                    notes += await _retry_queue_nums(admin, group, addr, cfg.retry_queue_nums)
            return done, notes

    done, notes = _run(go)
    if as_json:
        _echo_json({"brokers": [a for a, _ in done], "config": done[0][1].to_dict() if done else {},
                    "notes": notes})
        return
    for addr, _ in done:
        click.echo(f"create subscription group to {addr} success.")
    for note in notes:
        click.echo(note)
    if done:
        click.echo(str(done[-1][1]))


async def _retry_queue_nums(admin: MQAdmin, group: str, addr: str, nums: int) -> list[str]:
    """As RocketMQ's updateSubGroup -q: the group's retry topic on ``addr`` gets
    ``nums`` write queues (read queues never shrink: messages in them stay readable)."""
    topic = RETRY_GROUP_TOPIC_PREFIX + group
    try:
        route = await admin.topic_route(topic)
    except MQAdminError:
        return []  # no retry topic yet: the broker creates it with retryQueueNums
    names = {bd.broker_name for bd in route.broker_datas if bd.master_addr() == addr}
    for qd in route.queue_datas:
        if qd.broker_name not in names or qd.write_queue_nums == nums or nums < 1:
            continue
        try:
            await admin.create_topic(topic, broker_addr=addr, write_queue_nums=nums,
                                     read_queue_nums=max(nums, qd.read_queue_nums), perm=qd.perm)
            return [f"update subscription retry topic {topic} queue nums to {addr} success."]
        except MQAdminError as exc:
            return [f"update subscription retry topic {topic} queue nums to {addr} failed: {exc}"]
    return []


@cli.command("deleteSubGroup")
@namesrv_option()
@click.option("-b", "--brokerAddr", "broker_addr", default=None,
              help="Delete the group from this broker.")
@click.option("-c", "--clusterName", "cluster", default=None,
              help="Delete the group from every master of this cluster.")
@click.option("-g", "--groupName", "group", required=True, help="Subscription group name.")
def delete_sub_group(namesrv: str, broker_addr: str | None, cluster: str | None,
                     group: str) -> None:
    """Delete a subscription group from brokers (its retry and dead-letter topics,
    and their messages, are kept)."""
    group = group.strip()

    async def go() -> list[str]:
        async with _admin(namesrv) as admin:
            addrs = await _broker_addrs(admin, broker_addr, cluster)
            for addr in addrs:
                await admin.delete_subscription_group(addr, group)
            return addrs

    for addr in _run(go):
        if cluster is None:
            click.echo(f"delete subscription group [{group}] from broker [{addr}] success.")
        else:
            click.echo(f"delete subscription group [{group}] from broker [{addr}] in cluster "
                       f"[{cluster}] success.")
    if cluster is not None:
        click.echo(f"kept the topics {RETRY_GROUP_TOPIC_PREFIX}{group} and "
                   f"{DLQ_GROUP_TOPIC_PREFIX}{group} and their messages (mqadmin deleteTopic "
                   "removes them)")


# ---- a group's consumers -------------------------------------------------------------

@cli.command("consumerStatus")
@namesrv_option()
@click.option("-g", "--consumerGroup", "group", required=True, help="Consumer group name.")
@click.option("-i", "--clientId", "client_id", default=None,
              help="Only this consumer, shown in full.")
@click.option("-s", "--jstack", "jstack", is_flag=True, default=False,
              help="With each consumer's threads and trio tasks.")
@json_option
def consumer_status(namesrv: str, group: str, client_id: str | None, jstack: bool,
                    as_json: bool) -> None:
    """A consumer group's consumers from the inside: settings, subscriptions, queues
    with their offsets and cached messages, pull and consume figures; and whether
    their subscriptions agree and any queue looks stuck."""

    async def go() -> dict[str, RunningInfo | str]:
        async with _admin(namesrv) as admin:
            return await admin.consumer_running_info(group.strip(), client_id, jstack)

    infos = _run(go)
    now_ms = int(time.time() * 1000)
    good = {cid: i for cid, i in infos.items() if isinstance(i, RunningInfo)}
    if client_id is not None:
        info = good[client_id]
        if as_json:
            _echo_json(info.to_dict())
        else:
            click.echo(format_running_info(info), nl=False)
        return
    same = analyze_subscription(good, now_ms)
    problems = [p for cid, i in sorted(good.items()) for p in analyze_process_queue(cid, i, now_ms)]
    if as_json:
        _echo_json({"clients": {cid: i.to_dict() if isinstance(i, RunningInfo) else {"error": i}
                                for cid, i in infos.items()},
                    "sameSubscription": same, "rebalanceOK": same, "problems": problems})
        return
    for n, (cid, i) in enumerate(sorted(infos.items()), 1):
        shown = i.properties.get(PROP_CLIENT_VERSION, "") if isinstance(i, RunningInfo) else i
        click.echo(f"{n:03d}  {cid:<40} {shown}".rstrip())
    if not good:
        raise click.ClickException(f"no consumer of {group} answered")
    if same:
        click.echo("\n\nSame subscription in the same group of consumer")
        click.echo("\n\nRebalance OK")  # RocketMQ's analyzeRebalance is always true
        for line in problems:
            click.echo(line)
    else:
        click.echo("\n\nWARN: Different subscription in the same group of consumer!!!")


# ---- group offsets ---------------------------------------------------------------

def _offset_rows(rows: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    return [{"brokerName": b, "queueId": q, "offset": o} for b, q, o in rows]


@cli.command("cloneGroupOffset")
@namesrv_option()
@click.option("-s", "--srcGroup", "src", required=True, help="The group to copy offsets from.")
@click.option("-d", "--destGroup", "dest", required=True, help="The group to copy them to.")
@click.option("-t", "--topic", required=True)
@click.option("-o", "--offline", "offline", default=None,
              help="Accepted as RocketMQ's (no effect): stop the destination group's "
                   "consumers first, or they write their own offsets back.")
@json_option
def clone_group_offset(namesrv: str, src: str, dest: str, topic: str, offline: str | None,
                       as_json: bool) -> None:
    """Give a group the offsets another group has on a topic."""
    src, dest, topic = src.strip(), dest.strip(), topic.strip()

    async def go() -> list[tuple[str, int, int]]:
        async with _admin(namesrv) as admin:
            return await admin.clone_group_offset(src, dest, topic)

    rows = _run(go)
    if as_json:
        _echo_json(_offset_rows(rows))
        return
    click.echo(f"clone group offset success. srcGroup[{src}], destGroup=[{dest}], topic[{topic}]")


@cli.command("skipAccumulatedMessage")
@namesrv_option()
@click.option("-g", "--group", required=True, help="The consumer group.")
@click.option("-t", "--topic", required=True)
@click.option("-f", "--force", "force", type=bool, default=True, show_default=True,
              help="Move offsets forward too (false: never forward, so nothing is skipped).")
@json_option
def skip_accumulated_message(namesrv: str, group: str, topic: str, force: bool,
                             as_json: bool) -> None:
    """Skip every message of a topic the group has not consumed yet: its offsets go
    to each queue's end; online consumers take the new offsets at once."""

    async def go() -> list[tuple[str, int, int]]:
        async with _admin(namesrv) as admin:
            return await admin.skip_accumulated(group.strip(), topic.strip(), force)

    rows = _run(go)
    if as_json:
        _echo_json(_offset_rows(rows))
        return
    _print_table(["#brokerName", "#queueId", "#offset"], [list(r) for r in rows])


@cli.command("allocateMQ")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-i", "--ipList", "ip_list", required=True,
              help="Consumer ids (or IPs), comma-separated.")
@json_option
def allocate_mq(namesrv: str, topic: str, ip_list: str, as_json: bool) -> None:
    """How a topic's queues split among consumers with these ids (averagely),
    as JSON."""
    ids = [i.strip() for i in ip_list.split(",")]

    async def go() -> dict[str, list[MessageQueue]]:
        async with _admin(namesrv) as admin:
            return await admin.allocate_mq(topic.strip(), ids)

    result = {"result": {cid: [{"brokerName": mq.broker_name, "queueId": mq.queue_id,
                                "topic": mq.topic} for mq in mqs]
                         for cid, mqs in _run(go).items()}}
    if as_json:
        _echo_json(result)
        return
    click.echo(json.dumps(result, separators=(",", ":")))


# ---- the name servers' KV config --------------------------------------------------

def order_conf_problem(conf: str) -> str | None:
    """None when ``conf`` is an order conf, ``brokerName:queueNums;...`` (each
    broker once, a positive number of queues)."""
    seen: set[str] = set()
    for part in conf.split(";"):
        name, sep, nums = part.strip().partition(":")
        if not sep or not name.strip() or not nums.strip().isdigit() or int(nums) < 1:
            return f"{part.strip()!r} is not brokerName:queueNums (e.g. broker-a:4;broker-b:4)"
        if name.strip() in seen:
            return f"broker {name.strip()!r} is given twice"
        seen.add(name.strip())
    return None


@cli.command("updateOrderConf")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-v", "--orderConf", "order_conf", default=None,
              help="brokerName1:num;brokerName2:num (with -m put).")
@click.option("-m", "--method", required=True, type=click.Choice(["put", "get", "delete"]),
              help="put, get or delete.")
@json_option
def update_order_conf(namesrv: str, topic: str, order_conf: str | None, method: str,
                      as_json: bool) -> None:
    """Put, get or delete an ordered topic's layout (the name servers' ORDER_TOPIC_CONFIG
    namespace; routes carry it when orderMessageEnable is on)."""
    topic = topic.strip()
    conf = (order_conf or "").strip()
    if method == "put":
        if not conf:
            raise click.UsageError("please set orderConf with option -v.")
        problem = order_conf_problem(conf)
        if problem is not None:
            raise click.BadParameter(problem, param_hint="-v/--orderConf")

    async def go() -> str | None:
        async with _admin(namesrv) as admin:
            if method == "get":
                return await admin.get_kv_config(ORDER_TOPIC_CONFIG, topic)
            if method == "put":
                await admin.put_kv_config(ORDER_TOPIC_CONFIG, topic, conf)
            else:
                await admin.delete_kv_config(ORDER_TOPIC_CONFIG, topic)
            return None

    got = _run(go)
    if method == "get":
        if as_json:
            _echo_json({"topic": topic, "orderConf": got})
        else:
            shown = "null" if got is None else got  # as RocketMQ prints an unset one
            click.echo(f"get orderConf success. topic=[{topic}], orderConf=[{shown}]")
    elif method == "put":
        click.echo(f"update orderConf success. topic=[{topic}], orderConf=[{conf}]")
    else:
        click.echo(f"delete orderConf success. topic=[{topic}]")


@cli.command("updateKvConfig")
@namesrv_option()
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
def update_kv_config(namesrv: str, namespace: str, key: str, value: str) -> None:
    """Create or update a KV config item on every name server."""

    async def go() -> list[str]:
        async with _admin(namesrv) as admin:
            return await admin.put_kv_config(namespace.strip(), key.strip(), value.strip())

    _run(go)
    click.echo("create or update kv config to namespace success.")


@cli.command("deleteKvConfig")
@namesrv_option()
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", required=True)
def delete_kv_config(namesrv: str, namespace: str, key: str) -> None:
    """Delete a KV config item from every name server."""

    async def go() -> list[str]:
        async with _admin(namesrv) as admin:
            return await admin.delete_kv_config(namespace.strip(), key.strip())

    _run(go)
    click.echo("delete kv config from namespace success.")


# ---- the name servers' own config ---------------------------------------------------

@cli.command("getNamesrvConfig")
@namesrv_option()
@json_option
def get_namesrv_config(namesrv: str, as_json: bool) -> None:
    """Each name server's configuration, as it runs (secrets masked)."""

    async def go() -> dict[str, dict[str, str]]:
        async with _admin(namesrv) as admin:
            return await admin.get_namesrv_config()

    configs = _run(go)
    if as_json:
        _echo_json(configs)
        return
    for line in config_lines(configs):
        click.echo(line)


@cli.command("updateNamesrvConfig")
@namesrv_option()
@click.option("-k", "--key", required=True, help="A key the name server can change while it runs.")
@click.option("-v", "--value", required=True)
def update_namesrv_config(namesrv: str, key: str, value: str) -> None:
    """Change a setting of every name server at run time; each writes it to the
    config file it was started from."""
    key, value = key.strip(), value.strip()

    async def go() -> dict[str, str | None]:
        async with _admin(namesrv) as admin:
            return await admin.update_namesrv_config({key: value})

    remarks = _run(go)
    click.echo(f"update name server config success![{', '.join(remarks)}]\n{key} : {value}")
    for addr, remark in remarks.items():
        if remark:
            click.echo(f"{addr}: {remark}")
