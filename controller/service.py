"""ControllerService: the controller's trio edge.

It holds the state (controller/replicas.py) and its stored version, the liveness
table (controller/heartbeat.py), and runs:

- the request handlers (controller/processor.py), on its own RemotingServer
  (``mqcontroller``) or registered in a name server's table (enableControllerInNamesrv);
- the leadership campaign (``Leadership.run``): on election the state is reloaded
  from the store; a controller that does not lead answers CONTROLLER_NOT_LEADER;
- the scan: every ``scanNotActiveBrokerInterval`` replicas silent past their timeout
  are taken out of the liveness table, and a broker name whose master is among them
  (or was never heard from since this controller began to lead, for longer than
  ``brokerHeartbeatTimeout``) gets an election;
- the notifications of a new master (NOTIFY_BROKER_ROLE_CHANGED) to every replica;
- on its own port: the ACL (``aclEnable``, controller/acl.py) around the handlers and
  in front of connections not yet authenticated, the accounts file watched, and TLS
  (``tlsMode``, the name server's keys).

UPDATE_CONTROLLER_CONFIG's changes are written to ``settings_file`` (the config
file, else the overlay: controller/runtime_config.py) before they are applied and
answered.

Every change goes through ``change``: one at a time, computed on the current state,
saved (compare-and-swap on the stored version), and only then applied, answered and
notified. A save that fails changes nothing in memory: the requester gets an error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog
import trio

from acl.binding import signature_binding
from acl.guard import AclFile
from controller.acl import CONTROLLER_PRE_AUTH_BODY, guard_table, header_gate
from controller.config import ControllerConfig
from controller.file_store import FileStateStore
from controller.heartbeat import HeartbeatTable, LivenessAt
from controller.processor import ControllerProcessor, NotLeader
from controller.replicas import (
    ControllerState,
    Limits,
    MasterView,
    Result,
    StateFormatError,
    decode_state,
    elect_master,
    encode_state,
)
from controller.runtime_config import write_changes
from controller.state_store import (
    AlwaysLeader,
    Leadership,
    StateConflict,
    StateStore,
    StateStoreError,
)
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError
from protocol.controller import NotifyBrokerRoleChangedRequestHeader, SyncStateSet
from protocol.extras import MissingExtraError, require_etcd
from protocol.trio.client import RemotingClient
from protocol.trio.errors import RemotingError
from protocol.trio.preauth import PreAuth, pre_auth_of
from protocol.trio.server import RemotingServer
from protocol.trio.service import Guard

log = structlog.get_logger("controller")

T = TypeVar("T")
# a change is computed again after a compare-and-swap conflict (the state reloaded)
SAVE_ATTEMPTS = 2


def open_backend(config: ControllerConfig, identity: str) -> tuple[StateStore, Leadership]:
    """The store and leadership ``controllerType`` names; ``identity``: this
    controller's address, as the others see it (etcd's leader key holds it).
    ConfigError when that backend cannot be opened (a missing extra, bad etcd* keys)."""
    if config.controller_type == "file":
        return FileStateStore(config.controller_store_path), AlwaysLeader()
    try:
        require_etcd()
    except MissingExtraError as exc:
        raise ConfigError(str(exc)) from None
    from controller.etcd_backend import EtcdConfig, open_etcd_backend

    backend = open_etcd_backend(EtcdConfig.of_controller(config.etcd_properties), identity)
    return backend.store, backend.leadership


class Notifier:
    """NOTIFY_BROKER_ROLE_CHANGED to replicas, never holding the controller up: per
    address at most one notification in flight and one waiting (a newer one replaces
    the waiting one: only the latest master matters), each bounded by ``timeout``."""

    def __init__(self, client: RemotingClient, nursery: trio.Nursery, timeout: float) -> None:
        self.client = client
        self.nursery = nursery
        self.timeout = timeout
        self._waiting: dict[str, MasterView] = {}
        self._busy: set[str] = set()
        self.sent = 0
        self.failed = 0
        self._guard = Guard(log, "notify broker role changed")

    def notify(self, view: MasterView) -> None:
        for addr in sorted(set(view.addresses.values())):
            self._waiting[addr] = view
            if addr not in self._busy:
                self._busy.add(addr)
                self.nursery.start_soon(self._send_all, addr)

    async def _send_all(self, addr: str) -> None:
        try:
            while addr in self._waiting:
                view = self._waiting.pop(addr)
                await self._send(addr, view)
        finally:
            self._busy.discard(addr)

    async def _send(self, addr: str, view: MasterView) -> None:
        header = NotifyBrokerRoleChangedRequestHeader(
            master_epoch=view.master_epoch, sync_state_set_epoch=view.sync_state_set_epoch,
            master_address=view.master_address, master_broker_id=view.master_id)
        body = SyncStateSet(view.sync_state_set, view.sync_state_set_epoch)
        cmd = RemotingCommand.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
                                      header.to_fields())
        cmd.body = cmd.encode_body(body.to_dict())
        try:
            with trio.fail_after(self.timeout):
                response = await self.client.invoke(addr, cmd, self.timeout)
        except (RemotingError, trio.TooSlowError, OSError) as exc:
            self.failed += 1
            self._guard.note("role change not delivered", key=("notify", addr), addr=addr,
                             broker=view.broker_name, master_epoch=view.master_epoch,
                             error=f"{type(exc).__name__}: {exc}")
            return
        except Exception as exc:  # never the controller's end: logged, the next one goes
            self.failed += 1
            self._guard.failed(exc, "role change notification failed", addr=addr,
                               broker=view.broker_name)
            return
        self.sent += 1
        log.info("replica told of its master", addr=addr, broker=view.broker_name,
                 master=view.master_id, master_epoch=view.master_epoch, code=response.code)


def acl_path(config: ControllerConfig, config_file: Path | None) -> Path:
    """aclPlainFile, or plain_acl.yml beside the config file (else in the working dir)."""
    if config.acl_plain_file:
        return Path(config.acl_plain_file)
    if config_file is not None:
        return config_file.parent / "plain_acl.yml"
    return Path("plain_acl.yml")


class ControllerService:
    """``config_file``: the file the config came from (where plain_acl.yml is looked
    for); ``settings_file``: where UPDATE_CONTROLLER_CONFIG's changes are written
    (None: kept in memory only)."""

    def __init__(self, config: ControllerConfig, store: StateStore, leadership: Leadership,
                 *, serve: bool = True, advertised_addr: str | None = None,
                 config_file: Path | None = None, settings_file: Path | None = None) -> None:
        self.config = config
        self.store = store
        self.leadership = leadership
        self.state = ControllerState()
        self.version = 0
        self.heartbeats = HeartbeatTable(config.broker_heartbeat_timeout / 1000,
                                         config.controller_max_heartbeat_entries)
        self.leader_since: float | None = None
        self.elections = 0
        self.scans = 0
        self.notifier: Notifier | None = None
        self._advertised = advertised_addr
        self._lock = trio.Lock()
        self._stop = trio.Event()
        self._scan_guard = Guard(log, "scan not active broker")
        self.settings_file = settings_file
        self._config_lock = trio.Lock()
        # broker names whose master's heart-beat connection closed: the next scan,
        # woken at once, elects for them
        self._closed_masters: set[str] = set()
        self._wake = trio.Event()
        self.processor = ControllerProcessor(self)
        self.server: RemotingServer | None = None
        # requests refused by the ACL (aclEnable), by (request code, reason)
        self.acl_refusals: dict[tuple[int, str], int] = {}
        self.acl_file: AclFile | None = None
        if serve:
            handlers = self.processor.handler_table()
            preauth: PreAuth | None = None
            if config.acl_enable:
                acl_file = self.acl_file = AclFile(acl_path(config, config_file))
                handlers = guard_table(handlers, lambda: acl_file.config,
                                       self.record_acl_refusal,
                                       binding=signature_binding(config))
                preauth = pre_auth_of(config, header_gate(lambda: acl_file.config,
                                                          self.record_acl_refusal),
                                      CONTROLLER_PRE_AUTH_BODY)
            self.server = RemotingServer(handlers, config.listen_ip, config.listen_port,
                                         max_frame_size=config.max_frame_size,
                                         limits=config.connection_limits(),
                                         tls=config.server_tls(), preauth=preauth)
            self.server.on_connection_closed(self.on_connection_closed)

    def record_acl_refusal(self, code: int, reason: str) -> None:
        key = (code, reason)
        self.acl_refusals[key] = self.acl_refusals.get(key, 0) + 1

    # ---- settings read at each use (UPDATE_CONTROLLER_CONFIG changes them) ----

    @property
    def limits(self) -> Limits:
        return Limits(self.config.controller_max_broker_names,
                      self.config.controller_max_replicas)

    @property
    def address(self) -> str | None:
        """Where this controller answers (its own port, or the name server's)."""
        if self._advertised is not None:
            return self._advertised
        if self.server is not None:
            return f"{self.config.listen_ip}:{self.server.port}"
        return None

    def set_address(self, addr: str) -> None:
        """Where this controller answers, when another server serves it (a name server)."""
        self._advertised = addr

    @property
    def is_leader(self) -> bool:
        return self.leadership.is_leader and self.leader_since is not None

    def liveness(self) -> LivenessAt:
        return self.heartbeats.at(trio.current_time())

    async def apply_runtime_config(self, changes: dict[str, str]) -> bool:
        """UPDATE_CONTROLLER_CONFIG's checked changes (controller/runtime_config.py):
        written to ``settings_file`` (in a worker thread), then applied. Returns
        whether they were written (False: no settings file). OSError when the file
        cannot be written: nothing applied."""
        async with self._config_lock:
            path = self.settings_file
            if path is not None:
                await trio.to_thread.run_sync(write_changes, path, changes)
            self.config.update(changes)
            self.heartbeats.timeout_s = self.config.broker_heartbeat_timeout / 1000
        log.info("controller config changed at run time",
                 path=str(path) if path is not None else None, **changes)
        return path is not None

    # ---- running ----

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled or ``request_shutdown``. The stored state is read
        first: a damaged store stops the start (StateStoreError, StateFormatError)."""
        if self.acl_file is not None:
            await trio.to_thread.run_sync(self.acl_file.load_at_start)
        await self._reload()
        log.info("controller state loaded", version=self.version,
                 broker_names=len(self.state.broker_sets))
        timeout = self.config.notify_broker_role_changed_timeout / 1000
        async with RemotingClient(connect_timeout=timeout, tls=self.config.client_tls(),
                                  credentials=self.config.credentials()) as client, \
                trio.open_nursery() as nursery:
            self.notifier = Notifier(client, nursery, timeout)
            nursery.start_soon(self.leadership.run, self._on_elected, self._on_lost)
            port = None
            if self.server is not None:
                port = await nursery.start(self.server.serve)
            nursery.start_soon(self._scan_loop)
            if self.acl_file is not None:
                nursery.start_soon(self.acl_file.watch, self.config.acl_reload_interval / 1000)
            log.info("controller started", port=port, address=self.address,
                     controller_type=self.config.controller_type,
                     acl=self.acl_file is not None,
                     tls=self.server.tls.mode if self.server is not None else None)
            task_status.started(port)
            await self._stop.wait()
            nursery.cancel_scope.cancel()
        await self.store.aclose()

    def request_shutdown(self) -> None:
        self._stop.set()

    async def _reload(self) -> None:
        stored = await self.store.load()
        if stored is None:
            self.state, self.version = ControllerState(), 0
        else:
            self.state, self.version = decode_state(stored.data), stored.version

    async def _on_elected(self) -> None:
        """Lead from the stored state: read it first, again after a back-off while the
        store cannot be read (meanwhile this controller answers CONTROLLER_NOT_LEADER)."""
        guard = Guard(log, "load the state on election")
        while True:
            async with self._lock:
                try:
                    await self._reload()
                except (StateStoreError, StateFormatError) as exc:
                    guard.failed(exc, "cannot lead: the stored state cannot be read")
                else:
                    self.leader_since = trio.current_time()
                    break
            await guard.pause()
        log.info("controller leads", version=self.version,
                 broker_names=len(self.state.broker_sets))

    async def _on_lost(self) -> None:
        self.leader_since = None
        log.warning("controller no longer leads")

    # ---- changes ----

    async def change(self, op: Callable[[ControllerState], Result[T]]) -> Result[T]:
        """Compute ``op`` on the current state and, when it changed the state, save it
        before applying it. NotLeader when this controller does not lead;
        StateStoreError (nothing applied) when the store cannot save."""
        async with self._lock:
            for attempt in range(SAVE_ATTEMPTS):
                if not self.is_leader:
                    raise NotLeader("this controller does not lead")
                result = op(self.state)
                if not result.changed:
                    return result
                try:
                    version = await self.store.save(encode_state(result.state), self.version)
                except StateConflict as exc:
                    log.warning("state changed in the store by another controller; reloading",
                                error=str(exc), attempt=attempt + 1)
                    await self._reload()
                    continue
                self.state, self.version = result.state, version
                for name in result.notify:
                    self._announce(name)
                return result
            raise NotLeader("the stored state keeps changing under this controller "
                            "(another one leads?)")

    def _announce(self, broker_name: str) -> None:
        bs = self.state.get(broker_name)
        if bs is None:
            return
        self.elections += 1
        log.info("master elected" if bs.master_id is not None else "master lost",
                 broker=broker_name, master=bs.master_id, master_epoch=bs.master_epoch,
                 sync_state_set=sorted(bs.sync_state_set))
        if self.config.notify_broker_role_changed and self.notifier is not None:
            self.notifier.notify(bs.view())

    # ---- the scan ----

    def on_connection_closed(self, conn: object) -> None:
        """A connection closed: the replicas whose last heart-beat came over it are
        gone (RocketMQ's onBrokerChannelClose). When one was a master, wake the scan
        to elect now rather than after ``brokerHeartbeatTimeout``."""
        for entry in self.heartbeats.drop_channel(conn):
            bs = self.state.get(entry.broker_name)
            master = bs is not None and bs.master_id == entry.broker_id
            log.info("replica's connection closed", broker=entry.broker_name,
                     broker_id=entry.broker_id, addr=entry.address, master=master)
            if master:
                self._closed_masters.add(entry.broker_name)
                self._wake.set()

    async def _scan_loop(self) -> None:
        while True:
            with trio.move_on_after(self.config.scan_not_active_broker_interval / 1000):
                await self._wake.wait()
            self._wake = trio.Event()
            await self._scan_guard.run(self.scan_once)

    def to_elect(self, now: float) -> list[str]:
        """Take silent replicas out of the liveness table; the broker names that
        need an election: their master went silent or its connection closed, was never heard from in a whole
        timeout since this controller leads, or is gone with a replica back."""
        gone = self.heartbeats.expire(now)
        names, self._closed_masters = self._closed_masters, set()
        for entry in gone:
            bs = self.state.get(entry.broker_name)
            log.info("replica silent", broker=entry.broker_name, broker_id=entry.broker_id,
                     addr=entry.address, master=bs is not None and bs.master_id == entry.broker_id)
            if bs is not None and bs.master_id == entry.broker_id:
                names.add(entry.broker_name)
        if self.leader_since is None:
            return []
        timeout = self.config.broker_heartbeat_timeout / 1000
        for name, bs in self.state.broker_sets.items():
            if bs.master_id is None:
                if not bs.never_elected:
                    names.add(name)
            elif (self.heartbeats.get(name, bs.master_id) is None
                  and now - self.leader_since > timeout):
                names.add(name)
        return sorted(names)

    async def scan_once(self) -> None:
        self.scans += 1
        if not self.is_leader:
            self.heartbeats.expire(trio.current_time())
            self._closed_masters.clear()  # the leader elects; its own table saw the close
            return
        for name in self.to_elect(trio.current_time()):
            unclean = self.config.enable_elect_unclean_master

            def op(state: ControllerState, name: str = name,
                   unclean: bool = unclean) -> Result[MasterView]:
                return elect_master(state, name, None, False, self.liveness(), unclean)

            try:
                await self.change(op)
            except NotLeader:
                return
            except StateStoreError as exc:
                # the store cannot save now (etcd down or cut off): nothing changed;
                # the next scan tries again
                log.warning("election not saved, tried again at the next scan",
                            broker=name, error=str(exc))
                self._closed_masters.add(name)
