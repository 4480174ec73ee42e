"""RocketMQ's plain ACL as pure code: address patterns, plain_acl.yml, decisions, reloads."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from acl import (
    ADMIN_CODES,
    AclConfig,
    AclWatcher,
    Perm,
    RemoteAddressStrategy,
    parse_plain_acl,
    required_resources,
)
from acl.plain import INVOKE_BROKER_TO_RESET_OFFSET, SIGNATURE_REFUSED, check_permission
from protocol.client_data import ConsumerData, HeartbeatData, SubscriptionData
from protocol.codes import RequestCode, ResponseCode

# ---------------------------------------------------------------- addresses

ADDRESS_TABLE = [
    # pattern, matching hosts, non-matching hosts
    ("*", ["1.2.3.4", "::1", "not-an-ip"], []),
    ("*.*.*.*", ["10.0.0.1"], []),
    ("*:*:*:*:*:*:*:*", ["fe80::1"], []),
    ("", [], ["1.2.3.4", "::1"]),
    ("192.168.1.1", ["192.168.1.1", "::ffff:192.168.1.1"], ["192.168.1.2", "192.168.1.10"]),
    ("192.168.*.*", ["192.168.0.0", "192.168.255.7"], ["192.169.0.1", "10.168.1.1", "::1"]),
    ("192.168.1.*", ["192.168.1.0", "192.168.1.255"], ["192.168.2.1"]),
    ("10.10.103.*", ["10.10.103.9"], ["10.10.104.9"]),
    ("192.168.1.1-10", ["192.168.1.1", "192.168.1.5", "192.168.1.10"],
     ["192.168.1.0", "192.168.1.11", "192.168.2.5"]),
    ("192.168.1-3.*", ["192.168.1.200", "192.168.3.0"], ["192.168.4.1", "192.168.0.1"]),
    ("192.168.1.{1,2}", ["192.168.1.1", "192.168.1.2"], ["192.168.1.3", "192.168.1.12"]),
    ("10.0.0.1,192.168.1.*", ["10.0.0.1", "192.168.1.77"], ["10.0.0.2", "192.168.2.1"]),
    ("10.0.0.1, 10.0.0.2", ["10.0.0.2"], ["10.0.0.3"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1", "[::1]"], ["::2", "127.0.0.1"]),
    ("1050:0000:0000:0000:0005:0600:300c:326b", ["1050::5:600:300c:326b"],
     ["1050::5:600:300c:326c"]),
    ("1050::5:600:300c:*", ["1050::5:600:300c:1", "1050:0:0:0:5:600:300c:ffff"],
     ["1050::5:600:300d:1", "10.0.0.1"]),
    ("1050::5:600:300c:1-ff", ["1050::5:600:300c:1", "1050::5:600:300c:ff"],
     ["1050::5:600:300c:100", "1050::5:600:300c:0"]),
    ("2::ac5:78:1-200:*", ["2::ac5:78:1:9", "2::ac5:78:200:ffff"],
     ["2::ac5:78:201:0", "2::ac5:79:1:0"]),
    ("fe80::{1,a}", ["fe80::1", "FE80::A"], ["fe80::2"]),
]


@pytest.mark.parametrize(("pattern", "yes", "no"), ADDRESS_TABLE)
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    strategy = RemoteAddressStrategy.parse(pattern)
    for host in yes:
        assert strategy.matches(host), (pattern, host)
    for host in no:
        assert not strategy.matches(host), (pattern, host)


def test_blank_pattern_matches_nothing() -> None:
    assert not RemoteAddressStrategy.parse(None).matches("1.2.3.4")


@pytest.mark.parametrize(("pattern", "said"), [
    ("192.168.1", "not an IPv4 or IPv6 address"),
    ("300.1.1.1", "not an IPv4 or IPv6 address"),
    ("localhost", "not an IPv4 or IPv6 address"),
    ("192.168.1.10-1", "must go up"),
    ("192.168.1.1-300", "must go up"),
    ("192.168.1.-5", "neither '*' nor a range"),
    ("192.168.1.5-", "neither '*' nor a range"),
    ("192.168.*", "4 octets"),
    ("*.168.1.1", "first octet"),
    ("192.*.1.1", "after a wildcard or a range must be '*'"),
    ("192.168.1-5.7", "after a wildcard or a range must be '*'"),
    ("192.168.1.{1,x}", "not an IPv4 or IPv6 address"),
    ("192.168.{1,2}", "4 octets"),
    ("192.168.1.{}", "empty"),
    ("192.168.1{1,2}", "whole last"),
    ("10.0.0.1,bogus", "'bogus' is not"),
    ("1050::*:1", "only be the last group"),
    ("1050::1-2:3", "only be the last group"),
    ("1050::1:fffff-1", "neither '*' nor a range"),
    ("1050::1:20-10", "must go up"),
    ("1050:1:2:3:4:5:6:7:8:*", "not an IPv4 or IPv6 address"),
    ("gggg::1", "not an IPv4 or IPv6 address"),
])
def test_bad_address_patterns(pattern: str, said: str) -> None:
    with pytest.raises(ValueError, match="address pattern") as info:
        RemoteAddressStrategy.parse(pattern)
    assert said in str(info.value)
    assert repr(pattern) in str(info.value)


# ---------------------------------------------------------------- the file

# distribution/conf/plain_acl.yml of RocketMQ 4.9
SAMPLE = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_parse_rocketmq_sample() -> None:
    config = parse_plain_acl(SAMPLE)
    assert [s.pattern for s in config.global_white] == ["10.10.103.*", "192.168.0.*"]
    assert set(config.accounts) == {"RocketMQ", "rocketmq2"}
    rmq = config.accounts["RocketMQ"]
    assert rmq.secret_key == "12345678"  # a YAML number read as its text
    assert not rmq.admin
    assert not rmq.white_remote_address.matches("1.2.3.4")
    assert rmq.default_topic_perm == Perm.DENY
    assert rmq.default_group_perm == Perm.SUB
    assert rmq.resource_perms == {
        "topicA": Perm.DENY, "topicB": Perm.PUB | Perm.SUB, "topicC": Perm.SUB,
        "%RETRY%groupA": Perm.DENY, "%RETRY%groupB": Perm.PUB | Perm.SUB,
        "%RETRY%groupC": Perm.SUB,
    }
    admin = config.accounts["rocketmq2"]
    assert admin.admin and admin.white_remote_address.matches("192.168.1.9")
    assert admin.default_topic_perm == Perm.DENY  # missing: RocketMQ's DENY


def test_secret_keeps_its_text() -> None:
    config = parse_plain_acl("accounts:\n  - {accessKey: AK000001, secretKey: 0123456}\n")
    assert config.accounts["AK000001"].secret_key == "0123456"  # not octal


def _account_yaml(**fields: str) -> str:
    base = {"accessKey": "AK000001", "secretKey": "SK000001"}
    base.update(fields)
    lines = "\n".join(f"    {k}: {v}" for k, v in base.items() if v != "<omit>")
    return f"accounts:\n  - \n{lines}\n".replace("  - \n    ", "  - ")


@pytest.mark.parametrize(("text", "said"), [
    (_account_yaml(secretKey="<omit>"), "account 'AK000001': secretKey is missing"),
    (_account_yaml(secretKey="12345"), "account 'AK000001': secretKey is missing or shorter"),
    (_account_yaml(accessKey="AK1"), "account 'AK1': accessKey is missing or not longer"),
    (_account_yaml(accessKey="<omit>"), "accounts[0]: accessKey is missing"),
    (_account_yaml(defaultTopicPerm="ALL"), "account 'AK000001': defaultTopicPerm: 'ALL' is not"),
    (_account_yaml(topicPerms="[topicA=READ]"), "topicPerms entry 'topicA=READ'"),
    (_account_yaml(groupPerms="[groupA]"), "groupPerms entry 'groupA' is not name=PERM"),
    (_account_yaml(topicPerms="[=SUB]"), "is not name=PERM"),
    (_account_yaml(topicPerms="topicA=SUB"), "topicPerms must be a list"),
    (_account_yaml(whiteRemoteAddress="192.168.1.300"),
     "account 'AK000001': whiteRemoteAddress: address pattern '192.168.1.300'"),
    (_account_yaml(admin="maybe"), "admin must be true or false"),
    (_account_yaml(topicPerm="[a=SUB]"), "unknown field 'topicPerm'"),
    (_account_yaml() + _account_yaml().replace("accounts:\n", ""),
     "account 'AK000001': accessKey is defined twice"),
    ("globalWhiteRemoteAddresses: [10.0.0.*, 10.0.*]\n",
     "globalWhiteRemoteAddresses[1]: address pattern '10.0.*'"),
    ("accounts: {accessKey: x}\n", "accounts must be a list"),
    ("accounts: [1]\n", "accounts[0] must be a map"),
    ("accounts:\n  - accessKey: [x\n", "not valid YAML"),
    ("", "no data"),
    ("- a\n- b\n", "must be a map"),
    ("acounts: []\n", "unknown field 'acounts'"),
])
def test_bad_files(text: str, said: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_plain_acl(text)
    assert said in str(info.value)


def test_fields_optional_and_perm_spellings() -> None:
    config = parse_plain_acl(_account_yaml(
        defaultGroupPerm="SUB|PUB", topicPerms="[' t1 = PUB ', 't2=SUB|PUB']", admin="yes"))
    account = config.accounts["AK000001"]
    assert account.admin
    assert account.default_topic_perm == Perm.DENY
    assert account.default_group_perm == Perm.PUB | Perm.SUB
    assert account.resource_perms == {"t1": Perm.PUB, "t2": Perm.PUB | Perm.SUB}
    assert config.global_white == ()


def test_check_permission_as_rocketmq() -> None:
    assert check_permission(Perm.PUB, Perm.PUB | Perm.SUB)
    assert not check_permission(Perm.PUB, Perm.SUB)
    assert not check_permission(Perm.SUB, Perm.DENY | Perm.SUB)
    assert check_permission(Perm.ANY, Perm.SUB)
    assert not check_permission(Perm.ANY, Perm.DENY)


# ---------------------------------------------------------------- decisions

ACL = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: pubOnly1
    secretKey: secret-pub
    defaultTopicPerm: PUB
    defaultGroupPerm: DENY
  - accessKey: subOnly1
    secretKey: secret-sub
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
  - accessKey: mixed001
    secretKey: secret-mixed
    whiteRemoteAddress: 192.168.1.1-10
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
    topicPerms:
      - Denied=DENY
      - OnlySub=SUB
    groupPerms:
      - BadGroup=DENY
  - accessKey: admin001
    secretKey: secret-admin
    admin: true
  - accessKey: admin002
    secretKey: secret-admin2
    admin: true
    defaultTopicPerm: SUB
    topicPerms:
      - Secret=DENY
"""

