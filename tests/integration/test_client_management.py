"""Heartbeats, consumer lists, change notifications and queue locks on a real broker."""

from __future__ import annotations

from protocol.body import pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.trio import HandlerTable, RemotingClient
from tests.integration.cluster import Cluster
from tests.waits import at_least, wait_until


def heartbeat(cid: str) -> RemotingCommand:
    body = {"clientID": cid, "producerDataSet": [],
            "consumerDataSet": [{"groupName": "G", "consumeType": "CONSUME_PASSIVELY",
                                 "messageModel": "CLUSTERING",
                                 "subscriptionDataSet": [{"topic": "T", "subString": "*"}]}]}
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=pack_body(body))


def lock(cid: str, queues: list[int], code: int = RequestCode.LOCK_BATCH_MQ) -> RemotingCommand:
    body = {"consumerGroup": "G", "clientId": cid,
            "mqSet": [{"topic": "T", "brokerName": "broker-a", "queueId": q} for q in queues]}
    return RemotingCommand.request(code, body=pack_body(body))


async def test_membership_notifications_and_locks(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    notified: list[str] = []
    table = HandlerTable()
    table.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                   lambda conn, cmd: notified.append(cmd.ext_fields["consumerGroup"]))
    async with RemotingClient(table) as a, RemotingClient() as b:
        assert (await a.invoke(broker.addr, heartbeat("A"), 3)).code == ResponseCode.SUCCESS
        await wait_until(at_least(lambda: len(notified), 1), 5, "A told of its own join")
        assert (await b.invoke(broker.addr, heartbeat("B"), 3)).code == ResponseCode.SUCCESS
        await wait_until(at_least(lambda: len(notified), 2), 5, "A told of B's join")
        resp = await a.invoke(broker.addr, RemotingCommand.request(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}), 3)
        assert unpack_body(resp.body)["consumerIdList"] == ["A", "B"]

        got = unpack_body((await a.invoke(broker.addr, lock("A", [0, 1]), 3)).body)
        assert len(got["lockOKMQSet"]) == 2
        got = unpack_body((await b.invoke(broker.addr, lock("B", [1, 2]), 3)).body)
        assert [m["queueId"] for m in got["lockOKMQSet"]] == [2]
        await a.invoke(broker.addr, lock("A", [1], RequestCode.UNLOCK_BATCH_MQ), 3)
        got = unpack_body((await b.invoke(broker.addr, lock("B", [1]), 3)).body)
        assert [m["queueId"] for m in got["lockOKMQSet"]] == [1]

        b.close_connection(broker.addr)  # B goes away: A is told, the list shrinks
        await wait_until(at_least(lambda: len(notified), 3), 5, "A told of B's leaving")
        resp = await a.invoke(broker.addr, RemotingCommand.request(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}), 3)
        assert unpack_body(resp.body)["consumerIdList"] == ["A"]
    assert set(notified) == {"G"}
