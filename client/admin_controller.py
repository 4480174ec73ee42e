"""mqadmin's controller-mode commands (RocketMQ 5's names, option letters and output):
getControllerMetaData, getSyncStateSet, electMaster (asking a controller, ``-a``) and
getBrokerEpoch (asking the brokers, found through the name server).

``ControllerAdmin`` is the API under them. The commands are registered on
``client.admin_cli.cli`` by admin_cli (``COMMANDS``); this module does not import
admin_cli, so it adds no import cycle.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import click
import trio

from client.admin import MQAdmin, MQAdminError
from client.config import ClientConfig
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import (
    BrokerReplicasInfo,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    EpochEntryCache,
)
from protocol.errors import ProtocolError
from protocol.namesrv_addr import NAMESRV_ADDR_ENV
from protocol.trio.client import RemotingClient
from protocol.trio.errors import RemotingError

DEFAULT_TIMEOUT = 5.0


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


class ControllerAdmin:
    """Requests to controllers and to brokers about controller mode. Use as
    ``async with ControllerAdmin() as admin``. Raises MQAdminError."""

    def __init__(self, config: ClientConfig | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        config = config or ClientConfig()
        self.timeout = timeout
        self._client = RemotingClient(credentials=config.credentials, tls=config.client_tls())

    async def __aenter__(self) -> ControllerAdmin:
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._client.__aexit__(*exc)

    async def _ask(self, addr: str, cmd: RemotingCommand, what: str,
                   accept: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        try:
            resp = await self._client.invoke(addr, cmd, self.timeout)
        except RemotingError as exc:
            raise MQAdminError(f"{addr}: {exc}") from exc
        if resp.code not in accept:
            raise MQAdminError(f"{what} on {addr} failed: {_code_name(resp.code)}: "
                               f"{resp.remark or ''}".rstrip(": "))
        return resp

    async def metadata(self, controller: str) -> dict[str, Any]:
        """CONTROLLER_GET_METADATA_INFO: who leads the controllers."""
        resp = await self._ask(controller, RemotingCommand.request(
            RequestCode.CONTROLLER_GET_METADATA_INFO), "getControllerMetaData")
        return dict(resp.ext_fields)

    async def sync_state_data(self, controller: str, broker_names: list[str]
                              ) -> BrokerReplicasInfo:
        """CONTROLLER_GET_SYNC_STATE_DATA of ``broker_names``."""
        cmd = RemotingCommand.request(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA)
        cmd.body = cmd.encode_body(list(broker_names))
        resp = await self._ask(controller, cmd, "getSyncStateSet")
        try:
            return BrokerReplicasInfo.from_dict(resp.decode_body())
        except ProtocolError as exc:
            raise MQAdminError(f"{controller}: unreadable answer: {exc}") from None

    async def broker_id_of(self, controller: str, broker_name: str, address: str) -> int:
        """The id the controller knows the replica at ``address`` of ``broker_name`` by."""
        info = (await self.sync_state_data(controller, [broker_name])).replicas_info_table
        replicas = info.get(broker_name)
        if replicas is None:
            raise MQAdminError(f"broker name {broker_name} is unknown to {controller}")
        for r in (*replicas.in_sync_replicas, *replicas.not_in_sync_replicas):
            if r.broker_address == address:
                return r.broker_id
        raise MQAdminError(f"no replica of {broker_name} at {address} on {controller}")

    async def elect_master(self, controller: str, cluster: str, broker_name: str,
                           broker_id: int) -> tuple[dict[str, Any], ElectMasterResponseBody | None]:
        """CONTROLLER_ELECT_MASTER designating ``broker_id``: the answer's header and body."""
        header = ElectMasterRequestHeader(broker_name=broker_name, cluster_name=cluster,
                                          broker_id=broker_id, designate_elect=True)
        resp = await self._ask(controller, RemotingCommand.request(
            RequestCode.CONTROLLER_ELECT_MASTER, header.to_fields()), "electMaster")
        body = None
        if resp.body:
            try:
                body = ElectMasterResponseBody.from_dict(resp.decode_body())
            except ProtocolError as exc:
                raise MQAdminError(f"{controller}: unreadable answer: {exc}") from None
        return dict(resp.ext_fields), body

    async def broker_epoch(self, broker: str) -> EpochEntryCache:
        """GET_BROKER_EPOCH_CACHE: a broker's epoch entries."""
        resp = await self._ask(broker, RemotingCommand.request(
            RequestCode.GET_BROKER_EPOCH_CACHE), "getBrokerEpoch")
        try:
            return EpochEntryCache.from_dict(resp.decode_body())
        except ProtocolError as exc:
            raise MQAdminError(f"{broker}: unreadable answer: {exc}") from None


