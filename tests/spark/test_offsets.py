"""The source's offsets and options, without Spark or sockets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.config import ClientConfig
from client.spark.offsets import (
    DataLossError,
    OptionError,
    QueueRange,
    QueueState,
    check_data_loss,
    format_offsets,
    limit_offsets,
    parse_offsets,
    parse_options,
    plan_ranges,
    resolve_offsets,
    with_new_queues,
)


def test_options_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    o = parse_options({"namesrv": "h:1", "topic": "A, B", "maxOffsetsPerTrigger": "10",
                       "failOnDataLoss": "false"}, streaming=True)
    assert o.topics == ("A", "B") and o.max_offsets_per_trigger == 10
    assert o.starting == "latest" and o.ending is None and o.fail_on_data_loss is False
    b = parse_options({"NAMESRV": "h:1", "topic": "A",
                       "endingOffsets": '{"A": {"broker-a:0": 5}}'}, streaming=False)
    assert b.starting == "earliest" and b.ending == {"A": {"broker-a:0": 5}}
    with pytest.raises(OptionError, match="namesrv"):
        parse_options({"topic": "A"}, streaming=False)
    # without the option: the driver's NAMESRV_ADDR; the option wins over it
    monkeypatch.setenv("NAMESRV_ADDR", "n1:9876;n2:9876")
    assert parse_options({"topic": "A"}, streaming=False).namesrv == "n1:9876;n2:9876"
    assert parse_options({"namesrv": "h:1", "topic": "A"}, streaming=False).namesrv == "h:1"
    monkeypatch.delenv("NAMESRV_ADDR")
    with pytest.raises(OptionError, match="topic"):
        parse_options({"namesrv": "h:1"}, streaming=False)
    with pytest.raises(OptionError, match="batch queries only"):
        parse_options({"namesrv": "h:1", "topic": "A", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match="positive"):
        parse_options({"namesrv": "h:1", "topic": "A", "maxOffsetsPerTrigger": "0"}, streaming=True)
    with pytest.raises(OptionError, match="not subscribed"):
        parse_options({"namesrv": "h:1", "topic": "A", "startingOffsets": '{"B": {}}'},
                      streaming=False)
    with pytest.raises(OptionError, match="subExpression"):
        parse_options({"namesrv": "h:1", "topic": "A", "subExpression": "||"}, streaming=False)
    tagged = parse_options({"namesrv": "h:1", "topic": "A", "subExpression": " a || b "},
                           streaming=True)
    assert tagged.sub_expression == "a || b"
    assert parse_options({"namesrv": "h:1", "topic": "A"}, streaming=True).sub_expression == "*"
    sql = parse_options({"namesrv": "h:1", "topic": "A", "subExpression": "a > 5",
                         "expressionType": "sql92"}, streaming=True)
    assert (sql.sub_expression, sql.expression_type) == ("a > 5", "SQL92")
    with pytest.raises(OptionError, match="column 4"):  # compiled on the driver first
        parse_options({"namesrv": "h:1", "topic": "A", "subExpression": "a >> 5",
                       "expressionType": "SQL92"}, streaming=False)
    with pytest.raises(OptionError, match="expressionType"):
        parse_options({"namesrv": "h:1", "topic": "A", "expressionType": "XPATH"},
                      streaming=False)
    with pytest.raises(OptionError, match="brokerName:queueId"):
        parse_offsets('{"A": {"nocolon": 1}}', "startingOffsets")
    with pytest.raises(OptionError, match="integer"):
        parse_offsets('{"A": {"b:0": -1}}', "startingOffsets")
    with pytest.raises(OptionError, match="JSON"):
        parse_offsets("{oops", "startingOffsets")
    assert parse_offsets(format_offsets({"A": {"b:1": 2, "b:0": 1}}), "x") == {"A": {"b:0": 1, "b:1": 2}}


def test_resolve_and_new_queues() -> None:
    queues = {"A": {"b:0": QueueState(2, 10, 7), "b:1": QueueState(0, 5, -1)}}
    assert resolve_offsets("earliest", queues) == {"A": {"b:0": 2, "b:1": 0}}
    assert resolve_offsets("latest", queues) == {"A": {"b:0": 10, "b:1": 5}}
    assert resolve_offsets("group", queues) == {"A": {"b:0": 7, "b:1": 0}}
    assert resolve_offsets({"A": {"b:1": 3}}, queues) == {"A": {"b:0": 2, "b:1": 3}}
    assert with_new_queues({"A": {"b:0": 9}}, queues) == {"A": {"b:0": 9, "b:1": 0}}


def test_data_loss() -> None:
    assert check_data_loss("A", "b:0", 5, 3, True) == 5
    assert check_data_loss("A", "b:0", 1, 3, False) == 3
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        check_data_loss("A", "b:0", 1, 3, True)


def test_limit_is_split_by_backlog() -> None:
    start = {"A": {"b:0": 0, "b:1": 0, "b:2": 10}}
    latest = {"A": {"b:0": 300, "b:1": 100, "b:2": 10}}
    end = limit_offsets(start, latest, 100)
    assert end == {"A": {"b:0": 75, "b:1": 25, "b:2": 10}}
    assert limit_offsets(start, latest, None) == latest
    assert limit_offsets(start, latest, 10_000) == latest
    assert plan_ranges(start, end) == [QueueRange("A", "b", 0, 0, 75), QueueRange("A", "b", 1, 0, 25)]


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=12),
       st.integers(1, 3000))
def test_limit_reads_exactly_min_of_limit_and_backlog(pairs: list[tuple[int, int]], limit: int) -> None:
    start = {"A": {f"b:{i}": s for i, (s, _) in enumerate(pairs)}}
    latest = {"A": {f"b:{i}": s + n for i, (s, n) in enumerate(pairs)}}
    end = limit_offsets(start, latest, limit)
    taken = [end["A"][k] - start["A"][k] for k in start["A"]]
    assert all(0 <= t <= n for t, (_, n) in zip(taken, pairs, strict=True))
    assert sum(taken) == min(limit, sum(n for _, n in pairs))


def test_tls_options() -> None:
    base = {"namesrv": "h:1", "topic": "A"}
    plain = parse_options(base, streaming=False)
    assert plain.use_tls is False and plain.tls_ca_path is None and plain.tls_cert_path is None
    o = parse_options({**base, "useTls": "TRUE", "tlsCaPath": " /ca.pem ",
                       "TLSCERTPATH": "/c.pem", "tlsKeyPath": "/c.key"}, streaming=True)
    assert (o.use_tls, o.tls_ca_path, o.tls_cert_path, o.tls_key_path) == \
        (True, "/ca.pem", "/c.pem", "/c.key")
    only_flag = parse_options({**base, "useTls": "true"}, streaming=False)
    assert only_flag.use_tls and only_flag.tls_ca_path is None
    assert parse_options({**base, "useTls": "false"}, streaming=False).use_tls is False
    with pytest.raises(OptionError, match="useTls must be true or false"):
        parse_options({**base, "useTls": "maybe"}, streaming=False)
    with pytest.raises(OptionError, match="need useTls=true"):
        parse_options({**base, "tlsCaPath": "/ca.pem"}, streaming=False)
    with pytest.raises(OptionError, match="need useTls=true"):
        parse_options({**base, "useTls": "false", "tlsCertPath": "/c.pem",
                       "tlsKeyPath": "/c.key"}, streaming=False)
    with pytest.raises(OptionError, match="'tlsCertPath' and 'tlsKeyPath' go together"):
        parse_options({**base, "useTls": "true", "tlsCertPath": "/c.pem"}, streaming=False)
    with pytest.raises(OptionError, match="'tlsCertPath' and 'tlsKeyPath' go together"):
        parse_options({**base, "useTls": "true", "tlsKeyPath": "/c.key"}, streaming=False)


def test_tls_and_credentials_reach_the_partitions_consumers() -> None:
    pytest.importorskip("pyspark", reason="the source module needs pyspark")
    from client.spark.source import partition

    o = parse_options({"namesrv": "h:1", "topic": "A", "useTls": "true", "tlsCaPath": "/ca.pem",
                       "tlsCertPath": "/c.pem", "tlsKeyPath": "/c.key", "accessKey": "ak1234",
                       "secretKey": "sk1234"}, streaming=False)
    part = partition(o, QueueRange("A", "b", 0, 0, 5))
    config = part.client_config()
    assert config.namesrv_addr == "h:1"
    assert config.use_tls is True and config.tls_ca_path == "/ca.pem"
    assert (config.tls_cert_path, config.tls_key_path) == ("/c.pem", "/c.key")
    assert config.credentials is not None
    assert (config.credentials.access_key, config.credentials.secret_key) == \
        ("ak1234", "sk1234")
    plain = partition(parse_options({"namesrv": "h:1", "topic": "A"}, streaming=False),
                      QueueRange("A", "b", 0, 0, 5)).client_config()
    assert plain == ClientConfig(namesrv_addr="h:1")
