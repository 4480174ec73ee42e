"""The broker's role as a live value, and the task group of each role.

``RoleState`` (pure) holds the role a broker has now: ``brokerRole``
(ASYNC_MASTER, SYNC_MASTER or SLAVE), ``brokerId`` (0 for a master), the
master a slave follows (its remoting and HA addresses; None: the name
servers' answer, or ``haMasterAddress``) and an epoch, one more at every
change (a failover may pass its own, which must then grow). A change is
checked before anything moves (``RoleError`` says what is wrong) and
observers hear every change. Request handlers read ``is_slave`` and
``sync_master``: plain attributes, cheap on the hot path.

``RoleRunner`` (trio edge) owns one task group per role: the services only a
master or only a slave runs start in it, and a change (``change``) goes:

1. ``prepare(old, new)``: the old role stops taking what it can no longer
   finish (the store's write fence goes up: puts are refused with the reason;
   sends waiting for a slave are answered);
2. the old role's task group is cancelled and the runner waits for it to end
   (only when the new role runs other services: ``services_key`` differs;
   ASYNC_MASTER <-> SYNC_MASTER keeps its group);
3. ``handed_over(old, new)``: what the old services left is reset, what the
   new role needs is loaded;
4. the live value flips (requests see the new role at once);
5. the new role's services start in a new task group (``start``).

One change runs at a time. A step that fails is raised to the caller; a
failure before the flip leaves the old role live (its services stopped when
the failure came after step 2: the broker then needs a new change).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import structlog
import trio

from broker.config import BrokerRole

MASTER_ID = 0


class RoleError(ValueError):
    """A role change that cannot be made: the message says why."""


@dataclass(frozen=True, slots=True)
class Role:
    broker_role: BrokerRole
    broker_id: int
    # a slave's master: its remoting address (metadata sync) and HA address
    # (replication); None: what the name servers (or haMasterAddress) say
    master_addr: str | None = None
    master_ha_addr: str | None = None
    epoch: int = 0

    @property
    def is_slave(self) -> bool:
        return self.broker_role is BrokerRole.SLAVE

    @property
    def sync_master(self) -> bool:
        return self.broker_role is BrokerRole.SYNC_MASTER

    def describe(self) -> dict[str, Any]:
        """Log fields."""
        out: dict[str, Any] = {"role": self.broker_role.value, "broker_id": self.broker_id,
                               "epoch": self.epoch}
        if self.master_addr:
            out["master"] = self.master_addr
        if self.master_ha_addr:
            out["master_ha"] = self.master_ha_addr
        return out


def _check_addr(what: str, addr: str | None) -> None:
    if addr is None:
        return
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RoleError(f"{what} must be host:port, not {addr!r}")


def check_role(broker_role: BrokerRole, broker_id: int, master_addr: str | None = None,
               master_ha_addr: str | None = None) -> None:
    """RoleError unless this is a role a broker can have (the rules brokerRole
    and brokerId follow in a config file, and a master follows no one)."""
    if not isinstance(broker_role, BrokerRole):
        raise RoleError(f"brokerRole must be one of {', '.join(r.value for r in BrokerRole)}, "
                        f"not {broker_role!r}")
    if isinstance(broker_id, bool) or not isinstance(broker_id, int):
        raise RoleError(f"brokerId must be an integer, not {broker_id!r}")
    if broker_role is BrokerRole.SLAVE:
        if broker_id <= MASTER_ID:
            raise RoleError(f"a slave needs a brokerId above 0, not {broker_id}")
    else:
        if broker_id != MASTER_ID:
            raise RoleError(f"a master ({broker_role.value}) has brokerId 0, not {broker_id}")
        if master_addr is not None or master_ha_addr is not None:
            raise RoleError(f"a master ({broker_role.value}) follows no master")
    _check_addr("the master's address", master_addr)
    _check_addr("the master's HA address", master_ha_addr)


RoleObserver = Callable[[Role, Role], None]


class RoleState:
    """The live role (pure: no trio, no I/O)."""

    def __init__(self, broker_role: BrokerRole, broker_id: int,
                 master_addr: str | None = None, master_ha_addr: str | None = None) -> None:
        check_role(broker_role, broker_id, master_addr, master_ha_addr)
        self.current = Role(broker_role, broker_id, master_addr, master_ha_addr)
        # read on every request: plain attributes, set by apply()
        self.is_slave = self.current.is_slave
        self.sync_master = self.current.sync_master
        self.broker_role = broker_role
        self._observers: list[RoleObserver] = []

    @property
    def epoch(self) -> int:
        return self.current.epoch

    def observe(self, observer: RoleObserver) -> None:
        """``observer(old, new)`` is called at every change, once the live value moved."""
        self._observers.append(observer)

    def next(self, broker_role: BrokerRole, broker_id: int, master_addr: str | None = None,
             master_ha_addr: str | None = None, epoch: int | None = None) -> Role | None:
        """The checked role a change asks for, or None when it is the role the
        broker has (nothing to do). ``epoch``: the change's own (a failover's);
        it must be above the current one (a late notice changes nothing, it
        raises), else the current one plus one is taken."""
        check_role(broker_role, broker_id, master_addr, master_ha_addr)
        cur = self.current
        wanted = Role(broker_role, broker_id, master_addr, master_ha_addr, cur.epoch)
        if epoch is not None:
            if isinstance(epoch, bool) or not isinstance(epoch, int):
                raise RoleError(f"the epoch must be an integer, not {epoch!r}")
            if epoch == cur.epoch and wanted == cur:
                return None  # the same notice again
            if epoch <= cur.epoch:
                raise RoleError(f"epoch {epoch} is not after the current epoch {cur.epoch}")
            return replace(wanted, epoch=epoch)
        if wanted == cur:
            return None
        return replace(wanted, epoch=cur.epoch + 1)

    def apply(self, new: Role) -> Role:
        """Make ``new`` the live role; returns the old one. Every observer is
        called, one failing or not; failures are raised together afterwards."""
        old, self.current = self.current, new
        self.is_slave = new.is_slave
        self.sync_master = new.sync_master
        self.broker_role = new.broker_role
        failures: list[Exception] = []
        for observer in list(self._observers):
            try:
                observer(old, new)
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise ExceptionGroup("role observers failed", failures)
        return old


Step = Callable[[Role, Role], Awaitable[None]]


def services_key(role: Role) -> tuple[bool, int, str | None, str | None]:
    """Roles with the same key run the same services (a master's: HA master
    side, schedule, transaction checks; a slave's: following one master)."""
    return (role.is_slave, role.broker_id, role.master_addr, role.master_ha_addr)


class RoleRunner:
    """Runs the services of the live role in a task group of their own;
    ``change`` moves to another role (see the module's docstring)."""

    def __init__(self, state: RoleState, start: Callable[[Role, trio.Nursery], Awaitable[None]],
                 prepare: Step, handed_over: Step, log: Any = None) -> None:
        self.state = state
        self._start_services = start
        self._prepare = prepare
        self._handed_over = handed_over
        self.log = log if log is not None else structlog.get_logger("broker.role")
        self._outer: trio.Nursery | None = None
        self._group: trio.CancelScope | None = None
        self._group_done: trio.Event | None = None
        self._group_nursery: trio.Nursery | None = None
        self._lock = trio.Lock()
        self.changes = 0  # changes made (figures, tests)
        self.groups_started = 0
        self.groups_ended = 0

    @property
    def running(self) -> bool:
        return self._outer is not None

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Start the live role's services; serve changes until cancelled."""
        try:
            async with trio.open_nursery() as outer:
                self._outer = outer
                await self._start_group(self.state.current)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._outer = None

    async def _start_group(self, role: Role) -> None:
        assert self._outer is not None
        done = trio.Event()
        self._group_done = done
        self._group = await self._outer.start(self._group_task, role, done)

    async def _group_task(self, role: Role, done: trio.Event,
                          task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.groups_started += 1
        try:
            async with trio.open_nursery() as nursery:
                self._group_nursery = nursery
                await self._start_services(role, nursery)
                task_status.started(nursery.cancel_scope)
        finally:
            self._group_nursery = None
            self.groups_ended += 1
            done.set()

    async def _stop_group(self) -> None:
        assert self._group is not None and self._group_done is not None
        self._group.cancel()
        await self._group_done.wait()
        self._group = self._group_done = None

    def group_tasks(self) -> list[str]:
        """The names of every task in the live role's group (its tree), sorted."""
        names: list[str] = []
        nursery = self._group_nursery
        stack = list(nursery.child_tasks) if nursery is not None else []
        while stack:
            task = stack.pop()
            names.append(task.name)
            for child in task.child_nurseries:
                stack.extend(child.child_tasks)
        return sorted(names)

    async def change(self, broker_role: BrokerRole, broker_id: int,
                     master_addr: str | None = None, master_ha_addr: str | None = None,
                     epoch: int | None = None) -> Role:
        """Move to the role asked for (RoleError when it is not one a broker
        can have, RuntimeError when the runner is not running); returns the
        role in force after it. Asking for the current role changes nothing."""
        async with self._lock:
            new = self.state.next(broker_role, broker_id, master_addr, master_ha_addr, epoch)
            if new is None:
                return self.state.current
            if self._outer is None or self._group is None:
                raise RuntimeError("the broker is not running: its role cannot change")
            old = self.state.current
            restart = services_key(old) != services_key(new)
            self.log.info("role changing", **{f"from_{k}": v for k, v in old.describe().items()},
                          **new.describe(), restart_services=restart)
            await self._prepare(old, new)
            if restart:
                await self._stop_group()
            try:
                await self._handed_over(old, new)
            except Exception:
                if restart:  # the old role goes on: its services again
                    await self._start_group(old)
                raise
            try:
                self.state.apply(new)
            finally:
                if restart:
                    await self._start_group(new)
                self.changes += 1
            self.log.info("role changed", **new.describe())
            return new
