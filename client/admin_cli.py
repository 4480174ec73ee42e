"""``mqadmin``: RocketMQ's admin commands, with the same names and option letters."""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import click
import trio

from client.admin import MQAdmin, MQAdminError
from client.admin_help import GroupedCommands, listing, register_help
from client.config import ClientConfig
from client.credentials import AclCredentials
from client.errors import MQClientError
from protocol.names import RMQ_SYS_TRACE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC
from protocol.namesrv_addr import NAMESRV_ADDR_ENV
from protocol.record import TRANSACTION_COMMIT_TYPE, transaction_type
from protocol.route import TopicConfig, perm_to_string
from protocol.topic_attributes import AttributeProblem, parse_changes
from protocol.trace_data import TraceView
from protocol.trio import tls
from protocol.trio.daemon import first_leaf
from protocol.trio.logs import configure_logging

NAMESRV_HELP = 'Name server address list, "host:port;host:port".'
_F = TypeVar("_F", bound=Callable[..., Any])


def namesrv_option(default: str | None = None) -> Callable[[_F], _F]:
    """``-n/--namesrvAddr``: the flag, else the NAMESRV_ADDR environment variable
    (as RocketMQ's tools), else ``default`` (None: the option is required)."""
    if default is None:  # (click takes an explicit default=None for a default)
        return click.option("-n", "--namesrvAddr", "namesrv", required=True,
                            envvar=NAMESRV_ADDR_ENV, show_envvar=True, help=NAMESRV_HELP)
    return click.option("-n", "--namesrvAddr", "namesrv", default=default, show_default=True,
                        envvar=NAMESRV_ADDR_ENV, show_envvar=True, help=NAMESRV_HELP)


json_option = click.option("--json", "as_json", is_flag=True, default=False,
                           help="Print one JSON document instead of the table.")


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


def _echo_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=True, default=str))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Lines of a table as RocketMQ's printf tables: text left-aligned, numbers
    (a column whose cells are all numbers or empty) right-aligned under their
    header, floats with two decimals, columns two spaces apart, no trailing blanks."""
    texts = [[_cell(v) for v in row] for row in rows]
    numeric = [
        any(_is_number(row[i]) for row in rows)
        and all(row[i] is None or _is_number(row[i]) for row in rows)
        for i in range(len(header))
    ]
    widths = [max([len(h), *(len(t[i]) for t in texts)]) for i, h in enumerate(header)]
    lines = []
    for cells in [list(header), *texts]:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return lines


def _print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    for line in format_table(header, rows):
        click.echo(line)


def format_key_values(table: dict[str, Any], min_width: int = 32) -> list[str]:
    """``key : value`` lines, keys sorted and padded like RocketMQ's brokerStatus."""
    width = max([min_width, *(len(k) for k in table)])
    return [f"{k:<{width}}: {_cell(v)}" for k, v in sorted(table.items())]


def credential_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--access-key``/``--secret-key`` (else $ROCKETMQ_ACCESS_KEY/$ROCKETMQ_SECRET_KEY):
    the tool signs every request with them (brokers with aclEnable=true)."""
    fn = click.option("--secret-key", "secret_key", envvar="ROCKETMQ_SECRET_KEY",
                      default=None, show_envvar=True,
                      help="ACL secret key (signs requests).")(fn)
    return click.option("--access-key", "access_key", envvar="ROCKETMQ_ACCESS_KEY",
                        default=None, show_envvar=True,
                        help="ACL access key; with --secret-key, requests are signed.")(fn)


def check_credentials(access_key: str | None, secret_key: str | None) -> AclCredentials | None:
    """The tool's credentials, or None; a UsageError when only one half is given."""
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise click.UsageError("--access-key and --secret-key go together "
                               "(or ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY)")
    return AclCredentials(access_key, secret_key)


def tool_config() -> ClientConfig:
    """The ClientConfig of the running command's group (credentials, TLS), which
    every client the tool opens takes; an empty one outside a command."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    if isinstance(obj, ClientConfig):
        return obj
    if isinstance(obj, AclCredentials):  # a group that keeps only credentials (mqbench)
        return ClientConfig(credentials=obj)
    return ClientConfig()


def tool_credentials() -> AclCredentials | None:
    """The credentials given to the running command's group (None outside a command)."""
    return tool_config().credentials


