"""BrokerOuterAPI: the broker's requests to name servers.

Registration never raises for one name server's sake: whatever fails for an
address (connection, timeout, a refusal, a body the frame cannot carry, a
bug) is logged, rate-limited, and the next period tries again.
"""

from __future__ import annotations

import zlib

import structlog
import trio

from broker.config import BrokerConfig
from protocol.body import compress_body, pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from protocol.names import shown
from protocol.trio.client import RemotingClient
from protocol.trio.errors import RemotingError
from protocol.trio.service import Guard, describe

FRAME_SLACK = 64 * 1024  # room for the command's header fields around the body
COMPRESS_ABOVE = 1024 * 1024  # registration bodies larger than this go compressed


class BrokerOuterAPI:
    def __init__(self, config: BrokerConfig, client: RemotingClient) -> None:
        self.config = config
        self.client = client
        self.log = structlog.get_logger("broker.outer").bind(broker=config.broker_name)
        self.guard = Guard(self.log, "register")
        # a slave's master HA address, from the latest registration answer
        self.master_ha_addr: str | None = None
        self.master_addr: str | None = None

    async def register_broker_all(self, topic_wire: dict[str, object],
                                  ha_server_addr: str | None = None) -> int:
        """Register with every name server at once; returns how many accepted.

        ``ha_server_addr`` is advertised only when given: a broker whose HA
        service does not listen (yet) has none. Raises only when the request
        cannot be built (``topic_wire`` does not pack); the caller logs that and
        retries next period."""
        header = RegisterBrokerRequestHeader(
            broker_name=self.config.broker_name,
            broker_addr=self.config.broker_addr,
            cluster_name=self.config.broker_cluster_name,
            broker_id=self.config.broker_id,
            ha_server_addr=ha_server_addr,
        )
        body = pack_body(topic_wire)
        if self.config.compressed_register or len(body) > COMPRESS_ABOVE:
            # RocketMQ's compressed registration: retry and DLQ topic tables shrink ~10x
            body = compress_body(body)
            header.compressed = True
            header.body_crc32 = zlib.crc32(body) & 0x7FFFFFFF
        fields = header.to_fields()
        limit = self.config.max_frame_size - FRAME_SLACK
        if len(body) > limit:
            table = topic_wire.get("topicConfigTable")
            names = sorted(table, key=len, reverse=True)[:3] if isinstance(table, dict) else []
            self.guard.note("registration too large for a frame, not sent", "too-large",
                            log_level="error", bytes=len(body), limit=limit,
                            topics=len(table) if isinstance(table, dict) else None,
                            longest_topics=[shown(n) for n in names])
            return 0
        ok = 0

        async def one(addr: str) -> None:
            nonlocal ok
            cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(fields), body)
            try:
                resp = await self.client.invoke(
                    addr, cmd, self.config.register_broker_timeout_ms / 1000
                )
            except RemotingError as exc:
                self.guard.note("register to name server failed", ("remoting", addr),
                                namesrv=addr, error=describe(exc))
                return
            except Exception as exc:  # e.g. the frame cannot carry it: logged, retried
                self.guard.failed(exc, "register to name server failed", namesrv=addr)
                return
            if resp.code == ResponseCode.SUCCESS:
                ok += 1
                try:
                    answer = RegisterBrokerResponseHeader.from_fields(resp.ext_fields)
                except RemoteProtocolError as exc:
                    self.guard.note("bad registration answer", ("answer", addr), namesrv=addr,
                                    error=str(exc))
                else:
                    if answer.ha_server_addr:
                        self.master_ha_addr = answer.ha_server_addr
                    if answer.master_addr:
                        self.master_addr = answer.master_addr
            else:
                self.guard.note("name server refused registration", ("refused", addr, resp.code),
                                namesrv=addr, code=resp.code, remark=shown(resp.remark or "", 200))

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
            except Exception as exc:
                self.log.warning("unregister failed", namesrv=addr, error=describe(exc))

        async with trio.open_nursery() as nursery:
            for addr in self.config.namesrv_addr_list:
                nursery.start_soon(one, addr)
