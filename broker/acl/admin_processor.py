"""The broker's ACL admin requests (RocketMQ 4.x's AdminBrokerProcessor ACL part).

- UPDATE_AND_CREATE_ACL_CONFIG (50): create an account or update the fields given;
- DELETE_ACL_CONFIG (51): delete an account;
- GET_BROKER_CLUSTER_ACL_INFO (52): the ACL file's data version (``version``, JSON);
- UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53): replace the global white addresses;
- GET_BROKER_CLUSTER_ACL_CONFIG (54): the white addresses and accounts (RocketMQ's
  AclConfig as JSON; a slave copies its master's file from it).

All are admin-only (acl/plain.py ADMIN_CODES): the guard checks them
before they get here. A change is written to ``plain_acl.yml`` atomically and in
force at once (AclFile.change); a request that cannot be applied is answered
SYSTEM_ERROR with why and changes nothing. Without ``aclEnable`` the broker
has no accounts to manage and says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from acl.admin import AccessConfig, AclAdminError, AclDocument, split_list
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import (
    DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
)
from protocol.trio.connection import HandlerTable, RemotingConnection

if TYPE_CHECKING:
    from acl.guard import AclFile

log = structlog.get_logger("broker.acl.admin")

ACL_DISABLED = "access control is off on this broker (aclEnable=false)"


class AclAdminProcessor:
    def __init__(self, acl_file: AclFile | None, broker_name: str, cluster_name: str,
                 broker_addr: Callable[[], str], now_ms: Callable[[], int] | None = None
                 ) -> None:
        self.acl_file = acl_file
        self.broker_name = broker_name
        self.cluster_name = cluster_name
        self.broker_addr = broker_addr
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.log = log.bind(broker=broker_name)

    def register(self, table: HandlerTable) -> None:
        table.register(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, self.update_and_create)
        table.register(RequestCode.DELETE_ACL_CONFIG, self.delete)
        table.register(RequestCode.GET_BROKER_CLUSTER_ACL_INFO, self.get_version)
        table.register(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, self.update_global_white)
        table.register(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, self.get_config)

    async def _change(self, conn: RemotingConnection, cmd: RemotingCommand, what: str,
                      fn: Callable[[AclDocument], AclDocument]) -> RemotingCommand:
        if self.acl_file is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{what}: {ACL_DISABLED}")
        try:
            doc = await self.acl_file.change(fn)
        except AclAdminError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{what}: {exc}")
        except OSError as exc:
            self.log.warning("ACL file not written", what=what, error=str(exc))
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"{what}: not applied, cannot write the ACL file: "
                                f"{exc.strerror or exc}")
        self.log.info("ACL changed by an admin request", what=what,
                      version=doc.version.counter, access_key=_access_key(cmd),
                      remote=getattr(conn, "remote_addr", "?"))
        return cmd.response(ResponseCode.SUCCESS)

    async def update_and_create(self, conn: RemotingConnection, cmd: RemotingCommand
                                ) -> RemotingCommand:
        what = "UPDATE_AND_CREATE_ACL_CONFIG"
        if self.acl_file is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{what}: {ACL_DISABLED}")
        try:
            cfg = AccessConfig.from_fields(cmd.ext_fields or {})
        except AclAdminError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{what}: {exc}")
        now = self.now_ms()
        return await self._change(conn, cmd, what, lambda doc: doc.with_account(cfg, now))

    async def delete(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        what = "DELETE_ACL_CONFIG"
        try:
            h = DeleteAccessConfigRequestHeader.from_fields(cmd.ext_fields)
        except RemoteProtocolError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{what}: {exc}")
        now = self.now_ms()
        return await self._change(conn, cmd, what,
                                  lambda doc: doc.without_account(h.access_key, now))

    async def update_global_white(self, conn: RemotingConnection, cmd: RemotingCommand
                                  ) -> RemotingCommand:
        what = "UPDATE_GLOBAL_WHITE_ADDRS_CONFIG"
        try:
            h = UpdateGlobalWhiteAddrsConfigRequestHeader.from_fields(cmd.ext_fields)
        except RemoteProtocolError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{what}: {exc}")
        addrs = split_list(h.global_white_addrs) or ()
        now = self.now_ms()
        return await self._change(conn, cmd, what,
                                  lambda doc: doc.with_global_white(addrs, now))

    async def _document(self, cmd: RemotingCommand, what: str
                        ) -> AclDocument | RemotingCommand:
        if self.acl_file is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{what}: {ACL_DISABLED}")
        try:
            return await self.acl_file.document()
        except AclAdminError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{what}: {exc}")

    def _version_header(self, doc: AclDocument) -> dict[str, Any]:
        version = doc.version.to_json()
        name = self.acl_file.path.name if self.acl_file is not None else ""
        return GetBrokerAclConfigResponseHeader(
            version=version, broker_name=self.broker_name, broker_addr=self.broker_addr(),
            cluster_name=self.cluster_name,
            all_acl_file_version=f'{{"{name}":{version}}}').to_fields()

    async def get_version(self, conn: RemotingConnection, cmd: RemotingCommand
                          ) -> RemotingCommand:
        doc = await self._document(cmd, "GET_BROKER_CLUSTER_ACL_INFO")
        if isinstance(doc, RemotingCommand):
            return doc
        return cmd.response(ResponseCode.SUCCESS, ext_fields=self._version_header(doc))

    async def get_config(self, conn: RemotingConnection, cmd: RemotingCommand
                         ) -> RemotingCommand:
        doc = await self._document(cmd, "GET_BROKER_CLUSTER_ACL_CONFIG")
        if isinstance(doc, RemotingCommand):
            return doc
        return cmd.response(ResponseCode.SUCCESS, ext_fields=self._version_header(doc),
                            body=cmd.encode_body(doc.to_acl_config()))


def _access_key(cmd: RemotingCommand) -> str | None:
    """The requester's account (the signature's AccessKey), for the log."""
    value = (cmd.ext_fields or {}).get("AccessKey")
    return value if isinstance(value, str) else None
