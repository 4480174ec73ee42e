"""Secrets never leave a daemon: every way a config is shown masks its secret keys
(GET_BROKER_CONFIG, ``mqbroker -p``, any PropertiesConfig's render, reprs),
reading the config is admin-only with ACL on, and a secret cannot be changed over
the wire (UPDATE_BROKER_CONFIG refuses it by name, changing nothing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner

from acl.binding import GET_NAMESRV_CONFIG, UPDATE_NAMESRV_CONFIG
from acl.plain import ADMIN_CODES, parse_plain_acl
from broker.cli import main as mqbroker
from broker.config import BrokerConfig
from broker.config_load import LoadedConfig, check_runtime_changes
from broker.ops_processor import OpsProcessor
from broker.service.config import ConfigService
from namesrv.acl import decide as namesrv_decide
from protocol.acl import sign_fields, verify
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import (
    SECRET_MASK,
    ConfigError,
    PropertiesConfig,
    is_secret_key,
    mask_secrets,
    parse_properties,
)

SECRET = "s3cr3t-admin-key"
ACL = parse_plain_acl(
    "accounts:\n"
    "  - {accessKey: admin001, secretKey: adminsecret, admin: true}\n"
    "  - {accessKey: reader01, secretKey: readersecret, defaultTopicPerm: DENY,"
    " defaultGroupPerm: DENY}\n")


def broker_config(**extra: Any) -> BrokerConfig:
    return BrokerConfig.from_properties({"brokerAccessKey": "brokeradmin",
                                         "brokerSecretKey": SECRET, **extra})


def test_secret_keys_are_recognised() -> None:
    for key in ("brokerSecretKey", "broker_secret_key", "secretKey", "fooSecret",
                "tls.server.keyPassword", "tls.client.keyPassword", "keyPassphrase",
                "securityToken"):
        assert is_secret_key(key), key
    for key in ("brokerAccessKey", "tls.server.keyPath", "tls.client.keyPath", "brokerName",
                "aclPlainFile", "maxMessageSize"):
        assert not is_secret_key(key), key
    assert mask_secrets({"brokerSecretKey": SECRET, "unsetSecret": "", "brokerName": "b"}) == {
        "brokerSecretKey": SECRET_MASK, "unsetSecret": "", "brokerName": "b"}


def test_broker_config_render_masks_secrets() -> None:
    cfg = broker_config()
    text = cfg.render()
    assert SECRET not in text
    props = parse_properties(text)
    assert props["brokerSecretKey"] == SECRET_MASK  # the key stays visible
    assert props["brokerAccessKey"] == "brokeradmin"
    assert SECRET not in repr(cfg)  # a logged or raised config object shows no secret
    assert cfg.broker_secret_key == SECRET  # the daemon itself still has it


def test_generic_config_render_masks_secrets() -> None:
    """Any PropertiesConfig (the name server's, a future one) masks its secret keys."""

    @dataclass(slots=True)
    class Cfg(PropertiesConfig):
        listen_port: int = 1
        some_password: str = field(default="")

    cfg = Cfg.from_properties({"somePassword": SECRET})
    assert SECRET not in cfg.render()
    assert "somePassword=" + SECRET_MASK in cfg.render()


def test_mqbroker_print_masks_secrets() -> None:
    result = CliRunner().invoke(mqbroker, ["-p", "-o", "brokerAccessKey=brokeradmin",
                                           "-o", f"brokerSecretKey={SECRET}"])
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    assert f"brokerSecretKey={SECRET_MASK}" in result.output.splitlines()


NO_CONN: Any = None  # the handlers read nothing of the connection
NO_OPS: Any = None  # ... and the config handlers nothing of the OpsService


def ops(cfg: BrokerConfig, root: Path) -> tuple[OpsProcessor, list[dict[str, str]]]:
    """The processor over a real ConfigService (changes kept under ``root``)."""
    cfg.store_path_root_dir = str(root)
    applied: list[dict[str, str]] = []
    return OpsProcessor(NO_OPS, ConfigService(LoadedConfig.of(cfg), applied.append)), applied


def test_get_broker_config_masks_secrets(tmp_path: Path) -> None:
    processor, _ = ops(broker_config(), tmp_path)
    cmd = RemotingCommand.request(RequestCode.GET_BROKER_CONFIG)
    resp = processor.get_broker_config(NO_CONN, cmd)
    assert resp.code == ResponseCode.SUCCESS
    body = (resp.body or b"").decode()
    assert SECRET not in body
    assert parse_properties(body)["brokerSecretKey"] == SECRET_MASK


@pytest.mark.parametrize("key", ["brokerSecretKey", "BROKERSECRETKEY", "tls.server.keyPassword"])
def test_update_refuses_secret_keys(key: str, tmp_path: Path) -> None:
    cfg = broker_config()
    before = cfg.to_properties()
    with pytest.raises(ConfigError, match="holds a secret: a secret cannot be changed"):
        check_runtime_changes(cfg, {"maxMessageSize": "1024", key: "stolen1"})
    processor, applied = ops(cfg, tmp_path)
    body = f"maxMessageSize=1024\n{key}=stolen1\n".encode()
    resp = trio.run(processor.update_broker_config, NO_CONN,
                    RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=body))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "holds a secret" in (resp.remark or "") and key in (resp.remark or "")
    # nothing changed, not even maxMessageSize, and nothing written
    assert applied == [] and cfg.to_properties() == {**before, "storePathRootDir": str(tmp_path)}
    assert list(tmp_path.iterdir()) == []


def test_update_still_applies_runtime_keys(tmp_path: Path) -> None:
    cfg = broker_config()
    processor, applied = ops(cfg, tmp_path)
    resp = trio.run(processor.update_broker_config, NO_CONN,
                    RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG,
                                            body=b"maxMessageSize=1024\n"))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert applied == [{"maxMessageSize": "1024"}] and cfg.max_message_size == 1024
    # kept for the next start (no config file: the overlay in the store)
    assert parse_properties((tmp_path / "broker.conf.runtime").read_text()) == {
        "maxMessageSize": "1024"}


def _signed(key: str, secret: str) -> tuple[dict[str, object], Any]:
    fields: dict[str, object] = dict(sign_fields({}, None, key, secret))
    return fields, lambda s: verify(fields, None, s)


def test_reading_broker_config_is_admin_only() -> None:
    assert RequestCode.GET_BROKER_CONFIG in ADMIN_CODES
    fields, ok = _signed("reader01", "readersecret")
    d = ACL.decide(RequestCode.GET_BROKER_CONFIG, fields, None, "10.9.9.9", ok)
    assert not d.allowed and d.response_code == ResponseCode.NO_PERMISSION
    assert "Need admin permission for request code=26" in d.remark
    fields, ok = _signed("admin001", "adminsecret")
    assert ACL.decide(RequestCode.GET_BROKER_CONFIG, fields, None, "10.9.9.9", ok).allowed


def test_reading_namesrv_config_is_admin_only() -> None:
    for code in (GET_NAMESRV_CONFIG, UPDATE_NAMESRV_CONFIG):
        fields, ok = _signed("reader01", "readersecret")
        d = namesrv_decide(ACL, code, fields, "10.9.9.9", ok)
        assert not d.allowed and "Need admin permission" in d.remark, code
        fields, ok = _signed("admin001", "adminsecret")
        assert namesrv_decide(ACL, code, fields, "10.9.9.9", ok).allowed, code
