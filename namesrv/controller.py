"""NamesrvController: the RPC server plus the liveness scan, as trio tasks.

A failing scan is logged (a traceback once, repeats rate-limited) and the next
period scans again: nothing in the scan can stop the name server.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import structlog
import trio

from acl.binding import signature_binding
from acl.guard import AclFile
from controller.service import ControllerService, open_backend
from namesrv.acl import guard_table, header_gate
from namesrv.config import NamesrvConfig
from namesrv.kv_config import KVConfigManager
from namesrv.metrics import namesrv_registry
from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager
from namesrv.runtime_config import NamesrvConfigProcessor
from protocol.codes import RequestCode
from protocol.config import rewrite_properties
from protocol.trio.connection import RemotingConnection
from protocol.trio.files import write_atomically
from protocol.trio.limits import SharedBudget
from protocol.trio.metrics_http import MetricsServer
from protocol.trio.preauth import NAMESRV_PRE_AUTH_BODY, PreAuth, pre_auth_of
from protocol.trio.server import RemotingServer
from protocol.trio.service import Guard

log = structlog.get_logger("namesrv")


class NamesrvController:
    def __init__(self, config: NamesrvConfig, config_file: str | Path | None = None) -> None:
        self.config = config
        self.config_file = Path(config_file) if config_file is not None else None
        self.routes = RouteInfoManager(
            channel_expired_s=config.broker_channel_expired_time / 1000, deferred_removal=True)
        self._removal_wake = trio.Event()
        self.routes.on_pending_removal = lambda: self._removal_wake.set()
        self.kv = KVConfigManager(config.kv_config_path or None, config.kv_limits())
        self.processor = NamesrvProcessor(self.routes, trio.current_time, config.max_queue_nums,
                                          config.max_register_body_size,
                                          pause=trio.lowlevel.checkpoint,
                                          chunk=config.register_apply_chunk, kv=self.kv,
                                          order_message_enable=config.order_message_enable)
        self._kv_wake = trio.Event()
        self.processor.on_kv_change = lambda: self._kv_wake.set()
        handlers = self.processor.handler_table()
        # RocketMQ 5's controller inside the name server (enableControllerInNamesrv): its
        # requests are served on this port, its scan and notifications run beside ours
        self.controller: ControllerService | None = None
        if config.enable_controller_in_namesrv:
            store, leadership = open_backend(config.controller_config,
                                             f"{config.listen_ip}:{config.listen_port}")
            self.controller = ControllerService(config.controller_config, store, leadership,
                                                serve=False)
            self.controller.processor.handler_table(handlers)
        configs = NamesrvConfigProcessor(self)
        handlers.register(RequestCode.GET_NAMESRV_CONFIG, configs.get_namesrv_config)
        handlers.register(RequestCode.UPDATE_NAMESRV_CONFIG, configs.update_namesrv_config)
        self._config_lock = trio.Lock()
        # plain ACL (aclEnable): every served request is checked (namesrv/acl.py)
        # and a connection not yet authenticated is judged on each header before the
        # body is read, within small limits (protocol/trio/preauth.py)
        self.acl_file: AclFile | None = None
        preauth: PreAuth | None = None
        if config.acl_enable:
            acl_file = self.acl_file = AclFile(self.acl_path())
            handlers = guard_table(handlers, lambda: acl_file.config,
                                   self.processor.record_acl_refusal,
                                   binding=signature_binding(config))
            preauth = pre_auth_of(config, header_gate(lambda: acl_file.config,
                                                      self.processor.record_acl_refusal),
                                  NAMESRV_PRE_AUTH_BODY)
        self.server = RemotingServer(
            handlers,
            config.listen_ip,
            config.listen_port,
            max_frame_size=config.max_frame_size,
            limits=config.connection_limits(),
            budget=SharedBudget(config.max_total_connection_buffer_bytes),
            tls=config.server_tls(), preauth=preauth,
        )
        self.server.on_connection_closed(self._on_connection_closed)
        self.metrics_port: int | None = None  # once served
        self.metrics_server: MetricsServer | None = None
        if config.metrics_port > 0:
            self.metrics_server = MetricsServer(namesrv_registry(self.routes, self.processor),
                                                config.listen_ip, config.metrics_port)
        self._stop = trio.Event()
        self._scan_guard = Guard(log, "scan not active broker")
        self._kv_guard = Guard(log, "persist KV config")

    def acl_path(self) -> Path:
        """aclPlainFile, or plain_acl.yml beside the config file (else in the working dir)."""
        if self.config.acl_plain_file:
            return Path(self.config.acl_plain_file)
        if self.config_file is not None:
            return self.config_file.parent / "plain_acl.yml"
        return Path("plain_acl.yml")

    @property
    def port(self) -> int:
        return self.server.port

    def _on_connection_closed(self, conn: RemotingConnection) -> None:
        self.routes.on_connection_destroyed(conn)
        if self.controller is not None:
            self.controller.on_connection_closed(conn)

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled. Reports the bound port once listening."""
        if self.acl_file is not None:
            await trio.to_thread.run_sync(self.acl_file.load_at_start)
        await trio.to_thread.run_sync(self.kv.load)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(self.server.serve)
            # What start-up loaded (modules, classes, the tables' code) lives as long as
            # the process: out of the cycle collector's full collections, which otherwise
            # walk it all (a 30-40 ms pause while look-ups wait). Large registrations
            # freeze the tables they build the same way (NamesrvProcessor).
            gc.freeze()
            if self.controller is not None:
                self.controller.set_address(f"{self.config.listen_ip}:{port}")
                await nursery.start(self.controller.run)
            nursery.start_soon(self.scan_loop)
            nursery.start_soon(self.removal_loop)
            if self.acl_file is not None:
                nursery.start_soon(self.acl_file.watch, self.config.acl_reload_interval / 1000)
            if self.kv.path is not None:
                nursery.start_soon(self.kv_persist_loop)
            if self.metrics_server is not None:
                self.metrics_port = await nursery.start(self.metrics_server.run)
            log.info("name server started", port=port)
            task_status.started(port)
            await self._stop.wait()
            if self.metrics_server is not None:
                self.metrics_server.stop()
            nursery.cancel_scope.cancel()
        if self.kv.dirty and self.kv.path is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await self._kv_guard.run(self._write_kv, path=str(self.kv.path))

    def request_shutdown(self) -> None:
        self._stop.set()

    async def scan_loop(self) -> None:
        while True:  # the settings read at each period: updateNamesrvConfig changes them
            await trio.sleep(self.config.scan_not_active_broker_interval / 1000)
            await self._scan_guard.run(self.routes.scan_not_active_broker, trio.current_time(),
                                       self.config.broker_channel_expired_time / 1000)

    async def apply_runtime_config(self, changes: dict[str, str]) -> bool:
        """UPDATE_NAMESRV_CONFIG's checked changes (namesrv/runtime_config.py): written
        (atomically, in a worker thread) into the config file the name server was
        started from, then applied. Returns whether they were persisted (False: no
        config file). OSError when the file cannot be written (nothing applied)."""
        async with self._config_lock:
            path = self.config_file
            if path is not None:
                def write() -> None:
                    text = path.read_text()
                    write_atomically(path, rewrite_properties(text, changes).encode())

                await trio.to_thread.run_sync(write)
            self.config.update(changes)
            self.processor.order_message_enable = self.config.order_message_enable
            self.routes.channel_expired_s = self.config.broker_channel_expired_time / 1000
            self.kv.limits = self.config.kv_limits()
            log.info("name server config changed at run time",
                     path=str(path) if path is not None else None, **changes)
            return path is not None

    async def removal_loop(self) -> None:
        """Remove the queue data of brokers gone from a large table in steps,
        with a checkpoint after each: look-ups are answered meanwhile."""
        guard = Guard(log, "remove broker topics")
        while True:
            self._removal_wake = trio.Event()
            if not self.routes.pending_removals:
                await self._removal_wake.wait()
                continue
            await guard.run(self._remove_pending)

    async def kv_persist_loop(self) -> None:
        """Write the KV config's file after changes (RocketMQ's persist on every
        change): every change made while a write runs goes in the next one."""
        while True:
            self._kv_wake = trio.Event()
            if not self.kv.dirty:
                await self._kv_wake.wait()
                continue
            await self._kv_guard.run(self._write_kv, path=str(self.kv.path))

    async def _write_kv(self) -> None:
        data = self.kv.take_snapshot()
        if data is None:
            return
        try:
            await trio.to_thread.run_sync(self.kv.write, data)
        except BaseException:
            self.kv.dirty = True  # not on disk: written again next time
            raise

    async def _remove_pending(self) -> None:
        for _ in self.routes.removal_steps():
            await trio.lowlevel.checkpoint()
