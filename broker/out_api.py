"""BrokerOuterAPI: the broker's requests to name servers."""

from __future__ import annotations

import structlog
import trio

from broker.config import BrokerConfig
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from protocol.trio.client import RemotingClient
from protocol.trio.errors import RemotingError


class BrokerOuterAPI:
    def __init__(self, config: BrokerConfig, client: RemotingClient) -> None:
        self.config = config
        self.client = client
        self.log = structlog.get_logger("broker.outer").bind(broker=config.broker_name)

    def _ha_addr(self) -> str:
        return f"{self.config.broker_ip1}:{self.config.listen_port + 1}"

    async def register_broker_all(self, topic_wire: dict[str, object]) -> int:
        """Register with every name server at once; returns how many accepted."""
        header = RegisterBrokerRequestHeader(
            broker_name=self.config.broker_name,
            broker_addr=self.config.broker_addr,
            cluster_name=self.config.broker_cluster_name,
            ha_server_addr=self._ha_addr(),
            broker_id=self.config.broker_id,
        ).to_fields()
        body = pack_body(topic_wire)
        ok = 0

        async def one(addr: str) -> None:
            nonlocal ok
            cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(header), body)
            try:
                resp = await self.client.invoke(
                    addr, cmd, self.config.register_broker_timeout_ms / 1000
                )
            except RemotingError as exc:
                self.log.warning("register to name server failed", namesrv=addr, error=str(exc))
                return
            if resp.code == ResponseCode.SUCCESS:
                ok += 1
            else:
                self.log.warning("name server refused registration", namesrv=addr,
                                 code=resp.code, remark=resp.remark)

        async with trio.open_nursery() as nursery:
            for addr in self.config.namesrv_addr_list:
                nursery.start_soon(one, addr)
        return ok

    async def unregister_broker_all(self) -> None:
        header = UnRegisterBrokerRequestHeader(
            broker_name=self.config.broker_name,
            broker_addr=self.config.broker_addr,
            cluster_name=self.config.broker_cluster_name,
            broker_id=self.config.broker_id,
        ).to_fields()

        async def one(addr: str) -> None:
            cmd = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(header))
            try:
                await self.client.invoke(addr, cmd, 3.0)
                self.log.info("unregistered from name server", namesrv=addr)
            except RemotingError as exc:
                self.log.warning("unregister failed", namesrv=addr, error=str(exc))

        async with trio.open_nursery() as nursery:
            for addr in self.config.namesrv_addr_list:
                nursery.start_soon(one, addr)
