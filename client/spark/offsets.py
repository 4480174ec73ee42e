"""Offsets and options of the ``rocketmq`` Spark source, without Spark or sockets.

Offsets are JSON ``{"topic": {"brokerName:queueId": nextOffset}}`` (string
keys, end offsets exclusive), as Spark's Kafka source spells its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from client.subscription import SQL92, TAG, build_subscription
from protocol.namesrv_addr import NAMESRV_ADDR_ENV, namesrv_addr_from_env

Offsets = dict[str, dict[str, int]]

EARLIEST = "earliest"
LATEST = "latest"
GROUP = "group"


class OptionError(ValueError):
    """A bad option of the rocketmq source."""


class DataLossError(RuntimeError):
    """Messages between the requested start and a queue's min offset are gone."""


def queue_key(broker_name: str, queue_id: int) -> str:
    return f"{broker_name}:{queue_id}"


def parse_queue_key(key: str) -> tuple[str, int]:
    broker, sep, qid = key.rpartition(":")
    if not sep or not broker or not qid.isdigit():
        raise OptionError(f"bad queue key {key!r}: expected 'brokerName:queueId'")
    return broker, int(qid)


def parse_offsets(text: str, what: str) -> Offsets:
    """Parse an offsets JSON string. Raises OptionError naming ``what``."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise OptionError(f"{what} is neither a keyword nor valid JSON: {exc}") from exc
    return check_offsets(data, what)


def check_offsets(data: Any, what: str) -> Offsets:
    if not isinstance(data, dict):
        raise OptionError(f'{what} JSON must be {{"topic": {{"brokerName:queueId": offset}}}}')
    out: Offsets = {}
    for topic, queues in data.items():
        if not isinstance(topic, str) or not isinstance(queues, dict):
            raise OptionError(f"{what}: topic {topic!r} must map queue keys to offsets")
        out[topic] = {}
        for key, offset in queues.items():
            parse_queue_key(key)
            if type(offset) is not int or offset < 0:
                raise OptionError(f"{what}: offset of {topic} {key} must be an integer >= 0")
            out[topic][key] = offset
    return out


def format_offsets(offsets: Offsets) -> str:
    return json.dumps({t: dict(sorted(q.items())) for t, q in sorted(offsets.items())})


def _bool(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise OptionError(f"{name} must be true or false, got {value!r}")


def _millis(value: str, name: str) -> float:
    """A duration option in milliseconds (0 or more), as seconds."""
    try:
        n = int(value)
    except ValueError as exc:
        raise OptionError(f"{name} must be a whole number of milliseconds, got {value!r}") from exc
    if n < 0 or n > 24 * 3600 * 1000:
        raise OptionError(f"{name} must be between 0 and 86400000 ms, got {value!r}")
    return n / 1000


def _positive_int(value: str, name: str) -> int:
    try:
        n = int(value)
    except ValueError as exc:
        raise OptionError(f"{name} must be a positive integer, got {value!r}") from exc
    if n <= 0:
        raise OptionError(f"{name} must be a positive integer, got {value!r}")
    return n


@dataclass(frozen=True)
class SourceOptions:
    namesrv: str
    topics: tuple[str, ...]
    consumer_group: str
    starting: str | Offsets
    ending: str | Offsets | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    pull_batch_size: int
    sub_expression: str
    expression_type: str = TAG  # subExpression is tags (TAG) or an SQL92 property filter
    # ACL credentials (options accessKey/secretKey): the source's consumers sign requests
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    # TLS (options useTls, tlsCaPath, tlsCertPath, tlsKeyPath): the consumers connect over TLS
    use_tls: bool = False
    tls_ca_path: str | None = None
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    # failoverTimeoutMs: how long a read or an offset query keeps trying a queue
    # whose broker cannot be reached (its master dead: the routes name the slave)
    failover_timeout: float = 60.0


def security_options(opts: dict[str, str]) -> dict[str, Any]:
    """The ACL and TLS options (``accessKey``, ``secretKey``, ``useTls``,
    ``tlsCaPath``, ``tlsCertPath``, ``tlsKeyPath``; ``opts`` with lower-case
    names) checked, as keyword arguments named as SourceOptions' fields (the
    sink's options take the same). Raises OptionError."""
    access_key = opts.get("accesskey") or None
    secret_key = opts.get("secretkey") or None
    if (access_key is None) != (secret_key is None):
        raise OptionError("options 'accessKey' and 'secretKey' go together")
    use_tls = _bool(opts.get("usetls", "false"), "useTls")
    tls_ca_path = opts.get("tlscapath", "").strip() or None
    tls_cert_path = opts.get("tlscertpath", "").strip() or None
    tls_key_path = opts.get("tlskeypath", "").strip() or None
    if (tls_cert_path is None) != (tls_key_path is None):
        raise OptionError("options 'tlsCertPath' and 'tlsKeyPath' go together")
    if not use_tls and (tls_ca_path or tls_cert_path):
        raise OptionError("options 'tlsCaPath', 'tlsCertPath' and 'tlsKeyPath' need "
                          "useTls=true")
    return {"access_key": access_key, "secret_key": secret_key, "use_tls": use_tls,
            "tls_ca_path": tls_ca_path, "tls_cert_path": tls_cert_path,
            "tls_key_path": tls_key_path}


