"""controller/replicas.py: the controller's pure state machine."""

from __future__ import annotations

import json

import pytest

from controller.replicas import (
    AllAlive,
    BrokerSet,
    ControllerState,
    Limits,
    LiveInfo,
    Replica,
    StateFormatError,
    Status,
    alter_sync_state_set,
    apply_broker_id,
    choose_master,
    clean_broker_data,
    decode_state,
    elect_master,
    encode_state,
    next_broker_id,
    register_broker,
    replica_info,
)

A1, A2, A3 = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"


class Live:
    """Who is alive, with what heart-beat data: (name, id) -> LiveInfo."""

    def __init__(self, infos: dict[tuple[str, int], LiveInfo] | None = None) -> None:
        self.infos = infos or {}

    def live_info(self, broker_name: str, broker_id: int) -> LiveInfo | None:
        return self.infos.get((broker_name, broker_id))

    def up(self, broker_id: int, epoch: int = 0, offset: int = 0, priority: int = 10,
           name: str = "b") -> Live:
        self.infos[(name, broker_id)] = LiveInfo(epoch, offset, priority)
        return self

    def down(self, broker_id: int, name: str = "b") -> Live:
        self.infos.pop((name, broker_id), None)
        return self


def three() -> ControllerState:
    """Broker name b of cluster c with replicas 1, 2, 3."""
    state = ControllerState()
    for i, addr in ((1, A1), (2, A2), (3, A3)):
        assert next_broker_id(state, "b") == i
        r = apply_broker_id(state, "c", "b", i, f"{addr};1000")
        assert r.ok and r.changed, r.remark
        state = r.state
    return state


def elected(state: ControllerState, live: Live, first: int = 1,
            members: frozenset[int] = frozenset({1, 2, 3})) -> ControllerState:
    """``first`` master; SyncStateSet ``members``."""
    r = elect_master(state, "b", first, False, live)
    assert r.ok and r.value is not None and r.value.master_id == first
    state = r.state
    if members != {first}:
        bs = state.broker_sets["b"]
        r2 = alter_sync_state_set(state, "b", first, bs.master_epoch, members,
                                  bs.sync_state_set_epoch, live)
        assert r2.ok, r2.remark
        state = r2.state
    return state


# ---- ids -------------------------------------------------------------------------------


def test_apply_broker_id_rules() -> None:
    state = ControllerState()
    assert next_broker_id(state, "b") == 1
    r = apply_broker_id(state, "c", "b", 2, f"{A1};1")
    assert r.status is Status.BROKER_ID_INVALID and r.state is state
    r = apply_broker_id(state, "c", "b", 0, f"{A1};1")
    assert r.status is Status.BROKER_ID_INVALID
    state = apply_broker_id(state, "c", "b", 1, f"{A1};1").state
    # the same broker again (a restart): nothing changes
    again = apply_broker_id(state, "c", "b", 1, f"{A1};1")
    assert again.ok and not again.changed and again.state is state
    # another broker wanting id 1
    taken = apply_broker_id(state, "c", "b", 1, f"{A2};2")
    assert taken.status is Status.BROKER_ID_INVALID and "held by" in (taken.remark or "")
    # another cluster claiming the name
    other = apply_broker_id(state, "d", "b", 2, f"{A2};2")
    assert other.status is Status.INVALID_REQUEST and "cluster c" in (other.remark or "")
    assert next_broker_id(state, "b") == 2


@pytest.mark.parametrize("cluster, name, code", [
    ("c", "b b", f"{A1};1"), ("c c", "b", f"{A1};1"), ("c", "b", "nohost;1"), ("c", "b", ""),
])
def test_apply_broker_id_refuses_bad_names(cluster: str, name: str, code: str) -> None:
    r = apply_broker_id(ControllerState(), cluster, name, 1, code)
    assert r.status is Status.INVALID_REQUEST and not r.changed


