"""ReplicasManager: the trio edge of the broker's controller mode (RocketMQ 5's
ReplicasManager; the decisions are ``broker.replicas.ReplicasCore``'s).

``run`` takes the broker from fenced to a role:

1. its id: the one kept in ``storePathRootDir/brokerIdentity``, else
   CONTROLLER_GET_NEXT_BROKER_ID and CONTROLLER_APPLY_BROKER_ID (the id is
   written before it is applied, with the check code it is applied with);
2. the heart-beats start (BROKER_HEARTBEAT to every controller, each on its
   own task, every brokerHeartbeatInterval ms, oneway, bounded);
3. CONTROLLER_REGISTER_BROKER, then CONTROLLER_GET_REPLICA_INFO: a live master
   -> the broker follows it; none -> CONTROLLER_ELECT_MASTER; elected -> master.
   Until then the broker stays fenced (the hooks are not called).

Then it polls the replica info every syncBrokerMetadataPeriod ms, and at once
when a NOTIFY_BROKER_ROLE_CHANGED arrives (``notified``): the broker acts on the
controller's own answer, never on the notification's content, so a forged or
late notification changes nothing. A master's SyncStateSet proposals go out as
CONTROLLER_ALTER_SYNC_STATE_SET (``propose``).

Requests go to the controller that led last; CONTROLLER_NOT_LEADER, a failure
or a timeout moves on to the next address (``ControllerClient``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
import trio

from broker.config import BrokerConfig
from broker.replicas import (
    Act,
    BrokerIdentity,
    ControllerView,
    Decision,
    ReplicasCore,
)
from broker.store.ha.sync_state import Proposal
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from protocol.errors import RemoteProtocolError
from protocol.trio.client import RemotingClient
from protocol.trio.errors import RemotingError
from protocol.trio.service import Guard, describe

REQUEST_TIMEOUT_S = 3.0  # one request to one controller
RETRY_PAUSE_S = 1.0  # between rounds of a start-up step that failed


class ControllerUnavailable(Exception):
    """No controller answered (as leader)."""


class ControllerRefused(Exception):
    """The leading controller answered with an error code."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"{code}: {remark or ''}")
        self.code = code
        self.remark = remark


class ControllerClient:
    """Requests to the leading controller of ``addrs``."""

    def __init__(self, client: RemotingClient, addrs: list[str],
                 timeout: float = REQUEST_TIMEOUT_S) -> None:
        if not addrs:
            raise ValueError("no controller address")
        self.client = client
        self.addrs = list(addrs)
        self.leader = self.addrs[0]
        self.timeout = timeout

    async def invoke(self, code: int, fields: dict[str, Any], body: Any = None
                     ) -> RemotingCommand:
        """The leader's answer (any code but CONTROLLER_NOT_LEADER);
        ControllerUnavailable when none answered as leader."""
        order = [self.leader] + [a for a in self.addrs if a != self.leader]
        errors: list[str] = []
        for addr in order:
            cmd = RemotingCommand.request(code, fields)
            if body is not None:
                cmd.body = cmd.encode_body(body)
            try:
                with trio.fail_after(self.timeout):
                    response = await self.client.invoke(addr, cmd, self.timeout)
            except (RemotingError, OSError, trio.TooSlowError) as exc:
                errors.append(f"{addr}: {describe(exc)}")
                continue
            if response.code == ResponseCode.CONTROLLER_NOT_LEADER:
                errors.append(f"{addr}: not the leader")
                continue
            self.leader = addr
            return response
        raise ControllerUnavailable("no controller answered as leader: " + "; ".join(errors))

    async def ask(self, code: int, fields: dict[str, Any], body: Any = None,
                  ok: frozenset[int] = frozenset({ResponseCode.SUCCESS})) -> RemotingCommand:
        """``invoke``, ControllerRefused unless the answer's code is in ``ok``."""
        response = await self.invoke(code, fields, body)
        if response.code not in ok:
            raise ControllerRefused(response.code, response.remark)
        return response