HOST = "172.16.0.9"


def _good(secret: str) -> bool:
    return True


def _bad(secret: str) -> bool:
    return False


def _signed_by(expected: str) -> Callable[[str], bool]:
    return lambda secret: secret == expected


@pytest.fixture
def acl() -> AclConfig:
    return parse_plain_acl(ACL)


def _send(topic: str, key: str = "pubOnly1", group: str = "PG") -> dict[str, object]:
    return {"topic": topic, "producerGroup": group, "AccessKey": key, "Signature": "s"}


def _pull(topic: str, group: str, key: str = "subOnly1") -> dict[str, object]:
    return {"topic": topic, "consumerGroup": group, "AccessKey": key, "Signature": "s"}


def test_global_white_address_allowed_without_signature(acl: AclConfig) -> None:
    d = acl.decide(RequestCode.UPDATE_AND_CREATE_TOPIC, {}, None, "10.10.103.7", _bad)
    assert d.allowed and d.response_code == ResponseCode.SUCCESS


def test_no_access_key_refused(acl: AclConfig) -> None:
    d = acl.decide(RequestCode.SEND_MESSAGE, {"topic": "T"}, None, HOST, _good)
    assert not d.allowed and d.response_code == ResponseCode.NO_PERMISSION
    assert d.remark == "No accessKey is configured"
    assert not acl.decide(RequestCode.SEND_MESSAGE, {"AccessKey": ""}, None, HOST, _good).allowed


