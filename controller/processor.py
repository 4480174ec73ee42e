"""The controller's request handlers: decode the header and body (protocol/controller.py),
ask the service (a change is saved before the answer), encode the answer.

``STATUS_CODES`` is the one table from the state machine's ``Status`` to RocketMQ's
response codes. A controller that does not lead answers CONTROLLER_NOT_LEADER to
everything but BROKER_HEARTBEAT (every controller keeps its own liveness table),
CONTROLLER_GET_METADATA_INFO and GET_CONTROLLER_CONFIG; a change the store could
not save is answered SYSTEM_ERROR and not applied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
import trio

from controller.replicas import (
    ControllerState,
    MasterView,
    Result,
    Status,
    alter_sync_state_set,
    apply_broker_id,
    clean_broker_data,
    elect_master,
    next_broker_id,
    register_broker,
    replica_info,
)
from controller.runtime_config import check_changes
from controller.state_store import StateStoreError
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.config import ConfigError, properties_body
from protocol.controller import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader,
    BrokerHeartbeatRequestHeader,
    BrokerMemberGroup,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
    broker_names_body,
    parse_id_list,
)
from protocol.trio.connection import HandlerTable, RemotingConnection

if TYPE_CHECKING:
    from controller.service import ControllerService

log = structlog.get_logger("controller.processor")

T = TypeVar("T")

STATUS_CODES: dict[Status, int] = {
    s: (ResponseCode.SUCCESS if s is Status.SUCCESS else ResponseCode[f"CONTROLLER_{s.name}"])
    for s in Status
}
# requests any controller answers, leading or not
ANSWERED_BY_FOLLOWERS = frozenset({RequestCode.BROKER_HEARTBEAT,
                                   RequestCode.CONTROLLER_GET_METADATA_INFO,
                                   RequestCode.GET_CONTROLLER_CONFIG})


NOT_PERSISTED = ("applied, but not persisted: this controller has no file to write its "
                 "settings to, so the change holds until it stops")


class NotLeader(Exception):
    """This controller does not lead (now, or any more): the requester asks another."""


def _view_fields(view: MasterView | None) -> dict[str, Any]:
    if view is None:
        return {}
    return {"master_broker_id": view.master_id, "master_address": view.master_address,
            "master_epoch": view.master_epoch}


class ControllerProcessor:
    def __init__(self, service: ControllerService) -> None:
        self.service = service
        self.not_leader_answers = 0

    def handler_table(self, table: HandlerTable | None = None) -> HandlerTable:
        """The controller's handlers, in ``table`` (a name server's) or a new one."""
        table = table if table is not None else HandlerTable()
        table.register(RequestCode.BROKER_HEARTBEAT, self.broker_heartbeat)
        table.register(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, self.alter_sync_state_set)
        table.register(RequestCode.CONTROLLER_ELECT_MASTER, self.elect_master)
        table.register(RequestCode.CONTROLLER_REGISTER_BROKER, self.register_broker)
        table.register(RequestCode.CONTROLLER_GET_REPLICA_INFO, self.get_replica_info)
        table.register(RequestCode.CONTROLLER_GET_METADATA_INFO, self.get_metadata_info)
        table.register(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, self.get_sync_state_data)
        table.register(RequestCode.UPDATE_CONTROLLER_CONFIG, self.update_controller_config)
        table.register(RequestCode.GET_CONTROLLER_CONFIG, self.get_controller_config)
        table.register(RequestCode.CLEAN_BROKER_DATA, self.clean_broker_data)
        table.register(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, self.get_next_broker_id)
        table.register(RequestCode.CONTROLLER_APPLY_BROKER_ID, self.apply_broker_id)
        return table

    # ---- helpers ----

    def _not_leader(self, cmd: RemotingCommand, why: str = "") -> RemotingCommand:
        self.not_leader_answers += 1
        return cmd.response(ResponseCode.CONTROLLER_NOT_LEADER,
                            why or "this controller does not lead; ask the leader "
                                   "(CONTROLLER_GET_METADATA_INFO)")

    async def _change(self, cmd: RemotingCommand,
                      op: Callable[[ControllerState], Result[T]],
                      answer: Callable[[Result[T]], RemotingCommand]) -> RemotingCommand:
        try:
            result = await self.service.change(op)
        except NotLeader as exc:
            return self._not_leader(cmd, str(exc))
        except StateStoreError as exc:
            log.error("controller state not saved", code=RequestCode(cmd.code).name,
                      error=str(exc))
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"the controller's state could not be saved, nothing "
                                f"changed: {exc}")
        return answer(result)

    def _respond(self, cmd: RemotingCommand, result: Result[Any], fields: dict[str, Any],
                 body: Any = None) -> RemotingCommand:
        response = cmd.response(STATUS_CODES[result.status], result.remark, fields)
        if body is not None:
            response.body = cmd.encode_body(body)
        return response

    # ---- heart-beats ----

    def broker_heartbeat(self, conn: RemotingConnection, cmd: RemotingCommand
                         ) -> RemotingCommand:
        h = BrokerHeartbeatRequestHeader.from_fields(cmd.ext_fields)
        if h.broker_id is None:  # no id applied yet: nothing to elect it by
            return cmd.response(ResponseCode.SUCCESS)
        ok = self.service.heartbeats.beat(
            trio.current_time(), h.cluster_name, h.broker_name, h.broker_id, h.broker_addr,
            epoch=h.epoch, max_offset=h.max_offset, confirm_offset=h.confirm_offset,
            timeout_ms=h.heartbeat_timeout_mills, election_priority=h.election_priority,
            channel=conn)
        if not ok:
            return cmd.response(ResponseCode.SYSTEM_BUSY,
                                "the controller's liveness table is full "
                                "(controllerMaxHeartbeatEntries)")
        return cmd.response(ResponseCode.SUCCESS)

    # ---- broker ids and registration ----

    def get_next_broker_id(self, conn: RemotingConnection, cmd: RemotingCommand
                           ) -> RemotingCommand:
        h = GetNextBrokerIdRequestHeader.from_fields(cmd.ext_fields)
        if not self.service.is_leader:
            return self._not_leader(cmd)
        nxt = next_broker_id(self.service.state, h.broker_name)
        return cmd.response(ResponseCode.SUCCESS, None, GetNextBrokerIdResponseHeader(
            h.cluster_name, h.broker_name, nxt).to_fields())

    async def apply_broker_id(self, conn: RemotingConnection, cmd: RemotingCommand
                              ) -> RemotingCommand:
        h = ApplyBrokerIdRequestHeader.from_fields(cmd.ext_fields)
        limits = self.service.limits

        def answer(r: Result[None]) -> RemotingCommand:
            return self._respond(cmd, r, ApplyBrokerIdResponseHeader(
                h.cluster_name, h.broker_name).to_fields())

        return await self._change(cmd, lambda s: apply_broker_id(
            s, h.cluster_name, h.broker_name, h.applied_broker_id, h.register_check_code,
            limits), answer)

    async def register_broker(self, conn: RemotingConnection, cmd: RemotingCommand
                              ) -> RemotingCommand:
        h = RegisterBrokerToControllerRequestHeader.from_fields(cmd.ext_fields)

        def answer(r: Result[MasterView]) -> RemotingCommand:
            v = r.value
            fields = RegisterBrokerToControllerResponseHeader(
                h.cluster_name, h.broker_name,
                **_view_fields(v),
                sync_state_set_epoch=v.sync_state_set_epoch if v is not None else None,
            ).to_fields()
            body = (SyncStateSet(v.sync_state_set, v.sync_state_set_epoch).to_dict()
                    if v is not None else None)
            return self._respond(cmd, r, fields, body)

        return await self._change(cmd, lambda s: register_broker(
            s, h.cluster_name, h.broker_name, h.broker_id, h.broker_address,
            self.service.liveness()), answer)

    # ---- the SyncStateSet and elections ----

    async def alter_sync_state_set(self, conn: RemotingConnection, cmd: RemotingCommand
                                   ) -> RemotingCommand:
        h = AlterSyncStateSetRequestHeader.from_fields(cmd.ext_fields)
        wanted = SyncStateSet.from_dict(cmd.decode_body())

        def answer(r: Result[MasterView]) -> RemotingCommand:
            v = r.value
            if v is None:
                return self._respond(cmd, r, {})
            return self._respond(cmd, r, AlterSyncStateSetResponseHeader(
                v.sync_state_set_epoch).to_fields(),
                SyncStateSet(v.sync_state_set, v.sync_state_set_epoch).to_dict())

        return await self._change(cmd, lambda s: alter_sync_state_set(
            s, h.broker_name, h.master_broker_id, h.master_epoch, wanted.sync_state_set,
            wanted.sync_state_set_epoch, self.service.liveness()), answer)

    async def elect_master(self, conn: RemotingConnection, cmd: RemotingCommand
                           ) -> RemotingCommand:
        h = ElectMasterRequestHeader.from_fields(cmd.ext_fields)
        unclean = self.service.config.enable_elect_unclean_master

        def answer(r: Result[MasterView]) -> RemotingCommand:
            v = r.value
            if v is None:
                return self._respond(cmd, r, {})
            fields = ElectMasterResponseHeader(
                **_view_fields(v), sync_state_set_epoch=v.sync_state_set_epoch).to_fields()
            body = ElectMasterResponseBody(
                BrokerMemberGroup(v.cluster, v.broker_name, dict(v.addresses)),
                v.sync_state_set)
            return self._respond(cmd, r, fields, body.to_dict())

        if h.designate_elect and h.broker_id is None:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                "designateElect needs the brokerId to elect")
        return await self._change(cmd, lambda s: elect_master(
            s, h.broker_name, h.broker_id, h.designate_elect, self.service.liveness(),
            unclean), answer)

    async def clean_broker_data(self, conn: RemotingConnection, cmd: RemotingCommand
                                ) -> RemotingCommand:
        h = CleanControllerBrokerDataRequestHeader.from_fields(cmd.ext_fields)
        ids = parse_id_list(h.broker_controller_ids_to_clean)

        def answer(r: Result[None]) -> RemotingCommand:
            if r.ok:
                self.service.heartbeats.forget(h.broker_name, set(ids) or None)
                log.info("broker data cleaned", broker=h.broker_name, broker_ids=ids or "all",
                         peer=getattr(conn, "remote_addr", "?"))
            return self._respond(cmd, r, {})

        return await self._change(cmd, lambda s: clean_broker_data(
            s, h.cluster_name, h.broker_name, ids, h.is_clean_living_broker,
            self.service.liveness()), answer)

    # ---- look-ups ----

    def get_replica_info(self, conn: RemotingConnection, cmd: RemotingCommand
                         ) -> RemotingCommand:
        h = GetReplicaInfoRequestHeader.from_fields(cmd.ext_fields)
        if not self.service.is_leader:
            return self._not_leader(cmd)
        r = replica_info(self.service.state, h.broker_name)
        v = r.value
        body = SyncStateSet(v.sync_state_set, v.sync_state_set_epoch).to_dict() if v else None
        return self._respond(cmd, r, GetReplicaInfoResponseHeader(**_view_fields(v)).to_fields(),
                             body)

    def get_sync_state_data(self, conn: RemotingConnection, cmd: RemotingCommand
                            ) -> RemotingCommand:
        names = broker_names_body(cmd.decode_body())
        if not self.service.is_leader:
            return self._not_leader(cmd)
        live = self.service.liveness()
        table: dict[str, ReplicasInfo] = {}
        for name in names:
            bs = self.service.state.get(name)
            if bs is None:
                continue
            ins: list[ReplicaIdentity] = []
            outs: list[ReplicaIdentity] = []
            for broker_id, replica in sorted(bs.replicas.items()):
                ident = ReplicaIdentity(name, broker_id, replica.address,
                                        live.live_info(name, broker_id) is not None)
                (ins if broker_id in bs.sync_state_set else outs).append(ident)
            table[name] = ReplicasInfo(bs.master_id, bs.address(bs.master_id), bs.master_epoch,
                                       bs.sync_state_set_epoch, tuple(ins), tuple(outs))
        response = cmd.response(ResponseCode.SUCCESS)
        response.body = cmd.encode_body(BrokerReplicasInfo(table).to_dict())
        return response

    def get_metadata_info(self, conn: RemotingConnection, cmd: RemotingCommand
                          ) -> RemotingCommand:
        svc = self.service
        leading = svc.is_leader
        addr = svc.address
        header = GetMetaDataResponseHeader(
            group=svc.config.controller_type, controller_leader_id=addr if leading else None,
            controller_leader_address=addr if leading else None, is_leader=leading,
            peers=addr)
        return cmd.response(ResponseCode.SUCCESS, None, header.to_fields())

    # ---- config ----

    def get_controller_config(self, conn: RemotingConnection, cmd: RemotingCommand
                              ) -> RemotingCommand:
        text = self.service.config.render() + "\n"
        return cmd.response(ResponseCode.SUCCESS, body=text.encode())

    async def update_controller_config(self, conn: RemotingConnection, cmd: RemotingCommand
                                       ) -> RemotingCommand:
        """Checked (nothing applied on a bad key or value), written to the
        controller's config file or overlay, then applied and answered."""
        try:
            changes = check_changes(self.service.config, properties_body(cmd.body))
        except ConfigError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"UPDATE_CONTROLLER_CONFIG: {exc}")
        try:
            written = await self.service.apply_runtime_config(changes)
        except OSError as exc:
            log.error("controller config change not written", path=str(
                self.service.settings_file), error=str(exc))
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"UPDATE_CONTROLLER_CONFIG: not applied, cannot write "
                                f"{self.service.settings_file}: {exc}")
        return cmd.response(ResponseCode.SUCCESS, None if written else NOT_PERSISTED)