# ---- the commands ----------------------------------------------------------------------


def _config() -> ClientConfig:
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return obj if isinstance(obj, ClientConfig) else ClientConfig()


def _run(fn: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return trio.run(fn)
    except MQAdminError as exc:
        raise click.ClickException(str(exc)) from None
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        if isinstance(leaf, MQAdminError | click.ClickException):
            raise click.ClickException(str(leaf)) from None
        raise


def _echo_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=True))


def _line(key: str, value: Any) -> None:
    click.echo(f"#{key:<24}{'' if value is None else value}")


controller_option = click.option("-a", "--controllerAddress", "controller", required=True,
                                  help="The controller's address (host:port).")
json_option = click.option("--json", "as_json", is_flag=True, default=False,
                           help="Print one JSON document instead of the lines.")


def _names(names: str | None) -> list[str]:
    return [n.strip() for n in (names or "").split(",") if n.strip()]


async def _cluster_broker_names(namesrv: str | None, cluster: str) -> list[str]:
    if not namesrv:
        raise click.UsageError(f"-c needs the name server (-n or {NAMESRV_ADDR_ENV})")
    async with MQAdmin(namesrv, config=_config()) as admin:
        names = (await admin.cluster_info())["clusterAddrTable"].get(cluster)
    if not names:
        raise MQAdminError(f"cluster {cluster!r} has no broker registered")
    return sorted(names)


@click.command("getControllerMetaData")
@controller_option
@json_option
def get_controller_metadata(controller: str, as_json: bool) -> None:
    """Show which controller leads (RocketMQ 5's controller mode)."""
    async def go() -> dict[str, Any]:
        async with ControllerAdmin(_config()) as admin:
            return await admin.metadata(controller)

    meta = _run(go)
    if as_json:
        _echo_json(meta)
        return
    _line("ControllerGroup", meta.get("group"))
    _line("ControllerLeaderId", meta.get("controllerLeaderId"))
    _line("ControllerLeaderAddress", meta.get("controllerLeaderAddress"))
    _line("IsLeader", meta.get("isLeader"))
    for peer in str(meta.get("peers") or "").split(";"):
        if peer:
            _line("Peer", peer)


@click.command("getSyncStateSet")
@controller_option
@click.option("-b", "--brokerName", "broker_names", default=None,
              help="Broker names, comma-separated.")
@click.option("-c", "--clusterName", "cluster", default=None,
              help="Every broker name of this cluster (found through the name server).")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, envvar=NAMESRV_ADDR_ENV,
              help="Name server address list (with -c).")
@json_option
def get_sync_state_set(controller: str, broker_names: str | None, cluster: str | None,
                       namesrv: str | None, as_json: bool) -> None:
    """Show the master, epochs and SyncStateSet of broker names."""
    if not broker_names and not cluster:
        raise click.UsageError("give -b brokerName or -c clusterName")

    async def go() -> BrokerReplicasInfo:
        names = _names(broker_names) or await _cluster_broker_names(namesrv, cluster or "")
        async with ControllerAdmin(_config()) as admin:
            return await admin.sync_state_data(controller, names)

    info = _run(go)
    if as_json:
        _echo_json(info.to_dict()["replicasInfoTable"])
        return
    for name, r in sorted(info.replicas_info_table.items()):
        _line("brokerName", name)
        _line("MasterBrokerId", r.master_broker_id)
        _line("MasterAddr", r.master_address)
        _line("MasterEpoch", r.master_epoch)
        _line("SyncStateSetEpoch", r.sync_state_set_epoch)
        _line("SyncStateSetNums", len(r.in_sync_replicas))
        for label, replicas in (("InSyncReplica", r.in_sync_replicas),
                                ("NotInSyncReplica", r.not_in_sync_replicas)):
            for x in replicas:
                click.echo(f"{label}:\tbrokerId={x.broker_id} address={x.broker_address} "
                           f"alive={str(x.alive).lower()}")
        click.echo("")