def test_unknown_access_key_refused(acl: AclConfig) -> None:
    d = acl.decide(RequestCode.SEND_MESSAGE, _send("T", key="nobody99"), None, HOST, _good)
    assert not d.allowed
    # the answer does not tell an unknown key from a bad signature; the log does
    assert d.remark == SIGNATURE_REFUSED and "nobody99" not in d.remark
    assert d.detail == "No acl config for accessKey=nobody99"


def test_account_white_address_allowed_even_with_bad_signature(acl: AclConfig) -> None:
    fields = _send("Denied", key="mixed001")
    assert acl.decide(RequestCode.SEND_MESSAGE, fields, None, "192.168.1.5", _bad).allowed
    d = acl.decide(RequestCode.SEND_MESSAGE, fields, None, "192.168.1.11", _bad)
    assert not d.allowed and "signature" in d.remark


def test_bad_signature_refused(acl: AclConfig) -> None:
    d = acl.decide(RequestCode.SEND_MESSAGE, _send("T"), None, HOST, _signed_by("other"))
    assert not d.allowed
    assert d.remark == SIGNATURE_REFUSED
    assert d.detail == "Check signature failed for accessKey=pubOnly1"
    assert acl.decide(RequestCode.SEND_MESSAGE, _send("T"), None, HOST,
                      _signed_by("secret-pub")).allowed


