"""Controller mode's codes, headers and bodies (protocol/controller.py)."""

from __future__ import annotations

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.controller import (
    MAX_NAMES_PER_REQUEST,
    MAX_REPLICAS,
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    BrokerMemberGroup,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    EpochEntry,
    EpochEntryCache,
    GetMetaDataResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
    broker_names_body,
    check_code_address,
    parse_id_list,
)
from protocol.errors import RemoteProtocolError


def test_codes_are_rocketmq_5s() -> None:
    assert RequestCode.BROKER_HEARTBEAT == 904
    assert [RequestCode(c).name for c in range(1001, 1014)] == [
        "CONTROLLER_ALTER_SYNC_STATE_SET", "CONTROLLER_ELECT_MASTER",
        "CONTROLLER_REGISTER_BROKER", "CONTROLLER_GET_REPLICA_INFO",
        "CONTROLLER_GET_METADATA_INFO", "CONTROLLER_GET_SYNC_STATE_DATA",
        "GET_BROKER_EPOCH_CACHE", "NOTIFY_BROKER_ROLE_CHANGED", "UPDATE_CONTROLLER_CONFIG",
        "GET_CONTROLLER_CONFIG", "CLEAN_BROKER_DATA", "CONTROLLER_GET_NEXT_BROKER_ID",
        "CONTROLLER_APPLY_BROKER_ID"]
    assert ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH == 2000
    assert ResponseCode.CONTROLLER_NOT_LEADER == 2007
    assert ResponseCode.CONTROLLER_MASTER_STILL_EXIST == 2011
    assert ResponseCode.CONTROLLER_BROKER_ID_INVALID == 2014
    assert ResponseCode.CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS == 2016


def test_headers_travel_under_rocketmqs_names() -> None:
    h = ElectMasterRequestHeader(broker_name="b", cluster_name="c", broker_id=2,
                                 designate_elect=True)
    assert h.to_fields() == {"brokerName": "b", "clusterName": "c", "brokerId": 2,
                             "designateElect": True}
    # RocketMQ's format sends every value as text
    back = ElectMasterRequestHeader.from_fields(
        {"brokerName": "b", "clusterName": "c", "brokerId": "2", "designateElect": "true"})
    assert back == h
    meta = GetMetaDataResponseHeader(group="g", is_leader=True)
    assert meta.to_fields()["isLeader"] is True
    clean = CleanControllerBrokerDataRequestHeader(broker_name="b",
                                                   broker_controller_ids_to_clean="1;2",
                                                   is_clean_living_broker=True)
    assert set(clean.to_fields()) == {"brokerName", "clusterName", "brokerControllerIdsToClean",
                                      "isCleanLivingBroker"}
    n = NotifyBrokerRoleChangedRequestHeader(master_epoch=3, sync_state_set_epoch=4,
                                             master_address="127.0.0.1:1", master_broker_id=1)
    assert NotifyBrokerRoleChangedRequestHeader.from_fields(n.to_fields()) == n


@pytest.mark.parametrize("fields, what", [
    ({"brokerName": "b", "masterBrokerId": -1, "masterEpoch": 1}, "masterBrokerId"),
    ({"brokerName": "b", "masterBrokerId": 1, "masterEpoch": 2**31}, "masterEpoch"),
    ({"brokerName": "b b", "masterBrokerId": 1, "masterEpoch": 1}, "brokerName"),
    ({"masterBrokerId": 1, "masterEpoch": 1}, "brokerName"),
])
def test_alter_header_refuses_bad_fields(fields: dict[str, object], what: str) -> None:
    with pytest.raises(RemoteProtocolError, match=what):
        AlterSyncStateSetRequestHeader.from_fields(fields)


