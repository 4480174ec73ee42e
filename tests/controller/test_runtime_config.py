"""controller/runtime_config.py: UPDATE_CONTROLLER_CONFIG's changes checked, written
(atomically) before they are applied, and the overlay read at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.config import ControllerConfig
from controller.runtime_config import (
    RUNTIME_FILE,
    check_changes,
    load_overlay,
    overlay_path,
    write_changes,
)
from controller.service import ControllerService
from controller.state_store import AlwaysLeader
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError
from tests.controller.fakes import MemoryStore


class Conn:
    remote_addr = "127.0.0.1:5555"


def test_check_changes_names_what_is_wrong() -> None:
    cfg = ControllerConfig()
    assert check_changes(cfg, {"brokerheartbeattimeout": " 3000 "}) == {
        "brokerHeartbeatTimeout": "3000"}
    for props, words in (({"nope": "1"}, "cannot change at run time"),
                         ({"controllerStorePath": "/x"}, "cannot change at run time"),
                         ({"brokerHeartbeatTimeout": "0"}, "must be positive"),
                         ({"brokerHeartbeatTimeout": "soon"}, "brokerHeartbeatTimeout"),
                         ({}, "no key")):
        with pytest.raises(ConfigError, match=words):
            check_changes(cfg, props)
    assert cfg.broker_heartbeat_timeout == 10_000  # nothing applied


def test_write_changes_rewrites_its_keys_and_keeps_the_rest(tmp_path: Path) -> None:
    conf = tmp_path / "controller.properties"
    conf.write_text("# mine\nlistenPort=9878\nbrokerHeartbeatTimeout=1000\n")
    conf.chmod(0o640)
    write_changes(conf, {"brokerHeartbeatTimeout": "3000", "enableElectUncleanMaster": "true"})
    assert conf.read_text() == ("# mine\nlistenPort=9878\nbrokerHeartbeatTimeout=3000\n"
                                "enableElectUncleanMaster=true\n")
    assert conf.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["controller.properties"]  # no temp left


def test_overlay_applied_at_start(tmp_path: Path) -> None:
    cfg = ControllerConfig()
    cfg.update({"controllerStorePath": str(tmp_path / "store")})
    assert load_overlay(cfg) == {}  # none yet
    assert overlay_path(cfg) == tmp_path / "store" / RUNTIME_FILE
    write_changes(overlay_path(cfg), {"brokerHeartbeatTimeout": "2500"})
    assert load_overlay(cfg) == {"brokerHeartbeatTimeout": "2500"}
    assert cfg.broker_heartbeat_timeout == 2500
    overlay_path(cfg).write_text("listenPort=1\n")
    with pytest.raises(ConfigError, match=f"{RUNTIME_FILE}.*cannot change at run time"):
        load_overlay(cfg)


async def _update(svc: ControllerService, text: str) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.UPDATE_CONTROLLER_CONFIG, body=text.encode())
    return await svc.processor.update_controller_config(Conn(), cmd)  # type: ignore[arg-type]


async def test_update_is_written_before_the_answer(tmp_path: Path) -> None:
    settings = tmp_path / "store" / RUNTIME_FILE
    svc = ControllerService(ControllerConfig(), MemoryStore(), AlwaysLeader(), serve=False,
                            settings_file=settings)
    r = await _update(svc, "brokerHeartbeatTimeout=3000\n")
    assert r.code == ResponseCode.SUCCESS and r.remark is None
    assert settings.read_text() == "brokerHeartbeatTimeout=3000\n"
    assert svc.config.broker_heartbeat_timeout == 3000 and svc.heartbeats.timeout_s == 3.0
    r = await _update(svc, "brokerHeartbeatTimeout=3000\nnope=1\n")
    assert r.code == ResponseCode.SYSTEM_ERROR and "nope" in (r.remark or "")
    r = await _update(svc, "enableElectUncleanMaster=maybe\n")
    assert r.code == ResponseCode.SYSTEM_ERROR and "enableElectUncleanMaster" in (r.remark or "")
    assert settings.read_text() == "brokerHeartbeatTimeout=3000\n"
    assert svc.config.enable_elect_unclean_master is False


async def test_a_write_that_fails_applies_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    svc = ControllerService(ControllerConfig(), MemoryStore(), AlwaysLeader(), serve=False,
                            settings_file=blocker / "sub" / RUNTIME_FILE)  # under a file
    r = await _update(svc, "brokerHeartbeatTimeout=3000\n")
    assert r.code == ResponseCode.SYSTEM_ERROR and "not applied" in (r.remark or "")
    assert svc.config.broker_heartbeat_timeout == 10_000


async def test_without_a_settings_file_the_answer_says_so() -> None:
    svc = ControllerService(ControllerConfig(), MemoryStore(), AlwaysLeader(), serve=False)
    r = await _update(svc, "notifyBrokerRoleChanged=false\n")
    assert r.code == ResponseCode.SUCCESS and "not persisted" in (r.remark or "")
    assert svc.config.notify_broker_role_changed is False