def test_signature_checked_with_the_accounts_secret(acl: AclConfig) -> None:
    seen: list[str] = []

    def verify(secret: str) -> bool:
        seen.append(secret)
        return True

    acl.decide(RequestCode.SEND_MESSAGE, _send("T", key="mixed001"), None, HOST, verify)
    assert seen == ["secret-mixed"]


def test_pub_only_sends_but_does_not_pull(acl: AclConfig) -> None:
    cases: list[tuple[int, dict[str, object]]] = [
        (RequestCode.SEND_MESSAGE, _send("TopicA")),
        (RequestCode.SEND_MESSAGE_V2, {"b": "TopicA", "a": "PG", "AccessKey": "pubOnly1"}),
        (RequestCode.SEND_BATCH_MESSAGE, {"b": "TopicA", "a": "PG", "AccessKey": "pubOnly1"}),
        (RequestCode.SEND_BATCH_MESSAGE, _send("TopicA")),
    ]
    for code, fields in cases:
        assert acl.decide(code, fields, None, HOST, _good).allowed, code
    d = acl.decide(RequestCode.PULL_MESSAGE, _pull("TopicA", "CG", key="pubOnly1"), None,
                   HOST, _good)
    assert not d.allowed
    assert d.remark == ("No permission for topic=TopicA: SUB needed, account pubOnly1 has PUB "
                        "(defaultTopicPerm)")
    d = acl.decide(RequestCode.QUERY_MESSAGE, _pull("TopicA", "CG", key="pubOnly1"), None,
                   HOST, _good)
    assert not d.allowed