def test_counts_are_bounded() -> None:
    limits = Limits(max_broker_names=2, max_replicas=2)
    state = ControllerState()
    for name in ("a", "b"):
        state = apply_broker_id(state, "c", name, 1, f"{A1};1", limits).state
    r = apply_broker_id(state, "c", "z", 1, f"{A1};1", limits)
    assert r.status is Status.INVALID_REQUEST and "controllerMaxBrokerNames" in (r.remark or "")
    state = apply_broker_id(state, "c", "a", 2, f"{A2};1", limits).state
    r = apply_broker_id(state, "c", "a", 3, f"{A3};1", limits)
    assert r.status is Status.INVALID_REQUEST and "replicas" in (r.remark or "")


# ---- registration -----------------------------------------------------------------------


def test_register_needs_an_applied_id_and_updates_the_address() -> None:
    live = Live().up(1).up(2)
    r = register_broker(ControllerState(), "c", "b", 1, A1, live)
    assert r.status is Status.BROKER_NEED_TO_BE_REGISTERED
    state = three()
    r = register_broker(state, "c", "b", 9, A1, live)
    assert r.status is Status.BROKER_NEED_TO_BE_REGISTERED
    r = register_broker(state, "c", "b", 1, A1, live)
    assert r.ok and not r.changed and r.value is not None and r.value.master_id is None
    moved = register_broker(state, "c", "b", 2, "127.0.0.1:20000", live)
    assert moved.ok and moved.changed
    assert moved.state.broker_sets["b"].replicas[2].address == "127.0.0.1:20000"
    assert register_broker(state, "x", "b", 1, A1, live).status is Status.INVALID_REQUEST


def test_register_tells_the_master_only_while_it_is_alive() -> None:
    live = Live().up(1).up(2)
    state = elected(three(), live, members=frozenset({1, 2}))
    view = register_broker(state, "c", "b", 2, A2, live).value
    assert view is not None and (view.master_id, view.master_address) == (1, A1)
    assert view.sync_state_set == {1, 2}
    live.down(1)
    view = register_broker(state, "c", "b", 2, A2, live).value
    assert view is not None and view.master_id is None and view.master_epoch == 1


def test_replica_info() -> None:
    assert replica_info(ControllerState(), "b").status is Status.BROKER_METADATA_NOT_EXIST
    state = elected(three(), Live().up(1), members=frozenset({1}))
    view = replica_info(state, "b").value
    assert view is not None and view.master_id == 1 and view.addresses == {1: A1, 2: A2, 3: A3}


# ---- the SyncStateSet --------------------------------------------------------------------


def test_first_election_makes_the_asker_master() -> None:
    live = Live().up(2)
    r = elect_master(three(), "b", 2, False, live)
    assert r.ok and r.notify == ("b",)
    bs = r.state.broker_sets["b"]
    assert (bs.master_id, bs.master_epoch, bs.sync_state_set, bs.sync_state_set_epoch) == (
        2, 1, {2}, 1)


def test_alter_sync_state_set_expands_and_shrinks() -> None:
    live = Live().up(1).up(2).up(3)
    state = elected(three(), live, members=frozenset({1}))
    r = alter_sync_state_set(state, "b", 1, 1, {1, 2, 3}, 1, live)
    assert r.ok and r.changed and not r.notify
    bs = r.state.broker_sets["b"]
    assert bs.sync_state_set == {1, 2, 3} and bs.sync_state_set_epoch == 2
    live.down(3)
    r = alter_sync_state_set(r.state, "b", 1, 1, {1, 2}, 2, live)  # a dead member may leave
    assert r.ok and r.state.broker_sets["b"].sync_state_set_epoch == 3


@pytest.mark.parametrize("name, master, m_epoch, members, s_epoch, status", [
    ("zz", 1, 1, {1, 2}, 1, Status.ALTER_SYNC_STATE_SET_FAILED),  # unknown broker name
    ("b", 2, 1, {1, 2}, 1, Status.INVALID_MASTER),  # not the master asking
    ("b", 1, 0, {1, 2}, 1, Status.FENCED_MASTER_EPOCH),  # a stale master epoch
    ("b", 1, 2, {1, 2}, 1, Status.FENCED_MASTER_EPOCH),  # one from the future
    ("b", 1, 1, {1, 2}, 0, Status.FENCED_SYNC_STATE_SET_EPOCH),  # a stale set epoch
    ("b", 1, 1, {1}, 1, Status.ALTER_SYNC_STATE_SET_FAILED),  # no change
    ("b", 1, 1, {1, 9}, 1, Status.INVALID_REPLICAS),  # not a replica
    ("b", 1, 1, {1, 3}, 1, Status.BROKER_NOT_ALIVE),  # 3 is down
    ("b", 1, 1, {2}, 1, Status.ALTER_SYNC_STATE_SET_FAILED),  # the master left out
])
def test_alter_sync_state_set_refusals(name: str, master: int, m_epoch: int,
                                       members: set[int], s_epoch: int,
                                       status: Status) -> None:
    live = Live().up(1).up(2)
    state = elected(three(), live, members=frozenset({1}))
    r = alter_sync_state_set(state, name, master, m_epoch, members, s_epoch, live)
    assert r.status is status, r.remark
    assert r.state is state and not r.changed and r.remark


