"""ClientConfig (client/config.py): validation, the environment, the old keywords merged
into it (and contradictions), every client class taking it, and mqadmin building one
instead of writing os.environ. No sockets: constructors only."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import click
import pytest
from click.testing import CliRunner

from client import blocking
from client.admin import DEFAULT_TIMEOUT, MQAdmin, MQAdminError
from client.admin_cli import cli, tool_client_config, tool_config
from client.config import ENV_ACCESS_KEY, ENV_SECRET_KEY, ClientConfig, merge_config
from client.credentials import AclCredentials
from client.errors import MQClientError
from client.instance import DEFAULT_REQUEST_TIMEOUT
from client.lite_pull_consumer import LitePullConsumer
from client.producer import Producer
from client.pull_consumer import PullConsumer
from client.push_consumer import PushConsumer
from client.transaction import LocalTransactionState, TransactionProducer
from protocol.message import Message, MessageExt
from protocol.namesrv_addr import NAMESRV_ADDR_ENV
from protocol.trio.tls import ENV_CA, ENV_CERT, ENV_ENABLE, ENV_KEY, ClientTls

CREDS = AclCredentials("ak123456", "sk-secret-1")
OTHER = AclCredentials("ak654321", "sk-secret-2")
FULL = ClientConfig(namesrv_addr="10.0.0.1:9876;10.0.0.2:9876", credentials=CREDS, use_tls=True,
                    tls_ca_path="/ca.pem", tls_cert_path="/c.pem", tls_key_path="/c.key",
                    request_timeout=7.5, instance_name="inst-1")
# the same settings as the old keywords
FULL_KEYWORDS: dict[str, Any] = {
    "namesrv_addr": FULL.namesrv_addr, "access_key": CREDS.access_key,
    "secret_key": CREDS.secret_key, "use_tls": True, "tls_ca_path": "/ca.pem",
    "tls_cert_path": "/c.pem", "tls_key_path": "/c.key", "request_timeout": 7.5,
    "instance_name": "inst-1"}


class _Listener:
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


# ---- validation -------------------------------------------------------------------


def test_an_empty_config_sets_nothing() -> None:
    cfg = ClientConfig()
    assert cfg.namesrv_addr is None and cfg.credentials is None and cfg.client_tls() is None
    assert cfg.timeout_or(3.0) == 3.0 and cfg.instance_name is None


def test_a_full_config_keeps_its_values() -> None:
    assert FULL.client_tls() == ClientTls(ca_path="/ca.pem", cert_path="/c.pem",
                                          key_path="/c.key")
    assert FULL.timeout_or(3.0) == 7.5
    with pytest.raises(AttributeError):
        FULL.namesrv_addr = "x:1"  # type: ignore[misc]
    assert "sk-secret-1" not in repr(FULL)


@pytest.mark.parametrize(("fields", "message"), [
    ({"namesrv_addr": "nohostport"}, "bad name server address"),
    ({"namesrv_addr": " ; "}, "no name server address"),
    ({"credentials": ("ak", "sk")}, "credentials must be AclCredentials"),
    ({"use_tls": "yes"}, "use_tls must be True or False"),
    ({"tls_ca_path": "/ca.pem"}, "without use_tls"),
    ({"use_tls": True, "tls_ca_path": 5}, "tls_ca_path must be a path"),
    ({"use_tls": True, "tls_cert_path": "/c.pem"}, "tls_cert_path and tls_key_path go together"),
    ({"use_tls": True, "tls_key_path": "/c.key"}, "tls_cert_path and tls_key_path go together"),
    ({"request_timeout": 0}, "request_timeout must be a positive number"),
    ({"request_timeout": -1.0}, "request_timeout must be a positive number"),
    ({"request_timeout": float("inf")}, "request_timeout must be a positive number"),
    ({"request_timeout": True}, "request_timeout must be a positive number"),
    ({"request_timeout": "3"}, "request_timeout must be a positive number"),
    ({"instance_name": " "}, "instance_name must be a non-empty string"),
])
def test_bad_values_are_refused_when_built(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(MQClientError, match=message):
        ClientConfig(**fields)


# ---- the environment ----------------------------------------------------------------


def test_from_env_reads_name_servers_credentials_and_tls() -> None:
    env = {NAMESRV_ADDR_ENV: " 1.2.3.4:9876 ", ENV_ACCESS_KEY: "envkey01",
           ENV_SECRET_KEY: "envsecret", ENV_ENABLE: "true", ENV_CA: "/env-ca.pem",
           ENV_CERT: "/env-c.pem", ENV_KEY: "/env-c.key"}
    assert ClientConfig.from_env(env) == ClientConfig(
        namesrv_addr="1.2.3.4:9876", credentials=AclCredentials("envkey01", "envsecret"),
        use_tls=True, tls_ca_path="/env-ca.pem", tls_cert_path="/env-c.pem",
        tls_key_path="/env-c.key")
    # fields given win over the environment
    assert ClientConfig.from_env(env, namesrv_addr="5.6.7.8:1", request_timeout=2.0) == \
        ClientConfig(namesrv_addr="5.6.7.8:1", credentials=AclCredentials("envkey01", "envsecret"),
                     use_tls=True, tls_ca_path="/env-ca.pem", tls_cert_path="/env-c.pem",
                     tls_key_path="/env-c.key", request_timeout=2.0)


def test_from_env_without_settings_is_empty() -> None:
    assert ClientConfig.from_env({}) == ClientConfig()
    # TLS paths without ROCKETMQ_TLS_ENABLE do nothing, as when a client starts
    assert ClientConfig.from_env({ENV_ENABLE: "false", ENV_CA: "/ca.pem"}) == ClientConfig()


def test_from_env_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAMESRV_ADDR_ENV, "9.9.9.9:9876")
    monkeypatch.delenv(ENV_ACCESS_KEY, raising=False)
    monkeypatch.delenv(ENV_SECRET_KEY, raising=False)
    monkeypatch.delenv(ENV_ENABLE, raising=False)
    assert ClientConfig.from_env() == ClientConfig(namesrv_addr="9.9.9.9:9876")


def test_from_env_wants_both_halves_of_the_key() -> None:
    with pytest.raises(MQClientError, match=f"{ENV_ACCESS_KEY} and {ENV_SECRET_KEY} go together"):
        ClientConfig.from_env({ENV_ACCESS_KEY: "envkey01"})


# ---- merging the old keywords --------------------------------------------------------


def test_keywords_alone_build_the_config() -> None:
    assert merge_config(None, **FULL_KEYWORDS) == FULL
    assert merge_config(None) == ClientConfig()
    assert merge_config(None, credentials=CREDS) == ClientConfig(credentials=CREDS)


def test_defaults_are_not_given_keywords() -> None:
    assert merge_config(FULL, namesrv_addr=None, use_tls=False, tls_ca_path=None,
                        request_timeout=None, credentials=None) is FULL


def test_a_keyword_fills_what_the_config_leaves_unset() -> None:
    cfg = ClientConfig(credentials=CREDS)
    merged = merge_config(cfg, namesrv_addr="1.1.1.1:1", request_timeout=2.0)
    assert merged == ClientConfig(namesrv_addr="1.1.1.1:1", credentials=CREDS,
                                  request_timeout=2.0)
    assert cfg == ClientConfig(credentials=CREDS)  # frozen: a new one


def test_an_agreeing_keyword_is_fine() -> None:
    assert merge_config(FULL, **FULL_KEYWORDS) == FULL


@pytest.mark.parametrize(("keywords", "message"), [
    ({"namesrv_addr": "1.1.1.1:1"},
     "namesrv_addr='1.1.1.1:1' contradicts config.namesrv_addr='10.0.0.1:9876;10.0.0.2:9876'"),
    ({"request_timeout": 1.0}, "request_timeout=1.0 contradicts config.request_timeout=7.5"),
    ({"instance_name": "x"}, "instance_name='x' contradicts config.instance_name='inst-1'"),
    ({"tls_ca_path": "/other.pem"},
     "tls_ca_path='/other.pem' contradicts config.tls_ca_path='/ca.pem'"),
    ({"credentials": OTHER}, "credentials=.*ak654321.* contradicts config.credentials=.*ak123456"),
    ({"access_key": "ak654321", "secret_key": "sk-secret-2"},
     "credentials=.*ak654321.* contradicts config.credentials"),
])
def test_a_contradicting_keyword_is_a_type_error_naming_both(keywords: dict[str, Any],
                                                            message: str) -> None:
    with pytest.raises(TypeError, match=message) as err:
        merge_config(FULL, **keywords)
    assert "sk-secret" not in str(err.value)  # secrets stay out of the message


def test_merge_refuses_what_is_not_a_config_keyword() -> None:
    with pytest.raises(TypeError, match="config must be a ClientConfig"):
        merge_config({"namesrv_addr": "a:1"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown client config keyword.*: send_timeout"):
        merge_config(None, send_timeout=3.0)


def test_merge_keeps_the_credential_rules() -> None:
    with pytest.raises(MQClientError, match="access_key and secret_key go together"):
        merge_config(None, access_key="ak123456")
    with pytest.raises(MQClientError, match="not both"):
        merge_config(None, credentials=CREDS, access_key="ak123456", secret_key="s")
    with pytest.raises(MQClientError, match="without use_tls"):
        merge_config(ClientConfig(), tls_ca_path="/ca.pem")


# ---- every client class ---------------------------------------------------------------

_ASYNC: dict[str, Callable[..., Any]] = {
    "Producer": lambda **kw: Producer("cfg_group", **kw),
    "TransactionProducer": lambda **kw: TransactionProducer(
        "cfg_group", kw.pop("namesrv_addr", None), _Listener(), **kw),
    "PushConsumer": lambda **kw: PushConsumer("cfg_group", **kw),
    "LitePullConsumer": lambda **kw: LitePullConsumer("cfg_group", **kw),
    "PullConsumer": lambda **kw: PullConsumer("cfg_group", **kw),
}
_BLOCKING: dict[str, Callable[..., Any]] = {
    "blocking.Producer": lambda **kw: blocking.Producer("cfg_group", **kw),
    "blocking.TransactionProducer": lambda **kw: blocking.TransactionProducer(
        "cfg_group", kw.pop("namesrv_addr", None), _Listener(), **kw),
    "blocking.PushConsumer": lambda **kw: blocking.PushConsumer("cfg_group", **kw),
    "blocking.LitePullConsumer": lambda **kw: blocking.LitePullConsumer("cfg_group", **kw),
    "blocking.PullConsumer": lambda **kw: blocking.PullConsumer("cfg_group", **kw),
}
# producers take no request_timeout or instance_name keyword (the config carries them)
_NO_TIMEOUT_KEYWORD = {"Producer", "TransactionProducer", "blocking.Producer",
                       "blocking.TransactionProducer"}
_NO_INSTANCE_KEYWORD = _NO_TIMEOUT_KEYWORD


def _impl(client: Any) -> Any:
    return getattr(client, "_impl", client)  # a blocking facade's async client


def _keywords(name: str) -> dict[str, Any]:
    kw = dict(FULL_KEYWORDS)
    if name in _NO_TIMEOUT_KEYWORD:
        del kw["request_timeout"]
    if name in _NO_INSTANCE_KEYWORD:
        del kw["instance_name"]
    return kw


def _settings(client: Any) -> tuple[Any, ...]:
    c = _impl(client)
    return (c.config, c.namesrv_addr, c.credentials, c.tls)


@pytest.mark.parametrize("name", [*_ASYNC, *_BLOCKING])
def test_each_client_takes_a_config(name: str) -> None:
    make = {**_ASYNC, **_BLOCKING}[name]
    client = make(config=FULL)
    c = _impl(client)
    assert c.config is FULL
    assert c.namesrv_addr == "10.0.0.1:9876;10.0.0.2:9876"
    assert c.credentials == CREDS
    assert c.tls == ClientTls(ca_path="/ca.pem", cert_path="/c.pem", key_path="/c.key")
    if hasattr(c, "request_timeout"):
        assert c.request_timeout == 7.5
        assert c.instance_name == "inst-1"


@pytest.mark.parametrize("name", [*_ASYNC, *_BLOCKING])
def test_old_keywords_and_config_are_equivalent(name: str) -> None:
    make = {**_ASYNC, **_BLOCKING}[name]
    kw = _keywords(name)
    partial = ClientConfig(**{k: getattr(FULL, k) for k in FULL_KEYWORDS
                              if k in kw and k not in ("access_key", "secret_key")},
                           credentials=CREDS)
    assert _settings(make(**kw)) == _settings(make(config=partial))
    # half from the config, half from keywords: the same again
    assert _settings(make(config=ClientConfig(credentials=CREDS),
                          namesrv_addr=FULL.namesrv_addr)) == \
        _settings(make(namesrv_addr=FULL.namesrv_addr, credentials=CREDS))


@pytest.mark.parametrize("name", [*_ASYNC, *_BLOCKING])
def test_each_client_refuses_a_contradiction(name: str) -> None:
    make = {**_ASYNC, **_BLOCKING}[name]
    with pytest.raises(TypeError, match="namesrv_addr='1.1.1.1:1' contradicts config.namesrv_addr"):
        make(config=FULL, namesrv_addr="1.1.1.1:1")
    with pytest.raises(TypeError, match="contradicts config.tls_ca_path"):
        make(config=FULL, use_tls=True, tls_ca_path="/other.pem")


@pytest.mark.parametrize("name", [*_ASYNC, *_BLOCKING])
def test_without_config_the_defaults_are_unchanged(name: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAMESRV_ADDR_ENV, raising=False)
    c = _impl({**_ASYNC, **_BLOCKING}[name]())
    assert c.config == ClientConfig()
    assert (c.namesrv_addr, c.credentials, c.tls) == ("127.0.0.1:9876", None, None)
    if hasattr(c, "request_timeout"):
        assert c.request_timeout == DEFAULT_REQUEST_TIMEOUT and c.instance_name is None


def test_mqadmin_takes_a_config_and_the_old_keywords() -> None:
    # MQAdmin loads its TLS context when built: the system's CAs, no files
    cfg = dataclasses.replace(FULL, tls_ca_path=None, tls_cert_path=None, tls_key_path=None)
    admin = MQAdmin(config=cfg)
    assert admin.namesrv_list == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert (admin.credentials, admin.timeout, admin.tls) == (CREDS, 7.5, ClientTls())
    old = MQAdmin(FULL.namesrv_addr, 7.5, access_key=CREDS.access_key,
                  secret_key=CREDS.secret_key, use_tls=True)
    assert (old.namesrv_list, old.credentials, old.timeout, old.tls) == \
        (admin.namesrv_list, admin.credentials, admin.timeout, admin.tls)
    assert MQAdmin("1.1.1.1:1").timeout == DEFAULT_TIMEOUT
    with pytest.raises(TypeError, match="request_timeout=1.0 contradicts config.request_timeout=7.5"):
        MQAdmin(config=cfg, timeout=1.0)
    with pytest.raises(MQAdminError, match="without use_tls"):
        MQAdmin("1.1.1.1:1", tls_ca_path="/ca.pem")


# ---- mqadmin: one ClientConfig from its options, no os.environ -------------------------


@click.command()
def _probe() -> None:
    cfg = tool_config()
    creds = "none" if cfg.credentials is None else cfg.credentials.access_key
    click.echo(f"{creds} {cfg.use_tls} {cfg.tls_ca_path} {cfg.tls_cert_path} {cfg.tls_key_path}")


@pytest.fixture
def probe() -> Any:
    cli.add_command(_probe, "probeConfig")
    yield
    cli.commands.pop("probeConfig")


def test_mqadmin_gives_its_clients_a_config_not_the_environment(
        probe: None, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ENV_ENABLE, ENV_CA, ENV_CERT, ENV_KEY):
        monkeypatch.delenv(name, raising=False)
    out = CliRunner().invoke(cli, ["--access-key", "ak123456", "--secret-key", "sk-secret-1",
                                   "--tls", "--tls-ca", "/ca.pem", "--tls-cert", "/c.pem",
                                   "--tls-key", "/c.key", "probeConfig"])
    assert out.exit_code == 0, out.output
    assert out.output.split() == ["ak123456", "True", "/ca.pem", "/c.pem", "/c.key"]
    assert not {ENV_ENABLE, ENV_CA, ENV_CERT, ENV_KEY} & set(os.environ)
    out = CliRunner().invoke(cli, ["probeConfig"], env={ENV_ACCESS_KEY: None,
                                                        ENV_SECRET_KEY: None})
    assert out.exit_code == 0 and out.output.split() == ["none", "False", "None", "None", "None"]


def test_mqadmin_tls_options_that_do_not_go_together(probe: None) -> None:
    out = CliRunner().invoke(cli, ["--tls-ca", "/ca.pem", "probeConfig"])
    assert out.exit_code == 2 and "need --tls" in out.output
    out = CliRunner().invoke(cli, ["--tls", "--tls-cert", "/c.pem", "probeConfig"])
    assert out.exit_code == 2 and "go together" in out.output


def test_tool_client_config_outside_a_command() -> None:
    assert tool_config() == ClientConfig()
    assert tool_client_config("ak123456", "sk-secret-1", True, "/ca.pem", None, None) == \
        ClientConfig(credentials=CREDS, use_tls=True, tls_ca_path="/ca.pem")