def test_sub_only_pulls_but_does_not_send(acl: AclConfig) -> None:
    assert acl.decide(RequestCode.PULL_MESSAGE, _pull("TopicA", "CG"), None, HOST, _good).allowed
    d = acl.decide(RequestCode.SEND_MESSAGE, _send("TopicA", key="subOnly1"), None, HOST, _good)
    assert not d.allowed
    assert d.remark == ("No permission for topic=TopicA: PUB needed, account subOnly1 has SUB "
                        "(defaultTopicPerm)")
    d = acl.decide(RequestCode.SEND_MESSAGE_V2, {"b": "TopicA", "AccessKey": "subOnly1"}, None,
                   HOST, _good)
    assert not d.allowed


def test_pull_needs_the_group_too(acl: AclConfig) -> None:
    d = acl.decide(RequestCode.PULL_MESSAGE, _pull("TopicA", "CG", key="pubOnly1"), None,
                   HOST, _good)
    assert not d.allowed  # topic first
    d = acl.decide(RequestCode.PULL_MESSAGE, _pull("TopicA", "BadGroup", key="mixed001"), None,
                   HOST, _good)
    assert not d.allowed
    assert d.remark == ("No permission for group=BadGroup: SUB needed, account mixed001 has "
                        "DENY (groupPerms)")


def test_deny_wins_over_default_and_pub_sub(acl: AclConfig) -> None:
    d = acl.decide(RequestCode.SEND_MESSAGE, _send("Denied", key="mixed001"), None, HOST, _good)
    assert not d.allowed
    assert d.remark == ("No permission for topic=Denied: PUB needed, account mixed001 has DENY "
                        "(topicPerms)")
    assert acl.decide(RequestCode.SEND_MESSAGE, _send("Other", key="mixed001"), None, HOST,
                      _good).allowed
    d = acl.decide(RequestCode.SEND_MESSAGE, _send("OnlySub", key="mixed001"), None, HOST, _good)
    assert not d.allowed and "has SUB (topicPerms)" in d.remark
    # DENY as a default wins over nothing else
    d = acl.decide(RequestCode.CONSUMER_SEND_MSG_BACK,
                   {"group": "G1", "AccessKey": "pubOnly1"}, None, HOST, _good)
    assert not d.allowed and "group=G1: SUB needed" in d.remark and "defaultGroupPerm" in d.remark


def test_retry_topic_maps_to_its_group(acl: AclConfig) -> None:
    # a consumer sending back to %RETRY%<group> needs SUB on the group, not PUB on a topic
    ok = acl.decide(RequestCode.SEND_MESSAGE, _send("%RETRY%CG", key="subOnly1"), None,
                    HOST, _good)
    assert ok.allowed
    d = acl.decide(RequestCode.SEND_MESSAGE, _send("%RETRY%BadGroup", key="mixed001"), None,
                   HOST, _good)
    assert not d.allowed
    assert d.remark.startswith("No permission for group=BadGroup: SUB needed")
    d = acl.decide(RequestCode.PULL_MESSAGE, _pull("%RETRY%BadGroup", "Fine", key="mixed001"),
                   None, HOST, _good)
    assert not d.allowed and "group=BadGroup" in d.remark
    assert required_resources(RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%G", "a": "P"}, None)[0] \
        .perm == Perm.SUB


def _heartbeat(group: str, *topics: str) -> HeartbeatData:
    return HeartbeatData("client-1", ["PG"], [ConsumerData(
        group, subscriptions=[SubscriptionData(t) for t in topics])])


def test_heartbeat_needs_its_topics_and_group(acl: AclConfig) -> None:
    fields = {"AccessKey": "mixed001"}
    assert acl.decide(RequestCode.HEART_BEAT, fields, _heartbeat("CG", "T1", "T2"), HOST,
                      _good).allowed
    d = acl.decide(RequestCode.HEART_BEAT, fields, _heartbeat("CG", "T1", "Denied"), HOST, _good)
    assert not d.allowed and "topic=Denied: SUB needed" in d.remark
    d = acl.decide(RequestCode.HEART_BEAT, fields, _heartbeat("BadGroup", "T1"), HOST, _good)
    assert not d.allowed and "group=BadGroup: SUB needed" in d.remark
    # a producer-only heartbeat names no resource
    assert acl.decide(RequestCode.HEART_BEAT, {"AccessKey": "pubOnly1"},
                      HeartbeatData("c", ["PG"], []), HOST, _good).allowed
    d = acl.decide(RequestCode.HEART_BEAT, {"AccessKey": "pubOnly1"}, _heartbeat("CG", "T"),
                   HOST, _good)
    assert not d.allowed


@pytest.mark.parametrize("code", [
    RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
    RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET,
])
def test_group_requests_need_the_group(acl: AclConfig, code: int) -> None:
    good = {"consumerGroup": "CG", "topic": "T", "AccessKey": "mixed001"}
    assert acl.decide(code, good, None, HOST, _good).allowed
    d = acl.decide(code, {**good, "consumerGroup": "BadGroup"}, None, HOST, _good)
    assert not d.allowed and "group=BadGroup: SUB needed" in d.remark


def test_offset_requests_need_the_topic(acl: AclConfig) -> None:
    for code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET):
        d = acl.decide(code, {"consumerGroup": "CG", "topic": "Denied", "AccessKey": "mixed001"},
                       None, HOST, _good)
        assert not d.allowed and "topic=Denied: SUB needed" in d.remark