def tls_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--tls`` (with ``--tls-ca``, and ``--tls-cert``/``--tls-key`` for servers with
    tls.server.need.client.auth): every connection of the tool uses TLS."""
    fn = click.option("--tls-key", "tls_key", default=None, metavar="PEM",
                      help="Client key (with --tls-cert).")(fn)
    fn = click.option("--tls-cert", "tls_cert", default=None, metavar="PEM",
                      help="Client certificate, for servers that need client auth.")(fn)
    fn = click.option("--tls-ca", "tls_ca", default=None, metavar="PEM",
                      help="CA the servers' certificates must chain to (default: the system's).")(fn)
    return click.option("--tls", "use_tls", is_flag=True, default=False,
                        help="Connect with TLS (servers with tlsMode permissive/enforcing).")(fn)


def check_tls_options(use_tls: bool, tls_ca: str | None, tls_cert: str | None,
                      tls_key: str | None) -> None:
    """A UsageError for TLS flags that do not go together."""
    if not use_tls:
        if tls_ca or tls_cert or tls_key:
            raise click.UsageError("--tls-ca/--tls-cert/--tls-key need --tls")
        return
    if bool(tls_cert) != bool(tls_key):
        raise click.UsageError("--tls-cert and --tls-key go together")


def tool_client_config(access_key: str | None, secret_key: str | None, use_tls: bool,
                       tls_ca: str | None, tls_cert: str | None,
                       tls_key: str | None) -> ClientConfig:
    """The tool's options as the ClientConfig of its clients; a UsageError for
    options that do not go together. Without --tls, ROCKETMQ_TLS_* still decide
    when a client starts, as for any client."""
    credentials = check_credentials(access_key, secret_key)
    check_tls_options(use_tls, tls_ca, tls_cert, tls_key)
    try:
        return ClientConfig(credentials=credentials, use_tls=use_tls, tls_ca_path=tls_ca or None,
                            tls_cert_path=tls_cert or None, tls_key_path=tls_key or None)
    except MQClientError as exc:
        raise click.UsageError(str(exc)) from None


def apply_tls_options(use_tls: bool, tls_ca: str | None, tls_cert: str | None,
                      tls_key: str | None) -> None:
    """Turn TLS flags into ROCKETMQ_TLS_* for child processes (mqbench's members).
    The tool's own clients take ``tool_config()`` instead."""
    check_tls_options(use_tls, tls_ca, tls_cert, tls_key)
    if not use_tls:
        return
    os.environ[tls.ENV_ENABLE] = "true"
    for name, value in ((tls.ENV_CA, tls_ca), (tls.ENV_CERT, tls_cert), (tls.ENV_KEY, tls_key)):
        if value:
            os.environ[name] = value


@click.group(cls=GroupedCommands, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@credential_options
@tls_options
@click.pass_context
def cli(ctx: click.Context, access_key: str | None, secret_key: str | None, use_tls: bool,
        tls_ca: str | None, tls_cert: str | None, tls_key: str | None) -> None:
    """Administer trio-rocketmq name servers and brokers."""
    if ctx.invoked_subcommand is None:  # no command: the listing, as RocketMQ's mqadmin
        assert isinstance(ctx.command, click.Group)
        for line in listing(ctx.command, ctx):
            click.echo(line)
        return
    ctx.obj = tool_client_config(access_key, secret_key, use_tls, tls_ca, tls_cert, tls_key)


register_help(cli)


@cli.command("updateTopic")
@namesrv_option()
@click.option("-c", "--clusterName", "cluster", default=None, help="Create on every master of the cluster.")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Create on this broker only.")
@click.option("-t", "--topic", required=True)
@click.option("-r", "--readQueueNums", "read", type=int, default=8, show_default=True)
@click.option("-w", "--writeQueueNums", "write", type=int, default=8, show_default=True)
@click.option("-p", "--perm", type=int, default=6, show_default=True, help="2 write, 4 read, 6 both.")
@click.option("-o", "--order", type=bool, default=False, show_default=True)
@click.option("-a", "--attributes", default=None,
              help="Attribute changes: +key=value sets, -key removes, comma-separated "
                   "(e.g. +message.type=FIFO; message.type: NORMAL, FIFO, DELAY, "
                   "TRANSACTION or MIXED).")
def update_topic(namesrv: str, cluster: str | None, broker_addr: str | None, topic: str,
                 read: int, write: int, perm: int, order: bool, attributes: str | None) -> None:
    """Create or update a topic."""
    try:
        changes = parse_changes(attributes)
    except AttributeProblem as exc:
        raise click.UsageError(str(exc)) from None

    async def go() -> list[str]:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.create_topic(topic, cluster=cluster, broker_addr=broker_addr,
                                            read_queue_nums=read, write_queue_nums=write,
                                            perm=perm, order=order, attributes=changes)

    for addr in _run(go):
        click.echo(f"create topic to {addr} success.")
    click.echo(topic_config_text(TopicConfig(topic, read, write, perm, order=order), changes))


def topic_config_text(cfg: TopicConfig, changes: Mapping[str, str | None] | None = None
                      ) -> str:
    """RocketMQ's ``TopicConfig.toString``, as updateTopic and updateTopicPerm print it
    (RocketMQ 5's ``attributes=`` part when an update names attribute changes)."""
    text = (f"TopicConfig [topicName={cfg.topic_name}, readQueueNums={cfg.read_queue_nums}, "
            f"writeQueueNums={cfg.write_queue_nums}, perm={perm_to_string(cfg.perm)}, "
            f"topicFilterType={cfg.topic_filter_type}, topicSysFlag={cfg.topic_sys_flag}, "
            f"order={str(cfg.order).lower()}")
    if changes:
        shown = ", ".join(f"+{k}={v}" if v is not None else f"-{k}=" for k, v in changes.items())
        text += f", attributes={{{shown}}}"
    return text + "]"


@cli.command("deleteTopic")
@namesrv_option()
@click.option("-c", "--clusterName", "cluster", required=True)
@click.option("-t", "--topic", required=True)
def delete_topic(namesrv: str, cluster: str, topic: str) -> None:
    """Delete a topic from a cluster's brokers and the name servers."""

    async def go() -> None:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            await admin.delete_topic(topic, cluster)

    _run(go)
    click.echo(f"delete topic [{topic}] from cluster [{cluster}] success.")


@cli.command("topicList")
@namesrv_option()
@json_option
def topic_list(namesrv: str, as_json: bool) -> None:
    """List every topic the name servers know."""

    async def go() -> list[str]:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.topic_list()

    topics = _run(go)
    if as_json:
        _echo_json(topics)
        return
    for topic in topics:
        click.echo(topic)


@cli.command("topicRoute")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@json_option
def topic_route(namesrv: str, topic: str, as_json: bool) -> None:
    """Show a topic's route: brokers and queues (JSON either way)."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.topic_route(topic)

    _echo_json(_run(go).to_dict())


@cli.command("topicStatus")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@json_option
def topic_status(namesrv: str, topic: str, as_json: bool) -> None:
    """Min and max offset of every queue of a topic."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.topic_status(topic)

    rows = _run(go)
    if as_json:
        _echo_json([{"brokerName": r.broker_name, "queueId": r.queue_id, "minOffset": r.min_offset,
                     "maxOffset": r.max_offset, "lastUpdateTimestamp": r.last_update_timestamp}
                    for r in rows])
        return
    _print_table(["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"],
                 [[r.broker_name, r.queue_id, r.min_offset, r.max_offset,
                   _fmt_ts(r.last_update_timestamp)] for r in rows])


@cli.command("clusterList")
@namesrv_option()
@json_option
def cluster_list(namesrv: str, as_json: bool) -> None:
    """Clusters, their brokers and addresses."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
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
    rows = []
    for cluster, names in sorted(info["clusterAddrTable"].items()):
        for name in sorted(names):
            bd = info["brokerAddrTable"].get(name)
            if bd is None:
                continue
            for bid, addr in sorted(bd.broker_addrs.items()):
                rows.append([cluster, name, int(bid), roles.get(addr, "?"), addr])
    if as_json:
        _echo_json([dict(zip(["clusterName", "brokerName", "brokerId", "role", "addr"], r, strict=True))
                    for r in rows])
        return
    _print_table(["#Cluster Name", "#Broker Name", "#BID", "#Role", "#Addr"], rows)


@cli.command("brokerStatus")
@namesrv_option()
@click.option("-b", "--brokerAddr", "broker_addr", required=True, help="Broker address host:port.")
@json_option
def broker_status(namesrv: str, broker_addr: str, as_json: bool) -> None:
    """A broker's runtime figures (put/get TPS, commit-log offsets, disk, held pulls,
    start time, version...); HA: each slave's acknowledged offset and lag on a
    master, the master and lag on a slave."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.broker_runtime_info(broker_addr)

    table = _run(go)
    if as_json:
        _echo_json(table)
        return
    for line in format_key_values(broker_status_lines(table)):
        click.echo(line)


def broker_status_lines(table: dict[str, Any]) -> dict[str, Any]:
    """brokerStatus's figures flat: the HA block becomes slave<i>AckedOffset,
    slave<i>BehindBytes and ha<Key>; a boot timestamp gains its local time."""
    flat = dict(table)
    ha = flat.pop("ha", None)
    if isinstance(ha, dict):
        ha = dict(ha)
        for i, slave in enumerate(ha.pop("slaves", None) or []):
            flat[f"slave{i}AckedOffset"] = slave.get("ackedOffset")
            flat[f"slave{i}BehindBytes"] = slave.get("behind")
        for key, value in ha.items():
            flat["ha" + key[:1].upper() + key[1:]] = value
    boot = flat.get("bootTimestamp")
    if isinstance(boot, int) and not isinstance(boot, bool) and boot > 0:
        flat["bootTimestamp"] = f"{boot} ({_fmt_ts(boot)})"
    return flat


def ha_state(ha: dict[str, Any]) -> tuple[str, str]:
    """A broker's HA block as (state, detail): a master "writable" or "fenced"
    (why) and its refused slaves, a slave its link to its master (why refused)."""
    if "link" in ha:
        return str(ha["link"]), str(ha.get("linkReason") or "")
    state = "writable" if ha.get("writable", True) else "fenced"
    detail = str(ha.get("writeFence") or "")
    if ha.get("refusedSlaves"):
        refused = f"{ha['refusedSlaves']} slave hello(s) refused, last: {ha.get('lastRefusal', '')}"
        detail = f"{detail}; {refused}" if detail else refused
    return state, detail


@cli.command("haStatus")
@namesrv_option()
@click.option("-c", "--clusterName", "cluster", default=None,
              help="Every broker of this cluster (default: every cluster).")
@json_option
def ha_status(namesrv: str, cluster: str | None, as_json: bool) -> None:
    """Replication of every broker group: each broker's role, log end, epoch and
    state (a master writable or fenced, a slave's link to its master: accepted,
    refused, recovering-master, connecting), and why."""

    async def go() -> list[dict[str, Any]]:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            info = await admin.cluster_info()
            out = []
            for cname, names in sorted(info["clusterAddrTable"].items()):
                if cluster is not None and cname != cluster:
                    continue
                for name in sorted(names):
                    bd = info["brokerAddrTable"].get(name)
                    for bid, addr in sorted((bd.broker_addrs if bd else {}).items()):
                        try:
                            t = await admin.broker_runtime_info(addr)
                        except MQAdminError as exc:
                            out.append({"brokerName": name, "brokerId": int(bid), "addr": addr,
                                        "role": "?", "state": "unreachable",
                                        "detail": str(exc)})
                            continue
                        raw = t.get("ha")
                        ha: dict[str, Any] = raw if isinstance(raw, dict) else {}
                        state, detail = ha_state(ha)
                        out.append({"brokerName": name, "brokerId": int(bid), "addr": addr,
                                    "role": t.get("brokerRole", "?"),
                                    "maxOffset": t.get("commitLogMaxOffset"),
                                    "epoch": ha.get("epoch"), "state": state,
                                    "detail": detail, "ha": ha})
            return out

    rows = _run(go)
    if as_json:
        _echo_json(rows)
        return
    _print_table(["#Broker Name", "#BID", "#Addr", "#Role", "#Max Offset", "#Epoch", "#State",
                  "#Detail"],
                 [[r["brokerName"], r["brokerId"], r["addr"], r["role"], r.get("maxOffset"),
                   r.get("epoch"), r["state"], r["detail"]] for r in rows])


@cli.command("sendMessage")
@namesrv_option()
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
        async with Producer("TOOLS_PRODUCER", namesrv_addr=namesrv,
                            config=tool_config()) as producer:
            msg = Message(topic, body.encode(), tags=tags, keys=keys)
            if broker_name is not None or queue_id is not None:
                if broker_name is None or queue_id is None:
                    raise click.UsageError("-b and -i go together")
                return await producer.send(msg, MessageQueue(topic, broker_name, queue_id))
            return await producer.send(msg)

    r = _run(go)
    _print_table(["#Broker Name", "#QID", "#Send Result", "#MsgId"],
                 [[r.message_queue.broker_name, r.message_queue.queue_id, r.send_status.name,
                   r.msg_id]])


@cli.command("consumeMessage")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-g", "--consumerGroup", "group", default="TOOLS_CONSUMER", show_default=True)
@click.option("-b", "--brokerName", "broker_name", default=None, help="Only this broker's queues.")
@click.option("-i", "--queueId", "queue_id", type=int, default=None, help="Only this queue.")
@click.option("-o", "--offset", type=int, default=None, help="Start offset (default: the queue's min).")
@click.option("-c", "--messageCount", "count", type=int, default=128, show_default=True,
              help="Stop after this many messages.")
@click.option("-s", "--subExpression", "expression", default="*", show_default=True)
@json_option
def consume_message(namesrv: str, topic: str, group: str, broker_name: str | None,
                    queue_id: int | None, offset: int | None, count: int, expression: str,
                    as_json: bool) -> None:
    """Print the messages of a topic (queue by queue, from the oldest)."""
    from client import PullConsumer, PullStatus

    found: list[dict[str, Any]] = []

    async def go() -> None:
        printed = 0
        async with PullConsumer(group, namesrv_addr=namesrv,
                                config=tool_config()) as consumer:
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
                        printed += 1
                        if as_json:
                            found.append(message_dict(m))
                            continue
                        click.echo(
                            f"MSGID: {m.msg_id} QUEUE: {mq.broker_name}:{mq.queue_id} "
                            f"OFFSET: {m.queue_offset} TAGS: {m.tags or ''} KEYS: {m.keys or ''} "
                            f"STORE: {_fmt_ts(m.store_timestamp)} BODY: "
                            f"{m.body.decode(errors='replace')}"
                        )
                    if r.pull_status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                        break
                    pos = r.next_begin_offset
                if printed >= count:
                    break
        if not as_json:
            click.echo(f"{printed} message(s)")

    _run(go)
    if as_json:
        _echo_json(found)


def transaction_note(m: Any) -> str:
    """Whether a message took part in a transaction, as queryMsg* show it."""
    tx = transaction_type(m.sys_flag)
    if tx == TRANSACTION_COMMIT_TYPE:
        return ("committed transaction (its half message was at commit-log offset "
                f"{m.prepared_transaction_offset})")
    if m.topic == RMQ_SYS_TRANS_HALF_TOPIC or m.properties.get("TRAN_MSG", "").lower() == "true":
        return "half message of a transaction (prepared, not committed)"
    return "none"


def message_dict(m: Any) -> dict[str, Any]:
    """A message for --json: ids, place, times, hosts, properties; the body as UTF-8 text."""
    return {
        "offsetMsgId": m.msg_id, "msgId": m.uniq_key, "topic": m.topic, "tags": m.tags,
        "keys": m.keys, "queueId": m.queue_id, "queueOffset": m.queue_offset,
        "commitLogOffset": m.commit_log_offset, "reconsumeTimes": m.reconsume_times,
        "bornTimestamp": m.born_timestamp, "storeTimestamp": m.store_timestamp,
        "bornHost": str(m.born_host), "storeHost": str(m.store_host),
        "transaction": transaction_note(m), "properties": dict(m.properties),
        "body": m.body.decode(errors="replace"),
    }


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
@namesrv_option()
@click.option("-i", "--msgId", "msg_id", required=True, help="Offset message id (32 hex digits).")
@json_option
def query_msg_by_id(namesrv: str, msg_id: str, as_json: bool) -> None:
    """Show a message by its offset msgId."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.view_message(msg_id)

    m = _run(go)
    if as_json:
        _echo_json(message_dict(m))
        return
    _print_message(m)


@cli.command("queryMsgByKey")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-k", "--msgKey", "key", required=True)
@click.option("-m", "--maxNum", "max_num", type=int, default=64, show_default=True)
@json_option
def query_msg_by_key(namesrv: str, topic: str, key: str, max_num: int, as_json: bool) -> None:
    """Messages of a topic with a key, newest first."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.query_by_key(topic, key, max_num)

    msgs = _run(go)
    if as_json:
        _echo_json([message_dict(m) for m in msgs])
        return
    _print_table(["#Message ID", "#QID", "#Offset"], [[m.msg_id, m.queue_id, m.queue_offset]
                                                     for m in msgs])


@cli.command("queryMsgByUniqueKey")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-i", "--msgId", "uniq", required=True, help="The UNIQ_KEY the producer returned.")
@json_option
def query_msg_by_unique_key(namesrv: str, topic: str, uniq: str, as_json: bool) -> None:
    """Show the message(s) with a producer msgId (UNIQ_KEY)."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return [m for m in await admin.query_by_key(topic, uniq, 32) if m.uniq_key == uniq]

    msgs = _run(go)
    if not msgs:
        raise click.ClickException(f"no message with unique key {uniq} in {topic}")
    if as_json:
        _echo_json([message_dict(m) for m in msgs])
        return
    for m in msgs:
        _print_message(m)


def format_trace(views: Sequence[TraceView]) -> list[str]:
    """RocketMQ's queryMsgTraceById layout: a Pub table per send, then one table
    per consumer group with its SubBefore and SubAfter rows (RocketMQ prints
    SubAfter rows only, typed ``Sub``); a SubBefore has no cost or status."""
    row = "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}"
    lines: list[str] = []

    def when(ms: int) -> str:
        return _dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S") if ms > 0 else "-"

    consumers: dict[str, list[TraceView]] = {}
    for v in views:
        if v.trace_type == "Pub":
            lines.append(row.format("#Type", "#ProducerGroup", "#ClientHost", "#SendTime",
                                    "#CostTimes", "#Status").rstrip())
            lines.append(row.format("Pub", v.group_name, v.client_host, when(v.timestamp),
                                    f"{v.cost_time}ms", v.status).rstrip())
            lines.append("")
        elif v.trace_type in ("SubBefore", "SubAfter"):
            consumers.setdefault(v.group_name, []).append(v)
    for group_views in consumers.values():
        lines.append(row.format("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime",
                                "#CostTimes", "#Status").rstrip())
        for v in group_views:
            after = v.trace_type == "SubAfter"
            lines.append(row.format(v.trace_type, v.group_name, v.client_host, when(v.timestamp),
                                    f"{v.cost_time}ms" if after else "-",
                                    v.status if after else "-").rstrip())
        lines.append("")
    return lines


@cli.command("queryMsgTraceById")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, help=NAMESRV_HELP)
@click.option("-i", "--msgId", "msg_id", required=True,
              help="The message's msgId (the UNIQ_KEY the producer returned).")
@click.option("-t", "--traceTopic", "trace_topic", default=RMQ_SYS_TRACE_TOPIC,
              show_default=True, help="The trace topic.")
@click.option("-b", "--beginTimestamp", "begin_ms", type=click.IntRange(min=0), default=0,
              help="Trace messages stored from (ms).")
@click.option("-e", "--endTimestamp", "end_ms", type=click.IntRange(min=0), default=2**62,
              help="Trace messages stored until (ms).")
@click.option("-num", "--maxNum", "max_num", type=click.IntRange(1, 64), default=64,
              show_default=True, help="Trace messages read at most (a broker answers "
              "at most 64).")
@json_option
def query_msg_trace_by_id(namesrv: str, msg_id: str, trace_topic: str, begin_ms: int,
                          end_ms: int, max_num: int, as_json: bool) -> None:
    """Show a message's trace: its sends and consumptions, as trace clients recorded them."""
    msg_id, trace_topic = msg_id.strip(), trace_topic.strip()

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.query_msg_trace(msg_id, trace_topic, max_num, begin_ms, end_ms)

    views = _run(go)
    if as_json:
        _echo_json([v.to_dict() for v in views])
        return
    if not views:
        raise click.ClickException(f"no trace of message {msg_id} in {trace_topic}")
    for line in format_trace(views):
        click.echo(line)


@cli.command("queryMsgByOffset")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-b", "--brokerName", "broker_name", required=True)
@click.option("-i", "--queueId", "queue_id", type=int, required=True)
@click.option("-o", "--offset", type=int, required=True)
@json_option
def query_msg_by_offset(namesrv: str, topic: str, broker_name: str, queue_id: int, offset: int,
                        as_json: bool) -> None:
    """Show the message at a queue offset."""
    from client import PullConsumer, PullStatus
    from protocol.message import MessageQueue

    async def go() -> Any:
        async with PullConsumer("TOOLS_CONSUMER", namesrv_addr=namesrv,
                                config=tool_config()) as c:
            r = await c.pull(MessageQueue(topic, broker_name, queue_id), "*", offset, 1)
            if r.pull_status != PullStatus.FOUND or r.msg_found_list[0].queue_offset != offset:
                raise click.ClickException(f"no message at offset {offset}: {r.pull_status.name}")
            return r.msg_found_list[0]

    m = _run(go)
    if as_json:
        _echo_json(message_dict(m))
        return
    _print_message(m)


@cli.command("searchOffsetByTime")
@namesrv_option()
@click.option("-t", "--topic", required=True)
@click.option("-b", "--brokerName", "broker_name", required=True)
@click.option("-i", "--queueId", "queue_id", type=int, required=True)
@click.option("-s", "--timestamp", type=int, required=True, help="Milliseconds since the epoch.")
def search_offset_by_time(namesrv: str, topic: str, broker_name: str, queue_id: int,
                          timestamp: int) -> None:
    """First offset of a queue stored at or after a time."""

    async def go() -> int:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.search_offset(topic, broker_name, queue_id, timestamp)

    click.echo(str(_run(go)))


@cli.command("consumerProgress")
@namesrv_option()
@click.option("-g", "--groupName", "group", required=True)
@click.option("-t", "--topicName", "topic", default=None)
@json_option
def consumer_progress(namesrv: str, group: str, topic: str | None, as_json: bool) -> None:
    """Per queue: broker offset, consumer offset, lag; and totals."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.consume_stats(group, topic), await admin.consume_tps(group, topic)

    rows, tps = _run(go)
    total = sum(r["lag"] for r in rows)
    if as_json:
        _echo_json({"offsetTable": rows, "diffTotal": total, "consumeTps": tps})
        return
    _print_table(["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff",
                  "#LastTime"],
                 [[r["topic"], r["brokerName"], r["queueId"], r["brokerOffset"], r["consumerOffset"],
                   r["lag"], _fmt_ts(r["lastTimestamp"])] for r in rows])
    click.echo(f"\nConsume TPS: {tps:.2f}\nDiff Total: {total}")


@cli.command("consumerConnection")
@namesrv_option()
@click.option("-g", "--consumerGroup", "group", required=True)
@json_option
def consumer_connection(namesrv: str, group: str, as_json: bool) -> None:
    """The clients of a consumer group and their subscriptions."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.consumer_connection(group)

    brokers = _run(go)
    if as_json:
        _echo_json(brokers)
        return
    for b in brokers:
        click.echo(f"Broker {b['broker']}: {b['messageModel']} {b['consumeType']} {b['consumeFromWhere']}")
        for line in format_table(["#ClientId", "#ClientAddr", "#Language", "#Version"],
                                 [[c.get("clientId"), c.get("clientAddr"), c.get("language"),
                                   c.get("version")] for c in b["connectionSet"]]):
            click.echo("  " + line)
        for topic, sub in sorted(b["subscriptionTable"].items()):
            click.echo(f"  subscription {topic}: {sub.get('subString', '*')}")


@cli.command("resetOffsetByTime")
@namesrv_option()
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("-s", "--timestamp", required=True,
              help="Milliseconds since the epoch, or 'now'.")
@json_option
def reset_offset_by_time(namesrv: str, group: str, topic: str, timestamp: str,
                         as_json: bool) -> None:
    """Move a group's offsets to the first message stored at or after a time."""
    import time as _time

    ts = int(_time.time() * 1000) if timestamp == "now" else int(timestamp)

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.reset_offset_by_time(group, topic, ts)

    rows = _run(go)
    if as_json:
        _echo_json([{"brokerName": b, "queueId": q, "offset": o} for b, q, o in rows])
        return
    _print_table(["#Broker Name", "#QID", "#Offset"], [list(r) for r in rows])


@cli.command("producerConnection")
@namesrv_option()
@click.option("-g", "--producerGroup", "group", required=True)
@click.option("-t", "--topic", required=True, help="A topic the group sends to (its brokers are asked).")
@json_option
def producer_connection(namesrv: str, group: str, topic: str, as_json: bool) -> None:
    """The clients of a producer group connected to a topic's brokers."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.producer_connection(group, topic)

    conns = _run(go)
    if as_json:
        _echo_json([c.to_dict() for c in conns])
        return
    _print_table(["#", "#ClientId", "#ClientAddr", "#Language", "#Version"],
                 [[f"{i:04d}", c.client_id, c.client_addr, c.language, c.version]
                  for i, c in enumerate(conns, 1)])


@cli.command("statsAll")
@namesrv_option()
@click.option("-t", "--topic", default=None, help="Only this topic.")
@click.option("-s", "--system", "include_system", is_flag=True, default=False,
              help="Include system, retry and DLQ topics.")
@json_option
def stats_all(namesrv: str, topic: str | None, include_system: bool, as_json: bool) -> None:
    """Per topic and consumer group: accumulation, in/out TPS over the last minute,
    messages in/out over 24 hours."""

    async def go() -> Any:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.stats_all(topic, include_system=include_system)

    rows = _run(go)
    if as_json:
        _echo_json([r.to_dict() for r in rows])
        return
    _print_table(["#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS",
                  "#InMsg24Hour", "#OutMsg24Hour"],
                 [[r.topic, r.group if r.group is not None else "", r.accumulation, r.in_tps,
                   r.out_tps, r.in_msg_24h,
                   r.out_msg_24h if r.group is not None else None] for r in rows])
    if any(r.group is None for r in rows):
        click.echo("\n(no consumer group: accumulation, out TPS and out messages left empty)")


async def _broker_addrs(admin: MQAdmin, broker_addr: str | None, cluster: str | None) -> list[str]:
    if broker_addr:
        return [broker_addr]
    if cluster:
        return sorted((await admin.master_addrs(cluster)).values())
    raise click.UsageError("give a broker address (-b) or a cluster (-c)")


@cli.command("getBrokerConfig")
@namesrv_option()
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Broker address host:port.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Every master of the cluster.")
@json_option
def get_broker_config(namesrv: str, broker_addr: str | None, cluster: str | None,
                      as_json: bool) -> None:
    """A broker's configuration, as it runs."""

    async def go() -> dict[str, dict[str, str]]:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return {a: await admin.get_broker_config(a)
                    for a in await _broker_addrs(admin, broker_addr, cluster)}

    configs = _run(go)
    if as_json:
        _echo_json(configs if broker_addr is None else configs[broker_addr])
        return
    for line in config_lines(configs):
        click.echo(line)


def config_lines(configs: dict[str, dict[str, str]]) -> list[str]:
    """Daemons' configs as RocketMQ's getBrokerConfig / getNamesrvConfig print them:
    ``============addr============`` then ``key=  value`` lines, keys padded to 50."""
    lines = []
    for addr, config in configs.items():
        lines.append(f"============{addr}============")
        width = max([50, *(len(k) for k in config)])
        lines += [f"{key:<{width}}=  {value}" for key, value in sorted(config.items())]
    return lines


@cli.command("updateBrokerConfig")
@namesrv_option()
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Broker address host:port.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Every master of the cluster.")
@click.option("-k", "--key", required=True, help="A key the broker can change while it runs.")
@click.option("-v", "--value", required=True)
def update_broker_config(namesrv: str, broker_addr: str | None, cluster: str | None, key: str,
                         value: str) -> None:
    """Change a broker setting at run time; the broker writes it to its config file."""

    async def go() -> list[str]:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            addrs = await _broker_addrs(admin, broker_addr, cluster)
            for addr in addrs:
                await admin.update_broker_config(addr, {key: value})
            return addrs

    for addr in _run(go):
        click.echo(f"update broker config success, {addr}")


@cli.command("wipeWritePerm")
@namesrv_option()
@click.option("-b", "--brokerName", "broker_name", required=True)
def wipe_write_perm(namesrv: str, broker_name: str) -> None:
    """Take a broker out of writing (its topics lose the write permission on every
    name server; producers move to other brokers), e.g. before maintenance."""

    async def go() -> dict[str, int]:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.wipe_write_perm(broker_name)

    for addr, count in _run(go).items():
        click.echo(f"wipe write perm of broker[{broker_name}] in name server[{addr}] OK, {count}")


@cli.command("addWritePerm")
@namesrv_option()
@click.option("-b", "--brokerName", "broker_name", required=True)
def add_write_perm(namesrv: str, broker_name: str) -> None:
    """Give a broker its write permission back on every name server."""

    async def go() -> dict[str, int]:
        async with MQAdmin(namesrv, config=tool_config()) as admin:
            return await admin.add_write_perm(broker_name)

    for addr, count in _run(go).items():
        click.echo(f"add write perm of broker[{broker_name}] in name server[{addr}] OK, {count}")


# ---- ACL administration (RocketMQ's updateAclConfig, deleteAccessConfig, ...) -----

ACL_TARGET_HELP_B = "The broker (host:port) whose plain_acl.yml to change."
ACL_TARGET_HELP_C = "Every master of this cluster."


def _split(text: str | None) -> list[str] | None:
    """``a,b`` as a list; None when the option was not given."""
    if text is None:
        return None
    return [p.strip() for p in text.split(",") if p.strip()]


def _admin_flag(text: str | None) -> bool | None:
    if text is None:
        return None
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise click.BadParameter("true or false", param_hint="-m/--admin")
    return value == "true"


@cli.command("updateAclConfig")
@namesrv_option()
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help=ACL_TARGET_HELP_B)
@click.option("-c", "--clusterName", "cluster", default=None, help=ACL_TARGET_HELP_C)
@click.option("-a", "--accessKey", "access_key", required=True, help="The account's accessKey.")
@click.option("-s", "--secretKey", "secret_key", default=None,
              help="Its secretKey (at least 6 characters; needed for a new account).")