@click.command("electMaster")
@controller_option
@click.option("-b", "--brokerAddress", "broker", required=True,
              help="The broker to become master: its address, or its broker id.")
@click.option("-n", "--brokerName", "broker_name", required=True, help="Its broker name.")
@click.option("-c", "--clusterName", "cluster", required=True, help="Its cluster.")
@json_option
def elect_master(controller: str, broker: str, broker_name: str, cluster: str,
                 as_json: bool) -> None:
    """Make a replica of a broker name its master (an alive SyncStateSet member)."""
    async def go() -> tuple[dict[str, Any], ElectMasterResponseBody | None]:
        async with ControllerAdmin(_config()) as admin:
            broker_id = (int(broker) if broker.isdigit()
                         else await admin.broker_id_of(controller, broker_name, broker))
            return await admin.elect_master(controller, cluster, broker_name, broker_id)

    header, body = _run(go)
    if as_json:
        _echo_json({"header": header, "body": body.to_dict() if body is not None else None})
        return
    _line("clusterName", cluster)
    _line("brokerName", broker_name)
    _line("masterBrokerId", header.get("masterBrokerId"))
    _line("brokerMasterAddr", header.get("masterAddress"))
    _line("masterEpoch", header.get("masterEpoch"))
    _line("syncStateSetEpoch", header.get("syncStateSetEpoch"))
    if body is not None:
        if body.broker_member_group is not None:
            for broker_id, addr in sorted(body.broker_member_group.broker_addrs.items()):
                _line("brokerMember", f"{broker_id}={addr}")
        _line("syncStateSet", ",".join(str(i) for i in sorted(body.sync_state_set)))


@click.command("getBrokerEpoch")
@click.option("-n", "--namesrvAddr", "namesrv", required=True, envvar=NAMESRV_ADDR_ENV,
              show_envvar=True, help="Name server address list.")
@click.option("-b", "--brokerName", "broker_name", default=None, help="One broker name.")
@click.option("-c", "--clusterName", "cluster", default=None,
              help="Every broker name of this cluster.")
@json_option
def get_broker_epoch(namesrv: str, broker_name: str | None, cluster: str | None,
                     as_json: bool) -> None:
    """Show the epoch entries of every replica of broker names."""
    if not broker_name and not cluster:
        raise click.UsageError("give -b brokerName or -c clusterName")

    async def go() -> list[tuple[str, EpochEntryCache | str]]:
        async with MQAdmin(namesrv, config=_config()) as admin:
            info = await admin.cluster_info()
        names = [broker_name] if broker_name else sorted(
            info["clusterAddrTable"].get(cluster, []))
        addrs = []
        for name in names:
            data = info["brokerAddrTable"].get(name)
            if data is None:
                raise MQAdminError(f"broker name {name} is not registered on the name server")
            addrs += [a for _, a in sorted(data.broker_addrs.items())]
        out: list[tuple[str, EpochEntryCache | str]] = []
        async with ControllerAdmin(_config()) as admin:
            for addr in addrs:
                try:
                    out.append((addr, await admin.broker_epoch(addr)))
                except MQAdminError as exc:
                    out.append((addr, str(exc)))
        return out

    results = _run(go)
    if as_json:
        _echo_json({addr: r.to_dict() if isinstance(r, EpochEntryCache) else {"error": r}
                    for addr, r in results})
        return
    for addr, r in results:
        _line("brokerAddr", addr)
        if not isinstance(r, EpochEntryCache):
            _line("error", r)
            continue
        _line("clusterName", r.cluster_name)
        _line("brokerName", r.broker_name)
        _line("brokerId", r.broker_id)
        for e in r.epoch_list:
            click.echo(f"#Epoch: epoch={e.epoch} startOffset={e.start_offset} "
                       f"endOffset={e.end_offset}")
        _line("maxOffset", r.max_offset)
        click.echo("")


COMMANDS = (get_controller_metadata, get_sync_state_set, elect_master, get_broker_epoch)