@pytest.mark.parametrize("code", sorted(ADMIN_CODES))
def test_admin_only_codes_need_admin(acl: AclConfig, code: int) -> None:
    d = acl.decide(code, {"AccessKey": "mixed001", "topic": "T"}, None, HOST, _good)
    assert not d.allowed
    assert d.remark.startswith(f"Need admin permission for request code={code}")
    assert d.remark.endswith("but accessKey=mixed001 is not")
    assert acl.decide(code, {"AccessKey": "admin001", "topic": "T"}, None, HOST, _good).allowed


def test_admin_codes_include_rocketmqs_and_the_issues() -> None:
    for code in (RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG,
                 RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                 RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, INVOKE_BROKER_TO_RESET_OFFSET,
                 RequestCode.WIPE_WRITE_PERM_OF_BROKER):
        assert code in ADMIN_CODES
    for code in (RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE, RequestCode.HEART_BEAT,
                 RequestCode.GET_ROUTEINFO_BY_TOPIC):
        assert code not in ADMIN_CODES


def test_admin_without_resource_perms_reaches_everything(acl: AclConfig) -> None:
    assert acl.decide(RequestCode.PULL_MESSAGE, _pull("Any", "Any", key="admin001"), None, HOST,
                      _good).allowed
    # with resource perms an admin is checked like anyone (RocketMQ's checkPerm)
    d = acl.decide(RequestCode.PULL_MESSAGE, _pull("Secret", "G", key="admin002"), None, HOST,
                   _good)
    assert not d.allowed and "topic=Secret" in d.remark
    d = acl.decide(RequestCode.SEND_MESSAGE, _send("T", key="admin002"), None, HOST, _good)
    assert not d.allowed and "PUB needed, account admin002 has SUB" in d.remark
    assert acl.decide(RequestCode.DELETE_TOPIC_IN_BROKER, {"AccessKey": "admin002"}, None, HOST,
                      _good).allowed


def test_trace_topic_send_needs_only_a_signature(acl: AclConfig) -> None:
    d = acl.decide(RequestCode.SEND_MESSAGE, _send("RMQ_SYS_TRACE_TOPIC", key="subOnly1"), None,
                   HOST, _good)
    assert d.allowed


def test_codes_without_resources_need_only_identity(acl: AclConfig) -> None:
    assert acl.decide(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"AccessKey": "subOnly1",
                      "topic": "Denied"}, None, HOST, _good).allowed
    assert required_resources(RequestCode.GET_BROKER_CONFIG, {"topic": "x"}, None) == []