@click.option("-w", "--whiteRemoteAddress", "white", default=None,
              help="Addresses the account is trusted from (e.g. 192.168.1.*).")
@click.option("-i", "--defaultTopicPerm", "default_topic_perm", default=None,
              help="DENY, PUB, SUB or PUB|SUB.")
@click.option("-u", "--defaultGroupPerm", "default_group_perm", default=None,
              help="DENY, PUB, SUB or PUB|SUB.")
@click.option("-t", "--topicPerms", "topic_perms", default=None,
              help="topicA=DENY,topicD=SUB")
@click.option("-g", "--groupPerms", "group_perms", default=None, help="groupD=DENY,groupE=SUB")
@click.option("-m", "--admin", "admin", default=None,
              help="true or false (a new account: false; an update keeps the flag).")
def update_acl_config(namesrv: str, broker_addr: str | None, cluster: str | None,
                      access_key: str, secret_key: str | None, white: str | None,
                      default_topic_perm: str | None, default_group_perm: str | None,
                      topic_perms: str | None, group_perms: str | None,
                      admin: str | None) -> None:
    """Create an ACL account, or update the fields given, on brokers' plain_acl.yml."""
    is_admin = _admin_flag(admin)

    async def go() -> list[str]:
        async with MQAdmin(namesrv, config=tool_config()) as mq:
            addrs = await mq.acl_targets(broker_addr, cluster)
            for addr in addrs:
                await mq.update_acl_config(
                    addr, access_key, secret_key=secret_key, white_remote_address=white,
                    admin=is_admin, default_topic_perm=default_topic_perm,
                    default_group_perm=default_group_perm, topic_perms=_split(topic_perms),
                    group_perms=_split(group_perms))
            return addrs

    for addr in _run(go):
        click.echo(f"create or update plain access config to {addr} success.")