# ---- elections ---------------------------------------------------------------------------


def test_controller_elects_the_in_sync_replica_with_the_highest_epoch_then_offset() -> None:
    live = Live().up(1).up(2).up(3)
    state = elected(three(), live)
    live.down(1)
    live.up(2, epoch=1, offset=500).up(3, epoch=1, offset=900)
    r = elect_master(state, "b", None, False, live)
    assert r.ok and r.value is not None and r.value.master_id == 3
    bs = r.state.broker_sets["b"]
    assert (bs.master_epoch, bs.sync_state_set, bs.sync_state_set_epoch) == (2, {3}, 3)
    assert r.notify == ("b",)
    # a higher epoch wins over a higher offset
    live.up(2, epoch=2, offset=10)
    assert elect_master(state, "b", None, False, live).value.master_id == 2  # type: ignore[union-attr]


def test_priority_then_id_break_ties() -> None:
    live = Live().up(1).up(2, priority=5).up(3, priority=1)
    state = elected(three(), live)
    live.down(1)
    assert elect_master(state, "b", None, False, live).value.master_id == 3  # type: ignore[union-attr]
    live.up(2, priority=1)
    assert elect_master(state, "b", None, False, live).value.master_id == 2  # type: ignore[union-attr]


def test_alive_master_is_kept() -> None:
    live = Live().up(1).up(2)
    state = elected(three(), live, members=frozenset({1, 2}))
    for asker in (None, 2):
        r = elect_master(state, "b", asker, False, live)
        assert r.status is Status.MASTER_STILL_EXIST and r.state is state
        assert r.value is not None and r.value.master_id == 1


def test_out_of_sync_replicas_are_not_elected_unless_unclean() -> None:
    live = Live().up(1).up(2).up(3)
    state = elected(three(), live, members=frozenset({1, 2}))
    live.down(1).down(2)
    r = elect_master(state, "b", None, False, live)
    assert r.status is Status.MASTER_NOT_AVAILABLE and r.changed and r.notify == ("b",)
    bs = r.state.broker_sets["b"]
    assert bs.master_id is None and bs.master_epoch == 2 and bs.sync_state_set == {1, 2}
    # a replica asking later: still nobody in sync alive
    r2 = elect_master(r.state, "b", 3, False, live)
    assert r2.status is Status.ELECT_MASTER_FAILED and not r2.changed
    # unclean: 3 may lead
    r3 = elect_master(r.state, "b", 3, False, live, unclean=True)
    assert r3.ok and r3.value is not None and r3.value.master_id == 3
    assert r3.state.broker_sets["b"].master_epoch == 3
    # an in-sync replica coming back is elected when it asks
    live.up(2)
    r4 = elect_master(r.state, "b", 3, False, live)
    assert r4.ok and r4.value is not None and r4.value.master_id == 2


def test_no_master_and_nobody_to_elect_changes_nothing() -> None:
    live = Live().up(1)
    state = elected(three(), live, members=frozenset({1}))
    live.down(1)
    dropped = elect_master(state, "b", None, False, live).state
    again = elect_master(dropped, "b", None, False, live)
    assert again.status is Status.MASTER_NOT_AVAILABLE and not again.changed


