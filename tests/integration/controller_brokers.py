"""Fake brokers for the controller's integration tests: a broker's controller-mode
side only (ids, registration, heart-beats, role-change notifications), on the wire."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import (
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    GetNextBrokerIdRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from protocol.trio.client import RemotingClient
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.errors import RemotingError
from protocol.trio.server import RemotingServer


@dataclass
class FakeBroker:
    """A broker's controller-mode side, no more: it listens for
    NOTIFY_BROKER_ROLE_CHANGED and heart-beats while ``beating``."""

    broker_id: int
    server: RemotingServer | None = None
    notes: list[tuple[NotifyBrokerRoleChangedRequestHeader, SyncStateSet]] = field(
        default_factory=list)
    beating: bool = True
    beats: int = 0

    @property
    def addr(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.port}"

    def on_notify(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        header = NotifyBrokerRoleChangedRequestHeader.from_fields(cmd.ext_fields)
        self.notes.append((header, SyncStateSet.from_dict(cmd.decode_body())))
        return cmd.response(ResponseCode.SUCCESS)

    async def serve(self, nursery: trio.Nursery) -> None:
        table = HandlerTable()
        table.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self.on_notify)
        self.server = RemotingServer(table, "127.0.0.1", 0)
        await nursery.start(self.server.serve)

    async def heartbeat_loop(self, client: RemotingClient, controllers: list[str]) -> None:
        """Heart-beat every controller (as RocketMQ's brokers do) every 100 ms."""
        while True:
            if self.beating:
                header = BrokerHeartbeatRequestHeader(
                    cluster_name="c", broker_addr=self.addr, broker_name="b",
                    broker_id=self.broker_id, epoch=1, max_offset=100 * self.broker_id)
                for controller in controllers:
                    try:
                        await client.invoke_oneway(controller, RemotingCommand.request(
                            RequestCode.BROKER_HEARTBEAT, header.to_fields()))
                        self.beats += 1
                    except (OSError, RemotingError):
                        pass  # that controller is down: the others still hear
            await trio.sleep(0.1)


async def ask(client: RemotingClient, controller: str, code: int,
              fields: dict[str, Any] | None = None, body: Any = None) -> RemotingCommand:
    cmd = RemotingCommand.request(code, fields or {})
    if body is not None:
        cmd.body = cmd.encode_body(body)
    return await client.invoke(controller, cmd, 5)


async def join(client: RemotingClient, controller: str, broker: FakeBroker) -> None:
    """A broker's start in controller mode: next id, apply for it, register."""
    r = await ask(client, controller, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                  GetNextBrokerIdRequestHeader(cluster_name="c", broker_name="b").to_fields())
    assert int(r.ext_fields["nextBrokerId"]) == broker.broker_id, r
    r = await ask(client, controller, RequestCode.CONTROLLER_APPLY_BROKER_ID,
                  ApplyBrokerIdRequestHeader(
                      cluster_name="c", broker_name="b", applied_broker_id=broker.broker_id,
                      register_check_code=f"{broker.addr};{int(time.time() * 1000)}").to_fields())
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await ask(client, controller, RequestCode.CONTROLLER_REGISTER_BROKER,
                  RegisterBrokerToControllerRequestHeader(
                      cluster_name="c", broker_name="b", broker_id=broker.broker_id,
                      broker_address=broker.addr).to_fields())
    assert r.code == ResponseCode.SUCCESS, r.remark
