"""ACL administration (issue 18): changing plain_acl.yml as RocketMQ's admin requests
do, the file written atomically and in force at once, the refusal metrics."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import structlog
import yaml

from acl.admin import AccessConfig, AclAdminError, AclDocument, AclVersion
from acl.guard import AclFile, guard_table, write_atomically
from acl.plain import (
    ADMIN_CODES,
    BAD_SIGNATURE,
    NO_ACCESS_KEY,
    NO_PERMISSION,
    Perm,
    parse_plain_acl,
)
from broker.acl.admin_processor import AclAdminProcessor
from protocol.acl import sign_fields
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio.connection import HandlerTable

BASE = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: '12345678'
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
    groupPerms:
      - groupA=DENY
dataVersion:
  - counter: 7
    timestamp: 1600000000000
"""
NOW = 1_700_000_000_000


def doc() -> AclDocument:
    return AclDocument.parse(BASE)


def test_parse_reads_the_version_and_accounts() -> None:
    d = doc()
    assert d.version == AclVersion(7, 1600000000000)
    assert d.global_white == ("10.10.103.*",)
    a = d.account("RocketMQ")
    assert a is not None and a["secretKey"] == "12345678" and a["admin"] is False
    assert a["topicPerms"] == ["topicA=DENY", "topicB=PUB|SUB"]
    assert AclDocument.parse("accounts: []\n").version == AclVersion()


def test_create_account_bumps_version_and_renders_rocketmq_format() -> None:
    new = doc().with_account(AccessConfig("newuser1", "secret9", "192.168.1.*", False, "PUB",
                                          "SUB", ("t1=SUB",), ("g1=PUB|SUB",)), NOW)
    assert new.version == AclVersion(8, NOW)
    text = new.render()
    raw = yaml.safe_load(text)
    assert list(raw) == ["globalWhiteRemoteAddresses", "accounts", "dataVersion"]
    assert raw["dataVersion"] == [{"counter": 8, "timestamp": NOW}]
    assert raw["accounts"][1] == {
        "accessKey": "newuser1", "secretKey": "secret9", "whiteRemoteAddress": "192.168.1.*",
        "admin": False, "defaultTopicPerm": "PUB", "defaultGroupPerm": "SUB",
        "topicPerms": ["t1=SUB"], "groupPerms": ["g1=PUB|SUB"]}
    # a secret of digits stays text for any YAML reader
    assert raw["accounts"][0]["secretKey"] == "12345678"
    # the file reparses, with the new account in force
    config = parse_plain_acl(text)
    assert config.accounts["newuser1"].default_topic_perm == Perm.PUB
    assert AclDocument.parse(text) == new


def test_update_keeps_fields_not_given() -> None:
    new = doc().with_account(AccessConfig("RocketMQ", admin=True, default_topic_perm="SUB"),
                             NOW)
    a = new.account("RocketMQ")
    assert a is not None
    assert a["secretKey"] == "12345678" and a["admin"] is True
    assert a["defaultTopicPerm"] == "SUB" and a["topicPerms"] == ["topicA=DENY", "topicB=PUB|SUB"]
    assert len(new.accounts) == 1
    new2 = new.with_account(AccessConfig("RocketMQ", topic_perms=()), NOW + 1)
    assert new2.account("RocketMQ")["topicPerms"] == []  # type: ignore[index]
    assert new2.account("RocketMQ")["admin"] is True  # admin not given: kept  # type: ignore[index]
    created = new2.with_account(AccessConfig("newuser1", "secret9"), NOW)
    assert created.account("newuser1")["admin"] is False  # type: ignore[index]
    assert new2.version.counter == 9


@pytest.mark.parametrize(("cfg", "message"), [
    (AccessConfig("short", "secret9"), "accessKey must be"),
    (AccessConfig("newuser1", None), "needs a secretKey"),
    (AccessConfig("newuser1", "12345"), "secretKey must be"),
    (AccessConfig("newuser1", "secret9", default_topic_perm="ALL"), "defaultTopicPerm"),
    (AccessConfig("newuser1", "secret9", topic_perms=("t1",)), "name=PERM"),
    (AccessConfig("newuser1", "secret9", group_perms=("g1=WRITE",)), "groupPerms"),
    (AccessConfig("newuser1", "secret9", white_remote_address="300.1.1.1"),
     "whiteRemoteAddress"),
    (AccessConfig("RocketMQ", "12345"), "secretKey must be"),
])
def test_bad_update_changes_nothing(cfg: AccessConfig, message: str) -> None:
    d = doc()
    with pytest.raises(AclAdminError, match=message):
        d.with_account(cfg, NOW)
    assert d == doc()


