"""The broker's gRPC keys as mqbroker loads them."""

from __future__ import annotations

import pytest

from broker.config_load import load_broker_config
from protocol.config import ConfigError


def test_defaults_and_keys() -> None:
    config = load_broker_config(options={}, env={}).config
    assert (config.enable_grpc, config.grpc_listen_port) == (False, 8081)
    config = load_broker_config(options={"enableGrpc": "true", "grpcListenPort": "0"},
                                env={}).config
    assert (config.enable_grpc, config.grpc_listen_port) == (True, 0)
    # push consumers' renewals: RocketMQ 5 proxy's defaults
    assert (config.default_invisible_time_mills, config.renew_ahead_time_millis,
            config.renew_slice_time_millis, config.renew_max_time_millis) == (
        60_000, 10_000, 60_000, 3 * 3600 * 1000)


@pytest.mark.parametrize("options,match", [
    ({"grpcListenPort": "70000"}, "grpcListenPort"),
    ({"enableGrpc": "true", "grpcListenPort": "10911", "listenPort": "10911"},
     "is the listenPort"),
    ({"grpcMaxInboundMessageSize": "1024"}, "grpcMaxInboundMessageSize"),
    ({"renewSliceTimeMillis": "10000"}, "longer than renewAheadTimeMillis"),
    ({"renewMaxHandles": "0"}, "renewMaxHandles must be positive"),
    ({"renewSchedulePeriodMillis": "-1"}, "renewSchedulePeriodMillis"),
    ({"defaultInvisibleTimeMills": "999"}, "defaultInvisibleTimeMills"),
    ({"aclGrpcDateTimeWindow": "0"}, "aclGrpcDateTimeWindow"),
])
def test_bad_settings_refused(options: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_broker_config(options=options, env={})


def test_grpc_with_acl_accepted() -> None:
    config = load_broker_config(options={"enableGrpc": "true", "aclEnable": "true",
                                         "aclGrpcDateTimeWindow": "60000"}, env={}).config
    assert (config.enable_grpc, config.acl_enable, config.acl_grpc_date_time_window) == \
        (True, True, 60_000)
