"""The name server's config over the wire without sockets (namesrv/runtime_config.py):
which keys change at run time, secrets refused first, the change written to the
config file before it applies, nothing applied when the file cannot be written."""

from __future__ import annotations

from pathlib import Path

import pytest

from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from namesrv.runtime_config import NOT_PERSISTED, check_namesrv_changes
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError, parse_properties
from tests.broker.fakes import FakeConn


def test_runtime_keys_are_checked_on_a_copy() -> None:
    cfg = NamesrvConfig()
    assert check_namesrv_changes(cfg, {"ORDERMESSAGEENABLE": "TRUE"}) == \
        {"orderMessageEnable": "true"}
    assert cfg.order_message_enable is False  # nothing applied
    for props, why in (({}, "no key to change"),
                       ({"listenPort": "1"}, "'listenPort' cannot change at run time"),
                       ({"orderMessageEnable": "maybe"}, "bad value for orderMessageEnable"),
                       ({"brokerChannelExpiredTime": "0"}, "must be positive"),
                       ({"kvConfigMaxKeys": "-1"}, "must not be negative"),
                       # a secret is refused first, by name, whatever comes with it
                       ({"listenPort": "1", "aclSecretKey": "x"}, "holds a secret")):
        with pytest.raises(ConfigError, match=why):
            check_namesrv_changes(cfg, props)


async def update(c: NamesrvController, body: bytes) -> RemotingCommand:
    _, handler = c.server.handlers.lookup(RequestCode.UPDATE_NAMESRV_CONFIG)
    assert handler is not None
    resp = await handler(FakeConn(), RemotingCommand.request(  # type: ignore[arg-type]
        RequestCode.UPDATE_NAMESRV_CONFIG, body=body))
    assert resp is not None
    return resp


async def test_a_change_is_written_to_the_config_file_then_applied(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text("# mine\nlistenPort=9999\norderMessageEnable=false\n")
    cfg = NamesrvConfig()
    cfg.update(parse_properties(conf.read_text()))
    c = NamesrvController(cfg, conf)
    resp = await update(c, b"orderMessageEnable=true\nbrokerChannelExpiredTime=30000\n"
                           b"kvConfigMaxKeys=10\n")
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
    assert conf.read_text() == ("# mine\nlistenPort=9999\norderMessageEnable=true\n"
                                "brokerChannelExpiredTime=30000\nkvConfigMaxKeys=10\n")
    assert c.processor.order_message_enable is True
    assert c.routes.channel_expired_s == 30.0
    assert c.kv.limits.max_keys == 10
    get, _ = c.server.handlers.lookup(RequestCode.GET_NAMESRV_CONFIG)
    assert get is not None
    shown = get(FakeConn(), RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG))  # type: ignore[arg-type]
    assert shown is not None and shown.body is not None
    assert parse_properties(shown.body.decode())["orderMessageEnable"] == "true"


async def test_refusals_change_nothing(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text("listenPort=9999\n")
    c = NamesrvController(NamesrvConfig(), conf)
    for body, why in ((b"tlsServerKeyPassword=x\n", "holds a secret"),
                      (b"listenPort=1\n", "cannot change at run time"),
                      (b"\xff\xfe", "not UTF-8")):
        resp = await update(c, body)
        assert resp.code == ResponseCode.SYSTEM_ERROR and why in (resp.remark or ""), resp.remark
    assert conf.read_text() == "listenPort=9999\n"
    # the file cannot be written: refused, not applied
    conf.unlink()
    conf.mkdir()
    resp = await update(c, b"orderMessageEnable=true\n")
    assert resp.code == ResponseCode.SYSTEM_ERROR and "not applied" in (resp.remark or "")
    assert c.config.order_message_enable is False and c.processor.order_message_enable is False


async def test_without_a_config_file_the_answer_says_it_is_not_persisted() -> None:
    c = NamesrvController(NamesrvConfig())
    resp = await update(c, b"orderMessageEnable=true\n")
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, NOT_PERSISTED)
    assert c.processor.order_message_enable is True