def parse_options(options: dict[str, str], streaming: bool) -> SourceOptions:
    """Validate the source's options (case-insensitive names). Raises OptionError."""
    opts = {k.lower(): v for k, v in options.items()}
    # the option, else the driver's NAMESRV_ADDR (what the readers are given)
    namesrv = opts.get("namesrv", "").strip() or namesrv_addr_from_env()
    if not namesrv:
        raise OptionError("option 'namesrv' is required, e.g. '127.0.0.1:9876' "
                          f"(or {NAMESRV_ADDR_ENV} set where the driver runs)")
    topics = tuple(t.strip() for t in opts.get("topic", "").split(",") if t.strip())
    if not topics:
        raise OptionError("option 'topic' is required (one topic or a comma list)")
    group = opts.get("consumergroup", "spark-rocketmq").strip()
    if not group:
        raise OptionError("option 'consumerGroup' must not be empty")

    def offsets_option(name: str, keywords: tuple[str, ...], default: str | None) -> str | Offsets | None:
        raw = opts.get(name.lower())
        if raw is None:
            return default
        raw = raw.strip()
        if raw.lower() in keywords:
            return raw.lower()
        parsed = parse_offsets(raw, name)
        unknown = set(parsed) - set(topics)
        if unknown:
            raise OptionError(f"{name} names topics not subscribed: {sorted(unknown)}")
        return parsed

    starting = offsets_option("startingOffsets", (EARLIEST, LATEST, GROUP),
                              LATEST if streaming else EARLIEST)
    assert starting is not None
    if streaming and "endingoffsets" in opts:
        raise OptionError("endingOffsets is for batch queries only")
    ending = None if streaming else offsets_option("endingOffsets", (LATEST,), LATEST)
    expression_type = opts.get("expressiontype", TAG).strip().upper() or TAG
    if expression_type not in (TAG, SQL92):
        raise OptionError(f"expressionType {expression_type!r}: TAG or SQL92")
    sub_expression = opts.get("subexpression", "*").strip() or "*"
    try:
        build_subscription(topics[0], sub_expression, expression_type)
    except ValueError as exc:
        raise OptionError(f"subExpression {sub_expression!r}: {exc}") from exc
    limit = opts.get("maxoffsetspertrigger")
    if limit is not None and not streaming:
        raise OptionError("maxOffsetsPerTrigger is for streaming queries only")
    return SourceOptions(
        **security_options(opts),
        namesrv=namesrv,
        topics=topics,
        consumer_group=group,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=None if limit is None else _positive_int(limit, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(opts.get("failondataloss", "true"), "failOnDataLoss"),
        pull_batch_size=_positive_int(opts.get("pullbatchsize", "256"), "pullBatchSize"),
        sub_expression=sub_expression,
        expression_type=expression_type,
        failover_timeout=_millis(opts.get("failovertimeoutms", "60000"), "failoverTimeoutMs"),
    )


@dataclass(frozen=True)
class QueueState:
    """What the brokers say of one queue."""

    min_offset: int
    max_offset: int
    group_offset: int = -1


def resolve_offsets(spec: str | Offsets, queues: dict[str, dict[str, QueueState]],
                    default: str = EARLIEST) -> Offsets:
    """Concrete offsets for every known queue from a keyword or JSON. Queues
    missing from a JSON spec start from ``default``; ``group`` without a
    committed offset starts from the earliest."""
    out: Offsets = {}
    for topic, table in queues.items():
        out[topic] = {}
        for key, st in table.items():
            if isinstance(spec, dict):
                given = spec.get(topic, {}).get(key)
                if given is not None:
                    out[topic][key] = given
                    continue
                mode = default
            else:
                mode = spec
            if mode == LATEST:
                out[topic][key] = st.max_offset
            elif mode == GROUP and st.group_offset >= 0:
                out[topic][key] = st.group_offset
            else:
                out[topic][key] = st.min_offset
    return out


def with_new_queues(start: Offsets, queues: dict[str, dict[str, QueueState]]) -> Offsets:
    """``start`` plus any queue it does not know yet, from its earliest offset."""
    out = {t: dict(q) for t, q in start.items()}
    for topic, table in queues.items():
        for key, st in table.items():
            out.setdefault(topic, {}).setdefault(key, st.min_offset)
    return out


def check_data_loss(topic: str, key: str, start: int, min_offset: int, fail: bool) -> int:
    """The offset to read from: ``start``, or ``min_offset`` when older messages
    are gone and ``fail`` is false. Raises DataLossError when ``fail``."""
    if start >= min_offset:
        return start
    if fail:
        raise DataLossError(
            f"messages of {topic} {key} from offset {start} to {min_offset} are no longer on the "
            f"broker (its min offset is {min_offset}); some data may have been lost. Set "
            f"failOnDataLoss=false to skip ahead instead."
        )
    return min_offset


def limit_offsets(start: Offsets, latest: Offsets, limit: int | None) -> Offsets:
    """End offsets reading at most ``limit`` messages in all, split across
    queues in proportion to their backlog (largest remainders first)."""
    end = {t: {k: max(latest[t][k], start.get(t, {}).get(k, 0)) for k in q}
           for t, q in latest.items()}
    if limit is None:
        return end
    backlog = {(t, k): end[t][k] - start.get(t, {}).get(k, 0)
               for t, q in end.items() for k in q}
    total = sum(backlog.values())
    if total <= limit:
        return end
    shares: dict[tuple[str, str], int] = {}
    remainders = []
    for qk, b in backlog.items():
        exact = limit * b / total
        shares[qk] = int(exact)
        remainders.append((exact - int(exact), b, qk))
    left = limit - sum(shares.values())
    for _, _, qk in sorted(remainders, key=lambda r: (-r[0], -r[1], r[2]))[:left]:
        shares[qk] += 1
    for (t, k), n in shares.items():
        end[t][k] = start.get(t, {}).get(k, 0) + n
    return end


@dataclass(frozen=True)
class QueueRange:
    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int


def plan_ranges(start: Offsets, end: Offsets) -> list[QueueRange]:
    """One range per queue with messages to read (end exclusive)."""
    out = []
    for topic, queues in sorted(end.items()):
        for key, stop in sorted(queues.items()):
            begin = start.get(topic, {}).get(key, 0)
            if stop > begin:
                broker, qid = parse_queue_key(key)
                out.append(QueueRange(topic, broker, qid, begin, stop))
    return out