def test_heartbeat_and_apply_headers_check_addresses_and_lengths() -> None:
    with pytest.raises(RemoteProtocolError, match="brokerAddr"):
        BrokerHeartbeatRequestHeader.from_fields(
            {"clusterName": "c", "brokerAddr": "nohost", "brokerName": "b"})
    ok = BrokerHeartbeatRequestHeader.from_fields(
        {"clusterName": "c", "brokerAddr": "127.0.0.1:10911", "brokerName": "b",
         "brokerId": "1", "epoch": "2", "maxOffset": "100"})
    assert (ok.broker_id, ok.epoch, ok.max_offset, ok.election_priority) == (1, 2, 100, None)
    with pytest.raises(RemoteProtocolError, match="registerCheckCode"):
        ApplyBrokerIdRequestHeader.from_fields(
            {"clusterName": "c", "brokerName": "b", "appliedBrokerId": 1,
             "registerCheckCode": "x" * 513})
    assert check_code_address("127.0.0.1:1;1700000000000") == "127.0.0.1:1"


def test_id_lists() -> None:
    assert parse_id_list(None) == []
    assert parse_id_list(" ") == []
    assert parse_id_list("1;2; 3;") == [1, 2, 3]
    for bad in ("1;x", "-1", "1" * 20):
        with pytest.raises(RemoteProtocolError):
            parse_id_list(bad)
    with pytest.raises(RemoteProtocolError, match="more than"):
        parse_id_list(";".join(str(i) for i in range(MAX_REPLICAS + 1)))


def test_sync_state_set_body() -> None:
    s = SyncStateSet(frozenset({2, 1}), 5)
    assert s.to_dict() == {"syncStateSet": [1, 2], "syncStateSetEpoch": 5}
    assert SyncStateSet.from_dict(s.to_dict()) == s
    for bad in ([], {"syncStateSet": [1]}, {"syncStateSet": [-1], "syncStateSetEpoch": 1},
                {"syncStateSet": "1", "syncStateSetEpoch": 1},
                {"syncStateSet": [True], "syncStateSetEpoch": 1},
                {"syncStateSet": list(range(MAX_REPLICAS + 1)), "syncStateSetEpoch": 1},
                {"syncStateSet": [1], "syncStateSetEpoch": 2**31}):
        with pytest.raises(RemoteProtocolError):
            SyncStateSet.from_dict(bad)


def test_replica_bodies_round_trip() -> None:
    group = BrokerMemberGroup("c", "b", {1: "127.0.0.1:1", 2: "127.0.0.1:2"})
    body = ElectMasterResponseBody(group, frozenset({1}))
    assert body.to_dict()["brokerMemberGroup"]["brokerAddrs"] == {"1": "127.0.0.1:1",
                                                                  "2": "127.0.0.1:2"}
    assert ElectMasterResponseBody.from_dict(body.to_dict()) == body
    r1 = ReplicaIdentity("b", 1, "127.0.0.1:1", True)
    r2 = ReplicaIdentity("b", 2, "127.0.0.1:2", False)
    info = BrokerReplicasInfo({"b": ReplicasInfo(1, "127.0.0.1:1", 3, 4, (r1,), (r2,))})
    assert BrokerReplicasInfo.from_dict(info.to_dict()) == info
    none = ReplicasInfo(None, None, 0, 0, (), ())
    assert "masterBrokerId" not in none.to_dict()
    with pytest.raises(RemoteProtocolError):
        BrokerMemberGroup.from_dict({"brokerAddrs": {"x": "a:1"}})
    with pytest.raises(RemoteProtocolError):
        ReplicaIdentity.from_dict({"brokerId": 1, "alive": "yes"})
    cache = EpochEntryCache("c", "b", 1, (EpochEntry(1, 0, 100), EpochEntry(2, 100, 2**63 - 1)),
                            150)
    assert EpochEntryCache.from_dict(cache.to_dict()) == cache


def test_broker_names_body() -> None:
    assert broker_names_body(["a", "b", "a"]) == ["a", "b"]
    for bad in ("a", [1], ["a b"], ["x"] * (MAX_NAMES_PER_REQUEST + 1)):
        with pytest.raises(RemoteProtocolError):
            broker_names_body(bad)