def test_remark_bounds_hostile_names(acl: AclConfig) -> None:
    d = acl.decide(RequestCode.SEND_MESSAGE, _send("x" * 5000, key="subOnly1"), None, HOST, _good)
    assert not d.allowed and len(d.remark) < 200
    d = acl.decide(RequestCode.SEND_MESSAGE, _send("a\nb", key="subOnly1"), None, HOST, _good)
    assert "\n" not in d.remark


def test_header_values_of_other_types(acl: AclConfig) -> None:
    # C++ clients send some fields as numbers: names are read as text
    fields = {"topic": 12345, "consumerGroup": "CG", "AccessKey": "subOnly1"}
    assert acl.decide(RequestCode.PULL_MESSAGE, fields, None, HOST, _good).allowed
    needs = required_resources(RequestCode.PULL_MESSAGE, fields, None)
    assert [(n.resource, n.perm) for n in needs] == [("12345", Perm.SUB), ("%RETRY%CG", Perm.SUB)]


def test_ipv6_peer(acl: AclConfig) -> None:
    config = parse_plain_acl("globalWhiteRemoteAddresses: ['fe80::{1,2}']\n")
    assert config.decide(RequestCode.SEND_MESSAGE, {}, None, "[fe80::2]", _bad).allowed
    assert not config.decide(RequestCode.SEND_MESSAGE, {}, None, "fe80::3", _bad).allowed


# ---------------------------------------------------------------- reloading


def test_watcher_keeps_last_good_config() -> None:
    watcher = AclWatcher()
    assert watcher.needs_reload(1.0)
    assert watcher.load(SAMPLE, 1.0) is None
    first = watcher.config
    assert first is not None and "RocketMQ" in first.accounts
    assert not watcher.needs_reload(1.0)

    assert watcher.needs_reload(2.0)
    error = watcher.load(SAMPLE.replace("topicC=SUB", "topicC=READ"), 2.0)
    assert error is not None and "keeping the last good accounts" in error
    assert "account 'RocketMQ'" in error and "topicC=READ" in error
    assert watcher.config is first and watcher.error == error
    assert not watcher.needs_reload(2.0)  # logged once per change

    assert watcher.load("", 3.0) is not None and watcher.config is first
    assert watcher.load(SAMPLE.replace("RocketMQ", "RocketMQ9"), 4.0) is None
    assert watcher.config is not None and "RocketMQ9" in watcher.config.accounts
    assert watcher.error is None


def test_watcher_without_a_good_file_yet() -> None:
    watcher = AclWatcher()
    error = watcher.load("accounts: [", 1.0)
    assert error is not None and "no accounts loaded yet" in error
    assert watcher.config is None


def test_a_secret_key_of_six_characters_is_enough() -> None:
    config = parse_plain_acl("accounts:\n  - {accessKey: AK000001, secretKey: '123456'}\n")
    assert config.accounts["AK000001"].secret_key == "123456"


# ---------------------------------------------------------------- remembered decisions

_CACHE_REQUESTS: list[tuple[int, dict[str, object]]] = [
    (RequestCode.SEND_MESSAGE, {"topic": "TopicA"}),
    (RequestCode.SEND_MESSAGE, {"topic": "Denied"}),
    (RequestCode.SEND_MESSAGE_V2, {"b": "OnlySub"}),
    (RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%BadGroup"}),
    (RequestCode.SEND_MESSAGE_V2, {"b": "RMQ_SYS_TRACE_TOPIC"}),
    (RequestCode.SEND_BATCH_MESSAGE, {"b": "Secret"}),
    (RequestCode.PULL_MESSAGE, {"topic": "OnlySub", "consumerGroup": "CG"}),
    (RequestCode.PULL_MESSAGE, {"topic": "OnlySub", "consumerGroup": "BadGroup"}),
    (RequestCode.PULL_MESSAGE, {"topic": "Secret"}),
    (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "CG", "topic": "Denied"}),
    (RequestCode.GET_MAX_OFFSET, {"topic": "Secret"}),
    (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "X"}),
    (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Denied"}),
    (RequestCode.SEND_MESSAGE_V2, {"b": True}),  # True == 1 as keys: the names differ
    (RequestCode.SEND_MESSAGE_V2, {"b": 1}),
    (RequestCode.SEND_MESSAGE_V2, {"b": "1"}),
    (RequestCode.SEND_MESSAGE_V2, {}),
]
_CACHE_CASES = [(code, {**fields, "AccessKey": key})
                for key in ("pubOnly1", "subOnly1", "mixed001", "admin001", "admin002")
                for code, fields in _CACHE_REQUESTS]


