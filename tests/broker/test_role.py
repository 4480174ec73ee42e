"""The live role (broker/role.py): checked changes, epochs, observers; the
runner's task groups, without sockets."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
import trio.testing

from broker.config import BrokerRole
from broker.role import Role, RoleError, RoleRunner, RoleState, check_role, services_key

A, S, M = BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER, BrokerRole.SLAVE


@pytest.mark.parametrize(("role", "broker_id", "master", "ha", "error"), [
    (M, 0, None, None, "a slave needs a brokerId above 0"),
    (M, -1, None, None, "a slave needs a brokerId above 0"),
    (A, 1, None, None, "a master (ASYNC_MASTER) has brokerId 0"),
    (S, 2, None, None, "a master (SYNC_MASTER) has brokerId 0"),
    (A, 0, "127.0.0.1:10911", None, "follows no master"),
    (A, 0, None, "127.0.0.1:10912", "follows no master"),
    (M, 1, "nohost", None, "the master's address must be host:port"),
    (M, 1, None, "h:99999", "the master's HA address must be host:port"),
    (M, 1, None, "h:", "the master's HA address must be host:port"),
    (M, True, None, None, "brokerId must be an integer"),
    ("SLAVE", 1, None, None, "brokerRole must be one of"),
])
def test_roles_a_broker_cannot_have(role: Any, broker_id: Any, master: str | None,
                                    ha: str | None, error: str) -> None:
    with pytest.raises(RoleError, match=re.escape(error)):
        check_role(role, broker_id, master, ha)
    state = RoleState(A, 0)
    with pytest.raises(RoleError, match=re.escape(error)):
        state.next(role, broker_id, master, ha)
    assert state.current == Role(A, 0)  # nothing moved


def test_changes_count_epochs_and_flip_the_hot_path_attributes() -> None:
    state = RoleState(A, 0)
    assert (state.is_slave, state.sync_master, state.epoch) == (False, False, 0)
    assert state.next(A, 0) is None  # already so
    slave = state.next(M, 1, "127.0.0.1:10911", "127.0.0.1:10912")
    assert slave == Role(M, 1, "127.0.0.1:10911", "127.0.0.1:10912", 1)
    assert state.current == Role(A, 0)  # next() only checks
    assert state.apply(slave) == Role(A, 0)
    assert (state.is_slave, state.sync_master, state.broker_role) == (True, False, M)
    sync = state.next(S, 0)
    assert sync is not None and sync.epoch == 2
    state.apply(sync)
    assert (state.is_slave, state.sync_master) == (False, True)


def test_a_change_with_its_own_epoch_must_be_newer() -> None:
    state = RoleState(A, 0)
    new = state.next(M, 1, epoch=7)
    assert new is not None and new.epoch == 7
    state.apply(new)
    assert state.next(M, 1, epoch=7) is None  # the same notice again
    with pytest.raises(RoleError, match="epoch 7 is not after the current epoch 7"):
        state.next(A, 0, epoch=7)
    with pytest.raises(RoleError, match="epoch 3 is not after"):
        state.next(A, 0, epoch=3)
    with pytest.raises(RoleError, match="the epoch must be an integer"):
        state.next(A, 0, epoch="8")  # type: ignore[arg-type]
    assert state.next(A, 0, epoch=8) == Role(A, 0, epoch=8)


def test_every_observer_hears_a_change_even_after_one_fails() -> None:
    state = RoleState(M, 1)
    heard: list[tuple[Role, Role]] = []

    def broken(old: Role, new: Role) -> None:
        raise RuntimeError("observer bug")

    state.observe(broken)
    state.observe(lambda old, new: heard.append((old, new)))
    new = state.next(A, 0)
    assert new is not None
    with pytest.raises(ExceptionGroup) as info:
        state.apply(new)
    assert [str(e) for e in info.value.exceptions] == ["observer bug"]
    assert heard == [(Role(M, 1), new)] and state.current == new and not state.is_slave


def test_services_key_keeps_a_masters_group_across_sync_and_async() -> None:
    assert services_key(Role(A, 0)) == services_key(Role(S, 0, epoch=3))
    assert services_key(Role(A, 0)) != services_key(Role(M, 1))
    assert services_key(Role(M, 1, "h:1")) != services_key(Role(M, 1, "h:2"))
    assert services_key(Role(M, 1)) != services_key(Role(M, 2))


class Recorder:
    """The runner's steps, in order; each role's group runs one named task."""

    def __init__(self, state: RoleState) -> None:
        self.state = state
        self.steps: list[str] = []
        self.fail_hand_over = False
        self.running: set[str] = set()

    async def start(self, role: Role, nursery: trio.Nursery) -> None:
        self.steps.append(f"start {role.broker_role.value}")
        name = role.broker_role.value

        async def service(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            self.running.add(name)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self.running.discard(name)
                self.steps.append(f"stopped {name}")

        await nursery.start(service)

    async def prepare(self, old: Role, new: Role) -> None:
        self.steps.append(f"prepare {old.broker_role.value}->{new.broker_role.value}")

    async def handed_over(self, old: Role, new: Role) -> None:
        self.steps.append(f"handed over, live {self.state.broker_role.value}")
        if self.fail_hand_over:
            raise OSError("disk gone")


async def test_runner_stops_the_old_group_hands_over_flips_then_starts_the_new() -> None:
    state = RoleState(A, 0)
    rec = Recorder(state)
    runner = RoleRunner(state, rec.start, rec.prepare, rec.handed_over)
    with pytest.raises(RuntimeError, match="not running"):
        await runner.change(M, 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        assert rec.running == {"ASYNC_MASTER"} and runner.group_tasks() == [
            "tests.broker.test_role.Recorder.start.<locals>.service"]
        assert await runner.change(M, 1, "127.0.0.1:1") == Role(M, 1, "127.0.0.1:1", None, 1)
        assert rec.steps == ["start ASYNC_MASTER", "prepare ASYNC_MASTER->SLAVE",
                             "stopped ASYNC_MASTER", "handed over, live ASYNC_MASTER",
                             "start SLAVE"]
        assert rec.running == {"SLAVE"} and state.is_slave
        rec.steps.clear()
        # the same role again: nothing happens
        assert await runner.change(M, 1, "127.0.0.1:1") == state.current
        assert rec.steps == []
        # to a master, then between master kinds: that group goes on
        await runner.change(S, 0)
        await runner.change(A, 0)
        assert rec.steps == ["prepare SLAVE->SYNC_MASTER", "stopped SLAVE",
                             "handed over, live SLAVE", "start SYNC_MASTER",
                             "prepare SYNC_MASTER->ASYNC_MASTER",
                             "handed over, live SYNC_MASTER"]
        assert rec.running == {"SYNC_MASTER"} and state.epoch == 3 and runner.changes == 3
        assert (runner.groups_started, runner.groups_ended) == (3, 2)
        nursery.cancel_scope.cancel()
    assert rec.running == set() and runner.groups_ended == 3 and not runner.running


async def test_a_failed_hand_over_leaves_the_old_role_running() -> None:
    state = RoleState(A, 0)
    rec = Recorder(state)
    runner = RoleRunner(state, rec.start, rec.prepare, rec.handed_over)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        rec.fail_hand_over = True
        with pytest.raises(OSError, match="disk gone"):
            await runner.change(M, 1)
        assert state.current == Role(A, 0) and rec.running == {"ASYNC_MASTER"}
        rec.fail_hand_over = False
        await runner.change(M, 1)
        assert rec.running == {"SLAVE"} and state.epoch == 1
        nursery.cancel_scope.cancel()


async def test_changes_run_one_at_a_time() -> None:
    state = RoleState(A, 0)
    rec = Recorder(state)
    gate = trio.Event()
    prepare = rec.prepare

    async def slow_prepare(old: Role, new: Role) -> None:
        await prepare(old, new)
        if new.is_slave:
            await gate.wait()

    runner = RoleRunner(state, rec.start, slow_prepare, rec.handed_over)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        nursery.start_soon(runner.change, M, 1)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(runner.change, A, 0)
        await trio.testing.wait_all_tasks_blocked()
        assert rec.steps == ["start ASYNC_MASTER", "prepare ASYNC_MASTER->SLAVE"]
        gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert rec.steps[-1] == "start ASYNC_MASTER" and state.current == Role(A, 0, epoch=2)
        assert "prepare SLAVE->ASYNC_MASTER" in rec.steps
        nursery.cancel_scope.cancel()