def test_admin_designates_a_master() -> None:
    live = Live().up(1).up(2).up(3)
    state = elected(three(), live, members=frozenset({1, 2}))
    r = elect_master(state, "b", 2, True, live)
    assert r.ok and r.value is not None and r.value.master_id == 2
    # out of the SyncStateSet: refused (unless unclean)
    r = elect_master(state, "b", 3, True, live)
    assert r.status is Status.ELECT_MASTER_FAILED and r.state is state
    assert elect_master(state, "b", 3, True, live, unclean=True).value.master_id == 3  # type: ignore[union-attr]
    # the current master designated: nothing to do
    assert elect_master(state, "b", 1, True, live).status is Status.MASTER_STILL_EXIST
    # dead, or unknown
    live.down(2)
    assert elect_master(state, "b", 2, True, live).status is Status.ELECT_MASTER_FAILED
    assert elect_master(state, "b", 7, True, live).status is Status.BROKER_NEED_TO_BE_REGISTERED
    assert elect_master(state, "zz", 1, True, live).status is Status.BROKER_NEED_TO_BE_REGISTERED


def test_never_elected_controller_trigger_takes_the_best_alive() -> None:
    live = Live().up(2, offset=5).up(3, offset=9)
    r = elect_master(three(), "b", None, False, live)
    assert r.ok and r.value is not None and r.value.master_id == 3
    assert elect_master(three(), "b", None, False, Live()).status is Status.MASTER_NOT_AVAILABLE


def test_choose_master_directly() -> None:
    bs = BrokerSet("c", "b", {1: Replica(1, A1), 2: Replica(2, A2)}, 1, 1, frozenset({1, 2}), 1)
    assert choose_master(bs, AllAlive(), False) == 1
    assert choose_master(bs, AllAlive(), False, preferred=2) == 2
    assert choose_master(bs, Live(), False) is None


# ---- cleaning ----------------------------------------------------------------------------


def test_clean_broker_data() -> None:
    live = Live().up(1).up(2)
    state = elected(three(), live, members=frozenset({1, 2}))
    assert clean_broker_data(state, "c", "zz", [], False, live).status is \
        Status.INVALID_CLEAN_BROKER_METADATA
    refused = clean_broker_data(state, "c", "b", [2], False, live)
    assert refused.status is Status.INVALID_CLEAN_BROKER_METADATA and "alive" in (refused.remark or "")
    r = clean_broker_data(state, "c", "b", [3], False, live)  # 3 is dead
    assert r.ok and set(r.state.broker_sets["b"].replicas) == {1, 2}
    r = clean_broker_data(state, "c", "b", [1], True, live)  # the living master
    bs = r.state.broker_sets["b"]
    assert bs.master_id is None and bs.master_epoch == 2
    assert bs.sync_state_set == {2} and bs.sync_state_set_epoch == 3
    everything = clean_broker_data(state, "c", "b", [], True, live)
    assert everything.ok and "b" not in everything.state.broker_sets
    assert clean_broker_data(state, "x", "b", [], True, live).status is \
        Status.INVALID_CLEAN_BROKER_METADATA


# ---- the saved form ----------------------------------------------------------------------


def test_state_round_trips() -> None:
    live = Live().up(1).up(2)
    state = elected(three(), live, members=frozenset({1, 2}))
    state = apply_broker_id(state, "c", "other", 1, f"{A3};5").state
    data = encode_state(state)
    assert json.loads(data)["format"] == 1
    assert decode_state(data) == state
    assert decode_state(encode_state(ControllerState())) == ControllerState()


@pytest.mark.parametrize("doc", [
    b"", b"{", b"[]", b'{"format": 2, "brokerSets": []}', b'{"format": 1}',
    b'{"format": 1, "brokerSets": [{"brokerName": "b"}]}',
    b'{"format": 1, "brokerSets": [{"brokerName": "b", "clusterName": "c", "replicas": [],'
    b' "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [], "syncStateSetEpoch": 1}]}',
    b'{"format": 1, "brokerSets": [{"brokerName": "b", "clusterName": "c", "replicas": [],'
    b' "masterEpoch": -1, "syncStateSet": [], "syncStateSetEpoch": 1}]}',
    b"\xff\xfe",
])
def test_damaged_state_is_an_error(doc: bytes) -> None:
    with pytest.raises(StateFormatError):
        decode_state(doc)