@cli.command("deleteAccessConfig")
@namesrv_option()
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help=ACL_TARGET_HELP_B)
@click.option("-c", "--clusterName", "cluster", default=None, help=ACL_TARGET_HELP_C)
@click.option("-a", "--accessKey", "access_key", required=True,
              help="The accessKey of the account to delete.")
def delete_acl_config(namesrv: str, broker_addr: str | None, cluster: str | None,
                      access_key: str) -> None:
    """Delete an ACL account from brokers' plain_acl.yml (alias: deleteAclConfig)."""

    async def go() -> list[str]:
        async with MQAdmin(namesrv, config=tool_config()) as mq:
            addrs = await mq.acl_targets(broker_addr, cluster)
            for addr in addrs:
                await mq.delete_acl_config(addr, access_key)
            return addrs

    for addr in _run(go):
        click.echo(f"delete plain access config account from {addr} success.")


cli.add_command(delete_acl_config, "deleteAclConfig")


@cli.command("updateGlobalWhiteAddr")
@namesrv_option()
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help=ACL_TARGET_HELP_B)
@click.option("-c", "--clusterName", "cluster", default=None, help=ACL_TARGET_HELP_C)
@click.option("-g", "--globalWhiteRemoteAddresses", "addresses", required=True,
              help="The new list, e.g. 10.10.103.*,192.168.0.* (replaces the old one).")