def test_remembered_decisions_are_the_computed_ones() -> None:
    warm = parse_plain_acl(ACL)
    for _ in range(2):  # the second pass answers from the cache
        for code, fields in _CACHE_CASES:
            got = warm.decide(code, fields, None, HOST, _good)
            assert got == parse_plain_acl(ACL).decide(code, fields, None, HOST, _good), \
                (code, fields)
    assert 0 < len(warm._decisions) <= len(_CACHE_CASES)
    # the names as RocketMQ reads them, so True and 1 (equal as Python keys) stay apart
    assert required_resources(RequestCode.SEND_MESSAGE_V2, {"b": True}, None)[0].resource \
        == "true"


def test_remembered_decision_still_needs_the_signature(acl: AclConfig) -> None:
    fields = _send("TopicA")
    assert acl.decide(RequestCode.SEND_MESSAGE, fields, None, HOST, _good).allowed
    calls: list[str] = []

    def wrong(secret: str) -> bool:
        calls.append(secret)
        return False

    d = acl.decide(RequestCode.SEND_MESSAGE, fields, None, HOST, wrong)
    assert not d.allowed and d.remark == SIGNATURE_REFUSED and calls == ["secret-pub"]


def test_reloaded_accounts_decide_afresh() -> None:
    watcher = AclWatcher()
    assert watcher.load(ACL, 1.0) is None
    assert watcher.config is not None
    fields = _send("TopicA")
    assert watcher.config.decide(RequestCode.SEND_MESSAGE, fields, None, HOST, _good).allowed
    denied = ACL.replace("defaultTopicPerm: PUB\n", "defaultTopicPerm: DENY\n", 1)
    assert denied != ACL
    assert watcher.load(denied, 2.0) is None
    d = watcher.config.decide(RequestCode.SEND_MESSAGE, fields, None, HOST, _good)
    assert not d.allowed and "topic=TopicA: PUB needed" in d.remark


def test_heartbeats_are_decided_each_time(acl: AclConfig) -> None:
    fields = {"AccessKey": "mixed001"}
    assert acl.decide(RequestCode.HEART_BEAT, fields, _heartbeat("CG", "T1"), HOST,
                      _good).allowed
    assert not acl.decide(RequestCode.HEART_BEAT, fields, _heartbeat("CG", "Denied"), HOST,
                          _good).allowed
    assert not acl._decisions  # the body names the resources: nothing remembered


def test_remembered_decisions_are_bounded(acl: AclConfig, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    from acl import plain

    monkeypatch.setattr(plain, "DECISION_CACHE_ENTRIES", 8)
    for i in range(20):
        assert acl.decide(RequestCode.SEND_MESSAGE, _send(f"T{i}"), None, HOST, _good).allowed
        assert 0 < len(acl._decisions) <= 8
    # a name longer than any valid one is decided, never remembered
    acl._decisions.clear()
    long = "T" * (plain.CACHED_NAME_MAX + 1)
    assert acl.decide(RequestCode.SEND_MESSAGE, _send(long), None, HOST, _good).allowed
    assert not acl._decisions
    assert acl.decide(RequestCode.SEND_MESSAGE, _send(long[:-1]), None, HOST, _good).allowed
    assert len(acl._decisions) == 1