def test_delete_and_global_white() -> None:
    d = doc()
    gone = d.without_account("RocketMQ", NOW)
    assert gone.accounts == () and gone.version.counter == 8
    with pytest.raises(AclAdminError, match="no account"):
        gone.without_account("RocketMQ", NOW)
    white = d.with_global_white(["127.0.0.1", " 192.168.*.* ", ""], NOW)
    assert white.global_white == ("127.0.0.1", "192.168.*.*")
    assert white.version.counter == 8
    assert parse_plain_acl(white.render()).global_white[0].matches("127.0.0.1")
    with pytest.raises(AclAdminError, match="globalWhiteRemoteAddresses"):
        d.with_global_white(["1.2.3.4", "not an address"], NOW)


def test_from_header_fields() -> None:
    cfg = AccessConfig.from_fields({
        "accessKey": "newuser1", "secretKey": "secret9", "admin": "true",
        "topicPerms": "t1=SUB, t2=PUB|SUB", "groupPerms": "", "AccessKey": "rocketmq2"})
    assert cfg.admin and cfg.topic_perms == ("t1=SUB", "t2=PUB|SUB") and cfg.group_perms == ()
    assert AccessConfig.from_fields(cfg.to_fields()) == cfg
    with pytest.raises(AclAdminError, match="accessKey"):
        AccessConfig.from_fields({"secretKey": "x"})
    with pytest.raises(AclAdminError, match="admin"):
        AccessConfig.from_fields({"accessKey": "newuser1", "admin": "maybe"})
    with pytest.raises(AclAdminError, match="longer"):
        AccessConfig.from_fields({"accessKey": "newuser1", "topicPerms": "t=SUB," * 10_000})
    assert AccessConfig.from_fields({"accessKey": "newuser1"}).admin is None
    assert AccessConfig("newuser1", white_remote_address="") == AccessConfig.from_fields(
        {"accessKey": "newuser1", "whiteRemoteAddress": ""})


def test_acl_config_round_trip_and_hostile_bodies() -> None:
    d = doc()
    body = d.to_acl_config()
    assert body["globalWhiteAddrs"] == ["10.10.103.*"]
    assert body["plainAccessConfigs"][0]["topicPerms"] == ["topicA=DENY", "topicB=PUB|SUB"]
    assert AclDocument.from_acl_config(body, d.version) == d
    for bad in ([], {"globalWhiteAddrs": "x"}, {"plainAccessConfigs": [1]},
                {"plainAccessConfigs": [{"accessKey": "k"}]},
                {"plainAccessConfigs": [{"accessKey": "newuser1", "secretKey": "secret9",
                                         "topicPerms": "t=SUB"}]}):
        with pytest.raises(AclAdminError):
            AclDocument.from_acl_config(bad, d.version)
    v = AclVersion(3, 5)
    assert AclVersion.from_json(v.to_json()) == v
    assert AclVersion.from_json("{bad") == AclVersion()