def update_global_white_addr(namesrv: str, broker_addr: str | None, cluster: str | None,
                             addresses: str) -> None:
    """Replace the global white remote addresses of brokers' plain_acl.yml."""

    async def go() -> list[str]:
        async with MQAdmin(namesrv, config=tool_config()) as mq:
            addrs = await mq.acl_targets(broker_addr, cluster)
            for addr in addrs:
                await mq.update_global_white_addrs(addr, _split(addresses) or [])
            return addrs

    for addr in _run(go):
        click.echo(f"update global white remote addresses to {addr} success.")


@cli.command("clusterAclConfigVersion")
@namesrv_option()
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Only this broker.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Every master of the cluster.")
@json_option
def cluster_acl_config_version(namesrv: str, broker_addr: str | None, cluster: str | None,
                               as_json: bool) -> None:
    """The ACL file data version of brokers."""

    async def go() -> list[Any]:
        async with MQAdmin(namesrv, config=tool_config()) as mq:
            return [await mq.acl_config_version(a)
                    for a in await mq.acl_targets(broker_addr, cluster)]

    rows = _run(go)
    if as_json:
        _echo_json([{"clusterName": r.cluster_name, "brokerName": r.broker_name,
                     "brokerAddr": r.broker_addr, "aclConfigVersionNum": r.counter,
                     "aclLastUpdateTime": r.timestamp} for r in rows])
        return
    _print_table(["#Cluster Name", "#Broker Name", "#Broker Addr", "#AclConfigVersionNum",
                  "#AclLastUpdateTime"],
                 [[r.cluster_name, r.broker_name, r.broker_addr, r.counter, _fmt_ts(r.timestamp)]
                  for r in rows])


# commands defined in other modules, registered on ``cli`` when imported
# admin_groups: groups, offsets, KV and name server config; admin_topics: topics,
# messages, queues, cluster
from client import admin_groups, admin_topics  # noqa: E402,F401

# admin_controller: controller mode (its commands, added here: it does not import this module)
from client.admin_controller import COMMANDS as _CONTROLLER_COMMANDS  # noqa: E402

for _command in _CONTROLLER_COMMANDS:
    cli.add_command(_command)


def main() -> None:
    configure_logging("WARNING")
    cli()


if __name__ == "__main__":  # python -m client.admin_cli: the imported module's ``cli``
    from client.admin_cli import main as _main  # holds the other modules' commands too

    _main()
