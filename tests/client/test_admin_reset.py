"""MQAdmin.reset_offset_by_time (mqadmin resetOffsetByTime) against fake brokers:
each master is asked to reset (INVOKE_BROKER_TO_RESET_OFFSET, forced: it tells the
group's online consumers); a broker answering CONSUMER_NOT_ONLINE (RocketMQ's, for an
offline group) gets the offsets committed queue by queue as an admin's reset."""

from __future__ import annotations

from client.admin import MQAdmin
from protocol.client_data import ResetOffsetBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import ResetOffsetRequestHeader, UpdateConsumerOffsetRequestHeader
from protocol.message import MessageQueue
from protocol.trio import RemotingConnection
from tests.client.fakes import FakeCluster

TOPIC = FakeCluster.TOPIC
TS = 1_700_000_000_000


async def test_reset_by_time_goes_through_each_master(cluster: FakeCluster) -> None:
    a, b = cluster.brokers
    asked: list[ResetOffsetRequestHeader] = []

    def reset(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        h = ResetOffsetRequestHeader.from_fields(cmd.ext_fields)
        asked.append(h)
        body = ResetOffsetBody({MessageQueue(h.topic, a.name, q): 10 + q for q in range(4)})
        return cmd.response(ResponseCode.SUCCESS, body=cmd.encode_body(body.to_dict()))

    def not_online(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE, "Consumer not online")

    def search(conn: RemotingConnection, cmd: RemotingCommand) -> RemotingCommand:
        assert int(cmd.ext_fields["timestamp"]) == TS
        return cmd.response(ResponseCode.SUCCESS,
                            ext_fields={"offset": 20 + int(cmd.ext_fields["queueId"])})

    a.handlers.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, reset)
    b.handlers.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, not_online)
    b.handlers.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, search)
    async with MQAdmin(cluster.namesrv_addr) as admin:
        rows = await admin.reset_offset_by_time("g", TOPIC, TS)
    assert sorted(rows) == [(a.name, q, 10 + q) for q in range(4)] + \
        [(b.name, q, 20 + q) for q in range(4)]
    assert [(h.topic, h.group, h.timestamp, h.is_force) for h in asked] == [(TOPIC, "g", TS, True)]
    assert a.requests_of(RequestCode.UPDATE_CONSUMER_OFFSET) == []  # the broker committed them
    commits = [UpdateConsumerOffsetRequestHeader.from_fields(c.ext_fields)
               for c in b.requests_of(RequestCode.UPDATE_CONSUMER_OFFSET)]
    assert sorted((c.queue_id, c.commit_offset, c.admin_reset) for c in commits) == \
        [(q, 20 + q, True) for q in range(4)]
