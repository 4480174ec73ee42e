"""Request handlers of the name server, keyed by request code."""

from __future__ import annotations

import zlib
from collections.abc import Callable

from namesrv.route_info import RouteInfoManager
from protocol.body import decompress_body, pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import (
    DeleteTopicRequestHeader,
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from protocol.names import shown
from protocol.route import DEFAULT_MAX_QUEUE_NUMS, DataVersion, TopicConfig, topic_config_problem
from protocol.trio.connection import HandlerTable, RemotingConnection


class NamesrvProcessor:
    """Handlers over one RouteInfoManager; ``clock`` gives seconds (trio time)."""

    def __init__(self, routes: RouteInfoManager, clock: Callable[[], float],
                 max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS,
                 max_register_body_size: int = 64 * 1024 * 1024) -> None:
        self.routes = routes
        self.clock = clock
        self.max_queue_nums = max_queue_nums
        self.max_register_body_size = max_register_body_size

    def handler_table(self) -> HandlerTable:
        table = HandlerTable()
        table.register(RequestCode.REGISTER_BROKER, self.register_broker)
        table.register(RequestCode.UNREGISTER_BROKER, self.unregister_broker)
        table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.get_route_info)
        table.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.get_cluster_info)
        table.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.get_all_topic_list)
        table.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER, self.wipe_write_perm)
        table.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic)
        return table

    def register_broker(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_fields(cmd.ext_fields)
        topics: dict[str, TopicConfig] = {}
        version = DataVersion()
        if cmd.body:
            raw = cmd.body
            if h.compressed:
                if h.body_crc32 and zlib.crc32(raw) & 0x7FFFFFFF != h.body_crc32:
                    raise RemoteProtocolError("REGISTER_BROKER: bodyCrc32 does not match the body")
                raw = decompress_body(raw, self.max_register_body_size)
            body = unpack_body(raw)
            if not isinstance(body, dict):
                raise RemoteProtocolError("register body must be a map")
            table = body.get("topicConfigTable") or {}
            if not isinstance(table, dict):
                raise RemoteProtocolError("topicConfigTable must be a map")
            for name, raw in table.items():
                cfg = TopicConfig.from_dict(raw)
                problem = (topic_config_problem(cfg, self.max_queue_nums)
                           if cfg.topic_name == name else
                           f"topicConfigTable key {shown(name)} differs from its topicName")
                if problem is not None:
                    raise RemoteProtocolError(f"REGISTER_BROKER refused: {problem}")
                topics[name] = cfg
            version = DataVersion.from_dict(body.get("dataVersion"))
        result = self.routes.register_broker(
            h.cluster_name,
            h.broker_addr,
            h.broker_name,
            h.broker_id,
            h.ha_server_addr,
            topics,
            version,
            conn,
            self.clock(),
        )
        out = RegisterBrokerResponseHeader(result.ha_server_addr, result.master_addr)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=out.to_fields())

    def unregister_broker(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.from_fields(cmd.ext_fields)
        self.routes.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        return cmd.response(ResponseCode.SUCCESS)

    def get_route_info(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_fields(cmd.ext_fields)
        route = self.routes.pickup_topic_route_data(h.topic)
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {h.topic}"
            )
        return cmd.response(ResponseCode.SUCCESS, body=pack_body(route.to_dict()))

    def get_cluster_info(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=pack_body(self.routes.get_all_cluster_info()))

    def get_all_topic_list(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        body = {"topicList": self.routes.get_all_topic_list()}
        return cmd.response(ResponseCode.SUCCESS, body=pack_body(body))

    def wipe_write_perm(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.from_fields(cmd.ext_fields)
        count = self.routes.wipe_write_perm_of_broker(h.broker_name)
        out = WipeWritePermOfBrokerResponseHeader(count)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=out.to_fields())

    def delete_topic(self, conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicRequestHeader.from_fields(cmd.ext_fields)
        self.routes.delete_topic(h.topic)
        return cmd.response(ResponseCode.SUCCESS)