def test_write_atomically_keeps_mode(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(BASE)
    path.chmod(0o640)
    write_atomically(path, "accounts: []\n")
    assert path.read_text() == "accounts: []\n"
    assert path.stat().st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["plain_acl.yml"]


# ---- the trio edge: AclFile and the processor ------------------------------------


def _processor(acl: AclFile | None) -> AclAdminProcessor:
    return AclAdminProcessor(acl, "broker-a", "DefaultCluster", lambda: "127.0.0.1:10911",
                             lambda: NOW)


async def _call(p: AclAdminProcessor, code: int, fields: dict[str, str]) -> RemotingCommand:
    t = HandlerTable()
    p.register(t)
    _, handler = t.lookup(code)
    assert handler is not None
    resp = await handler(SimpleNamespace(remote_addr="127.0.0.1:1"),  # type: ignore[arg-type]
                         RemotingCommand.request(code, fields))
    assert resp is not None
    return resp


async def test_processor_changes_file_and_config_at_once(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(BASE)
    acl = AclFile(path)
    acl.load_at_start()
    p = _processor(acl)
    resp = await _call(p, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {
        "accessKey": "newuser1", "secretKey": "secret9", "defaultTopicPerm": "PUB"})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert acl.config is not None and "newuser1" in acl.config.accounts  # no reload wait
    assert AclDocument.parse(path.read_text()).version.counter == 8

    before = path.read_text()
    resp = await _call(p, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {
        "accessKey": "newuser2", "secretKey": "123"})
    assert resp.code == ResponseCode.SYSTEM_ERROR and "secretKey" in (resp.remark or "")
    assert path.read_text() == before  # a bad update changes nothing

    resp = await _call(p, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {})
    assert resp.code == ResponseCode.SUCCESS
    assert AclVersion.from_json(resp.ext_fields["version"]).counter == 8
    assert resp.ext_fields["brokerName"] == "broker-a"
    assert resp.ext_fields["clusterName"] == "DefaultCluster"

    resp = await _call(p, RequestCode.DELETE_ACL_CONFIG, {"accessKey": "newuser1"})
    assert resp.code == ResponseCode.SUCCESS
    assert "newuser1" not in acl.config.accounts
    resp = await _call(p, RequestCode.DELETE_ACL_CONFIG, {"accessKey": "newuser1"})
    assert resp.code == ResponseCode.SYSTEM_ERROR and "no account" in (resp.remark or "")

    resp = await _call(p, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                       {"globalWhiteAddrs": "127.0.0.1,10.0.0.*"})
    assert resp.code == ResponseCode.SUCCESS
    assert len(acl.config.global_white) == 2

    resp = await _call(p, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, {})
    assert resp.code == ResponseCode.SUCCESS
    copy = AclDocument.from_acl_config(resp.decode_body(),
                                       AclVersion.from_json(resp.ext_fields["version"]))
    assert copy == AclDocument.parse(path.read_text())
    assert copy.version.counter == 10

    # a slave follows: a different version replaces its file, the same one does nothing
    slave_path = tmp_path / "slave_acl.yml"
    slave_path.write_text(BASE)
    slave = AclFile(slave_path)
    slave.load_at_start()
    assert await slave.follow(copy)
    assert AclDocument.parse(slave_path.read_text()) == copy
    assert slave.config is not None and len(slave.config.global_white) == 2
    assert not await slave.follow(copy)


async def test_processor_without_acl_and_with_bad_file(tmp_path: Path) -> None:
    resp = await _call(_processor(None), RequestCode.DELETE_ACL_CONFIG, {"accessKey": "x" * 8})
    assert resp.code == ResponseCode.SYSTEM_ERROR and "aclEnable" in (resp.remark or "")
    path = tmp_path / "plain_acl.yml"
    path.write_text(BASE)
    acl = AclFile(path)
    acl.load_at_start()
    path.write_text("accounts: [ {accessKey: x\n")
    resp = await _call(_processor(acl), RequestCode.DELETE_ACL_CONFIG,
                       {"accessKey": "RocketMQ"})
    assert resp.code == ResponseCode.SYSTEM_ERROR and "malformed" in (resp.remark or "")
    assert path.read_text() == "accounts: [ {accessKey: x\n"
    resp = await _call(_processor(acl), RequestCode.DELETE_ACL_CONFIG, {})
    assert resp.code == ResponseCode.SYSTEM_ERROR and "accessKey" in (resp.remark or "")


async def test_deleted_file_logged_once(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(BASE)
    acl = AclFile(path)
    acl.load_at_start()
    path.unlink()
    with structlog.testing.capture_logs() as logs:
        await acl.check()
        await acl.check()
    deleted = [e for e in logs if e["event"] == "ACL file deleted, keeping the last good accounts"]
    assert len(deleted) == 1
    assert acl.config is not None and "RocketMQ" in acl.config.accounts
    path.write_text("accounts: []\n")
    with structlog.testing.capture_logs() as logs:
        await acl.check()
    assert [e["event"] for e in logs] == ["ACL file back", "ACL accounts reloaded"]
    assert acl.config is not None and not acl.config.accounts


def test_admin_codes() -> None:
    for code in (50, 51, 52, 53, 54):
        assert code in ADMIN_CODES


# ---- refusals counted -------------------------------------------------------------


def test_guard_reports_refusal_reasons() -> None:
    config = parse_plain_acl(BASE)
    seen: list[tuple[int, str]] = []
    t = HandlerTable()
    t.register(RequestCode.SEND_MESSAGE_V2, lambda c, cmd: cmd.response(ResponseCode.SUCCESS))
    sync, _ = guard_table(t, lambda: config, lambda code, why: seen.append((code, why))
                          ).lookup(RequestCode.SEND_MESSAGE_V2)
    assert sync is not None
    conn = SimpleNamespace(remote_addr="10.1.2.3:5")
    for fields in ({"b": "topicA"},
                   sign_fields({"b": "topicA"}, b"x", "RocketMQ", "wrongsecret"),
                   sign_fields({"b": "topicA"}, b"x", "RocketMQ", "12345678"),
                   sign_fields({"b": "topicB"}, b"x", "RocketMQ", "12345678")):
        sync(conn, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, b"x"))
    assert seen == [(RequestCode.SEND_MESSAGE_V2, NO_ACCESS_KEY),
                    (RequestCode.SEND_MESSAGE_V2, BAD_SIGNATURE),
                    (RequestCode.SEND_MESSAGE_V2, NO_PERMISSION)]
