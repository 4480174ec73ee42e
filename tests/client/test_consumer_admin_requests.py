"""What a client instance does with a broker's admin requests about its consumers,
without sockets: GET_CONSUMER_RUNNING_INFO and RESET_CONSUMER_CLIENT_OFFSET (only the
sending broker's queues of the named topic move)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from client.instance import MQClientInstance
from protocol.body import pack_body, unpack_body
from protocol.client_data import ResetOffsetBody
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import GetConsumerRunningInfoRequestHeader, ResetOffsetRequestHeader
from protocol.message import MessageQueue
from tests.broker.fakes import FakeConn
from tests.client.fakes import closed_port_addr


class RecordingConsumer:
    group = "g"

    def __init__(self) -> None:
        self.resets: list[tuple[str, dict[MessageQueue, int]]] = []
        self.reset_done = trio.Event()

    def consumer_data(self) -> dict[str, Any]:
        return {"groupName": self.group}

    def subscribed_topics(self) -> set[str]:
        return set()

    async def do_rebalance(self) -> None:
        pass

    async def persist_consumer_offset(self) -> None:
        pass

    def running_info(self, jstack: bool = False) -> dict[str, Any]:
        return {"properties": {"jstack": str(jstack)}}

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        self.resets.append((topic, offsets))
        self.reset_done.set()


class BrokerConn(FakeConn):
    def __init__(self, addr: str) -> None:
        super().__init__()
        self.remote_addr = addr


async def test_reset_and_running_info(autojump_clock: trio.testing.MockClock) -> None:
    inst = MQClientInstance(closed_port_addr())
    consumer = RecordingConsumer()
    await inst.start()
    try:
        inst.register_consumer(consumer)  # type: ignore[arg-type]
        inst._broker_addrs = {"broker-a": {0: "10.0.0.1:10911"}, "broker-b": {0: "10.0.0.2:10911"}}
        body = ResetOffsetBody({MessageQueue("T", "broker-a", 0): 5,
                                MessageQueue("T", "broker-b", 0): 6,
                                MessageQueue("Other", "broker-a", 0): 7}).to_dict()

        def notice(group: str) -> RemotingCommand:
            return RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                ResetOffsetRequestHeader("T", group, -1).to_fields(), pack_body(body), oneway=True)

        inst._on_reset_offset(BrokerConn("10.0.0.9:10911"), notice("g"))  # not a broker of ours
        inst._on_reset_offset(BrokerConn("10.0.0.1:10911"), notice("other-group"))
        await trio.testing.wait_all_tasks_blocked()
        assert consumer.resets == []
        inst._on_reset_offset(BrokerConn("10.0.0.1:10911"), notice("g"))
        with trio.fail_after(5):
            await consumer.reset_done.wait()
        assert consumer.resets == [("T", {MessageQueue("T", "broker-a", 0): 5})]

        ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                      GetConsumerRunningInfoRequestHeader("g", "x", True).to_fields())
        resp = inst._on_running_info(BrokerConn("10.0.0.1:10911"), ask)  # type: ignore[arg-type]
        assert resp.code == ResponseCode.SUCCESS
        assert unpack_body(resp.body) == {"properties": {"jstack": "True"}}
        ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                      GetConsumerRunningInfoRequestHeader("nope", "x").to_fields())
        resp = inst._on_running_info(BrokerConn("10.0.0.1:10911"), ask)  # type: ignore[arg-type]
        assert resp.code == ResponseCode.SYSTEM_ERROR and "<nope>" in (resp.remark or "")
    finally:
        await inst.shutdown()