@dataclass
class ReplicaHooks:
    """What the manager asks of the broker."""

    broker_addr: Callable[[], str]
    max_offset: Callable[[], int]
    confirm_offset: Callable[[], int]
    epoch: Callable[[], int]
    # the role the controller gave (each returns once the broker has it)
    become_master: Callable[[ControllerView], Awaitable[None]]
    become_slave: Callable[[ControllerView], Awaitable[None]]
    # a master's SyncStateSet (master id, members, epoch) from the controller
    set_sync_state: Callable[[int, frozenset[int], int], None]


def _view(master_id: int | None, master_address: str | None, master_epoch: int | None,
          body: Any, sync_state_set_epoch: int | None = None) -> ControllerView:
    members: frozenset[int] = frozenset()
    sss_epoch = sync_state_set_epoch or 0
    if body is not None:
        sss = SyncStateSet.from_dict(body)
        members, sss_epoch = sss.sync_state_set, sss.sync_state_set_epoch
    return ControllerView(master_id, master_address or None, master_epoch or 0, members,
                          sss_epoch)


class ReplicasManager:
    def __init__(self, config: BrokerConfig, client: RemotingClient, hooks: ReplicaHooks,
                 core: ReplicasCore | None = None, log: Any = None) -> None:
        self.config = config
        self.controllers = ControllerClient(client, config.controller_addr_list)
        self.hooks = hooks
        self.core = core if core is not None else ReplicasCore()
        self.log = log if log is not None else structlog.get_logger("broker.replicas").bind(
            broker=config.broker_name)
        self.guard = Guard(self.log, "controller")
        self._lock = trio.Lock()  # one decision and its change at a time
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.role_known = trio.Event()  # the controller gave a role
        self.heartbeats_sent = 0
        self.notifications = 0
        self.stale_notifications = 0
        self.proposals_sent = 0

    # ---- start-up ----------------------------------------------------------------

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Id, heart-beats, registration, first role; then poll until cancelled.
        ``task_status.started()`` once the id is held and the heart-beats run."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._until_done("broker id", self._acquire_id)
            for addr in self.controllers.addrs:
                nursery.start_soon(self._heartbeat_loop, addr)
            task_status.started()
            await self._until_done("register with the controller", self._register)
            while not self.role_known.is_set():
                await self._until_done("replica info", self.sync)
                if not self.role_known.is_set():
                    await trio.sleep(RETRY_PAUSE_S)
            await self._poll_loop()

    async def _until_done(self, what: str, step: Callable[[], Awaitable[object]]) -> None:
        while True:
            try:
                await step()
            except (ControllerUnavailable, ControllerRefused, RemoteProtocolError) as exc:
                self.guard.note(f"{what} failed; trying again", key=(what, str(exc)[:80]),
                                error=str(exc), **self.core.describe())
                await trio.sleep(RETRY_PAUSE_S)
                continue
            return

    async def _acquire_id(self) -> None:
        cfg = self.config
        ident = await trio.to_thread.run_sync(BrokerIdentity.load, cfg.store_path_root_dir)
        if ident is not None and ident.broker_name != cfg.broker_name:
            raise RuntimeError(f"{BrokerIdentity.path(cfg.store_path_root_dir)} belongs to "
                               f"broker name {ident.broker_name}, not {cfg.broker_name}")
        if ident is not None and ident.confirmed:
            self.core.got_id(ident.broker_id)
            self.log.info("controller broker id", broker_id=ident.broker_id, kept=True)
            return
        if ident is None:
            r = await self.controllers.ask(
                RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                GetNextBrokerIdRequestHeader(cluster_name=cfg.broker_cluster_name,
                                             broker_name=cfg.broker_name).to_fields())
            nxt = GetNextBrokerIdResponseHeader.from_fields(r.ext_fields).next_broker_id
            if nxt is None or nxt < 1:
                raise ControllerRefused(r.code, f"no usable next broker id ({nxt})")
            ident = BrokerIdentity(cfg.broker_cluster_name, cfg.broker_name, nxt,
                                   f"{self.hooks.broker_addr()};{int(time.time() * 1000)}",
                                   False)
            # written before it is applied: a crash in between applies it again
            await trio.to_thread.run_sync(ident.save, cfg.store_path_root_dir)
        r = await self.controllers.invoke(
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            ApplyBrokerIdRequestHeader(cluster_name=cfg.broker_cluster_name,
                                       broker_name=cfg.broker_name,
                                       applied_broker_id=ident.broker_id,
                                       register_check_code=ident.check_code).to_fields())
        if r.code != ResponseCode.SUCCESS:
            # taken by another replica meanwhile: a new id next round
            await trio.to_thread.run_sync(
                BrokerIdentity.path(cfg.store_path_root_dir).unlink, True)
            raise ControllerRefused(r.code, f"broker id {ident.broker_id} refused: {r.remark}")
        ident = BrokerIdentity(ident.cluster, ident.broker_name, ident.broker_id,
                               ident.check_code, True)
        await trio.to_thread.run_sync(ident.save, cfg.store_path_root_dir)
        self.core.got_id(ident.broker_id)
        self.log.info("controller broker id", broker_id=ident.broker_id, kept=False)

    async def _register(self) -> None:
        cfg = self.config
        assert self.core.broker_id is not None
        await self.controllers.ask(
            RequestCode.CONTROLLER_REGISTER_BROKER,
            RegisterBrokerToControllerRequestHeader(
                cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name,
                broker_id=self.core.broker_id,
                broker_address=self.hooks.broker_addr()).to_fields())
        self.log.info("registered with the controller", controller=self.controllers.leader,
                      broker_id=self.core.broker_id)

    # ---- heart-beats ---------------------------------------------------------------

    def heartbeat_header(self) -> BrokerHeartbeatRequestHeader:
        cfg = self.config
        return BrokerHeartbeatRequestHeader(
            cluster_name=cfg.broker_cluster_name, broker_addr=self.hooks.broker_addr(),
            broker_name=cfg.broker_name, broker_id=self.core.broker_id,
            epoch=max(0, self.hooks.epoch()), max_offset=max(0, self.hooks.max_offset()),
            confirm_offset=max(0, self.hooks.confirm_offset()),
            heartbeat_timeout_mills=cfg.controller_heart_beat_timeout_mills,
            election_priority=cfg.broker_election_priority)

    async def _heartbeat_loop(self, addr: str) -> None:
        """One controller's heart-beats: a slow one delays no other's."""
        interval = self.config.broker_heartbeat_interval / 1000
        while True:
            cmd = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT,
                                          self.heartbeat_header().to_fields(), oneway=True)
            with trio.move_on_after(max(interval, 0.05)):
                try:
                    await self.controllers.client.invoke_oneway(addr, cmd)
                    self.heartbeats_sent += 1
                except (RemotingError, OSError) as exc:
                    self.guard.note("heart-beat not sent", key=("beat", addr),
                                    log_level="info", controller=addr, error=describe(exc))
            await trio.sleep(interval)

    # ---- decisions ---------------------------------------------------------------

    async def replica_info(self) -> ControllerView:
        r = await self.controllers.ask(
            RequestCode.CONTROLLER_GET_REPLICA_INFO,
            GetReplicaInfoRequestHeader(broker_name=self.config.broker_name).to_fields())
        h = GetReplicaInfoResponseHeader.from_fields(r.ext_fields)
        return _view(h.master_broker_id, h.master_address, h.master_epoch,
                     r.decode_body() if r.body else None)

    async def elect(self) -> ControllerView | None:
        """Ask for an election; the new (or surviving) master's view, None when
        nobody could be elected."""
        r = await self.controllers.ask(
            RequestCode.CONTROLLER_ELECT_MASTER,
            ElectMasterRequestHeader(broker_name=self.config.broker_name,
                                     cluster_name=self.config.broker_cluster_name,
                                     broker_id=self.core.broker_id).to_fields(),
            ok=frozenset({ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                          ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                          ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE}))
        if r.code in (ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                      ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE):
            self.guard.note("no master could be elected", key="elect", remark=r.remark)
            return None
        h = ElectMasterResponseHeader.from_fields(r.ext_fields)
        members: frozenset[int] = frozenset()
        if r.body:
            members = ElectMasterResponseBody.from_dict(r.decode_body()).sync_state_set
        return ControllerView(h.master_broker_id, h.master_address, h.master_epoch or 0,
                              members, h.sync_state_set_epoch or 0)

    async def sync(self) -> Decision:
        """Ask the controller, act on its answer; returns what was decided."""
        async with self._lock:
            view = await self.replica_info()
            decision = self.core.decide(view)
            if decision.act is Act.ELECT:
                self.core.electing()
                elected = await self.elect()
                if elected is None:
                    return decision
                decision = self.core.decide(elected)
            await self._apply(decision)
            return decision

    async def _apply(self, decision: Decision) -> None:
        view = decision.view
        if decision.act is Act.NOTHING or view is None:
            if decision.stale:
                self.log.info("stale controller view ignored", reason=decision.reason)
            elif decision.reason:
                self.guard.note("controller view not acted on", key=decision.reason,
                                reason=decision.reason)
            return
        if decision.act is Act.ELECT:
            return
        self.log.info("controller decision", act=decision.act.value, reason=decision.reason,
                      master_id=view.master_id, master=view.master_address,
                      master_epoch=view.master_epoch, sync_state_set=sorted(view.sync_state_set),
                      sync_state_set_epoch=view.sync_state_set_epoch)
        if decision.act is Act.MASTER:
            await self.hooks.become_master(view)
        elif decision.act is Act.SLAVE:
            await self.hooks.become_slave(view)
        else:
            assert view.master_id is not None
            self.hooks.set_sync_state(view.master_id, view.sync_state_set,
                                      view.sync_state_set_epoch)
        self.core.applied(decision)
        self.role_known.set()

    async def _poll_loop(self) -> None:
        period = self.config.sync_broker_metadata_period / 1000
        while True:
            with trio.move_on_after(period):
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                await self.sync()
            except (ControllerUnavailable, ControllerRefused, RemoteProtocolError) as exc:
                self.guard.note("replica info poll failed", key=str(exc)[:80], error=str(exc))
            except Exception as exc:  # a role change that failed: the next poll retries
                self.guard.failed(exc, "acting on the controller's answer failed")
                await self.guard.pause()
            else:
                self.guard.ok()

    # ---- from the controller and the HA service ------------------------------------

    def notified(self, header: NotifyBrokerRoleChangedRequestHeader) -> bool:
        """NOTIFY_BROKER_ROLE_CHANGED: poll the controller now unless the
        notification is older than the role in force (then False)."""
        self.notifications += 1
        if header.master_epoch < self.core.master_epoch:
            self.stale_notifications += 1
            self.log.info("stale role change notification ignored",
                          master_epoch=header.master_epoch, in_force=self.core.master_epoch)
            return False
        self._wake.set()
        return True

    def propose(self, proposal: Proposal) -> None:
        """The HA service's SyncStateSet proposal (a master): sent in the background."""
        if self._nursery is None:
            return
        try:
            self._nursery.start_soon(self._alter, proposal)
        except RuntimeError:  # the broker is stopping: its nursery takes no more tasks
            self.log.info("SyncStateSet proposal dropped: the broker is stopping",
                     members=sorted(proposal.members))

    async def _alter(self, proposal: Proposal) -> None:
        core = self.core
        if core.broker_id is None or proposal.master_id != core.broker_id:
            return
        epoch = core.master_epoch
        try:
            r = await self.controllers.ask(
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                AlterSyncStateSetRequestHeader(
                    broker_name=self.config.broker_name, master_broker_id=core.broker_id,
                    master_epoch=epoch).to_fields(),
                SyncStateSet(proposal.members, proposal.epoch).to_dict())
            self.proposals_sent += 1
            sss = SyncStateSet.from_dict(r.decode_body())
        except (ControllerUnavailable, ControllerRefused, RemoteProtocolError) as exc:
            self.guard.note("SyncStateSet change refused or not sent", key=str(exc)[:80],
                            error=str(exc), members=sorted(proposal.members))
            return
        async with self._lock:  # applied only while this broker is the master it was
            if core.master_epoch != epoch or core.master_id != core.broker_id:
                return
            if sss.sync_state_set_epoch <= core.sync_state_set_epoch:
                return
            self.hooks.set_sync_state(core.broker_id, sss.sync_state_set,
                                      sss.sync_state_set_epoch)
            core.sync_state_taken(sss.sync_state_set_epoch)
