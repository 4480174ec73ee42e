"""Broker2Client, the remoting adapter, over a Broker2ClientService with fakes
(no controller, no sockets): INVOKE_BROKER_TO_RESET_OFFSET's answer and the
RESET_CONSUMER_CLIENT_OFFSET notice each consumer gets, and
GET_CONSUMER_RUNNING_INFO's relay (the answer re-encoded for an admin of another
wire format, a consumer's error relayed with its code, each refusal's code).
The rules themselves: tests/broker/service/test_broker2client.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing

from broker.broker_to_client import (
    MAX_RELAYED_BODY,
    RELAY_TIMEOUT_S,
    Broker2Client,
    RemotingConsumerLink,
    RemotingReply,
)
from broker.client_manager import ClientGroups
from broker.service.broker2client import Broker2ClientService
from protocol.body import pack_body, unpack_body
from protocol.client_data import ResetOffsetBody
from protocol.codecs.rocketmq import ROCKETMQ_JSON
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import GetConsumerRunningInfoRequestHeader, ResetOffsetRequestHeader
from protocol.message import MessageQueue
from protocol.route import TopicConfig
from protocol.trio.errors import RemotingConnectError, RemotingTimeoutError
from tests.broker.fakes import FakeConn
from tests.broker.service.test_broker2client import Offsets, Queues, Role, Topics

T = "ResetTopic"
B = "broker-a"
NO_CONN: Any = None  # the handlers read nothing of the admin's connection


@dataclass
class Adapter:
    processor: Broker2Client
    consumers: ClientGroups
    offsets: Offsets


@pytest.fixture
def b2c() -> Adapter:
    offsets, consumers = Offsets(), ClientGroups("consumer")
    service: Broker2ClientService[RemotingReply] = Broker2ClientService(
        broker_name=B, role=Role(), topics=Topics(TopicConfig(T, 2, 2)), offsets=offsets,
        queues=Queues({0: 5, 1: 5}), consumers=consumers, link=RemotingConsumerLink())
    return Adapter(Broker2Client(service), consumers, offsets)


def reset(a: Adapter, fields: dict[str, Any], codec: Any = None) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
    cmd.codec = codec
    return a.processor.reset_offset(NO_CONN, cmd)


def test_reset_answers_the_offsets_and_tells_each_consumer_in_its_format(b2c: Adapter) -> None:
    plain, json_speaker = FakeConn(), FakeConn()
    json_speaker.codec = ROCKETMQ_JSON  # type: ignore[attr-defined]
    b2c.consumers.register("g", "c1", plain, 0.0, {})
    b2c.consumers.register("g", "c2", json_speaker, 0.0, {})
    resp = reset(b2c, ResetOffsetRequestHeader(T, "g", -1, False).to_fields())
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    expected = {MessageQueue(T, B, 0): 5, MessageQueue(T, B, 1): 5}
    assert ResetOffsetBody.from_wire(unpack_body(resp.body)).offsets == expected
    for conn in (plain, json_speaker):
        [notice] = conn.sent
        assert notice.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET and notice.is_oneway
        h = ResetOffsetRequestHeader.from_fields(notice.ext_fields)
        assert (h.topic, h.group, h.timestamp, h.is_force) == (T, "g", -1, False)
        assert ResetOffsetBody.from_wire(notice.decode_body()).offsets == expected
    assert ROCKETMQ_JSON.unpack_body(json_speaker.sent[0].body)["offsetTable"][0]["offset"] == 5


def test_reset_refusals(b2c: Adapter) -> None:
    resp = reset(b2c, ResetOffsetRequestHeader("NoSuchTopic", "g", -1).to_fields())
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in (resp.remark or "")
    # a bad header: the connection answers SYSTEM_ERROR "bad request: ..." naming the field
    with pytest.raises(RemoteProtocolError, match="timestamp"):
        reset(b2c, {"topic": T, "group": "g"})
    b2c.processor.service.role.is_slave = True
    resp = reset(b2c, ResetOffsetRequestHeader(T, "g", -1).to_fields())
    assert resp.code == ResponseCode.SYSTEM_ERROR and "slave" in (resp.remark or "")
    assert b2c.offsets.resets == []


# ---- the running-info relay ----------------------------------------------------------

class FakeClient:
    """A consumer's connection: answers ``answer(request)``, raises ``error``,
    or never answers (``hang``)."""

    codec = None
    remote_addr = "127.0.0.1:50000"

    def __init__(self, answer: Any = None, hang: bool = False, reading: bool = True,
                 error: Exception | None = None) -> None:
        self.answer = answer
        self.hang = hang
        self.error = error
        self.takes_requests = reading
        self.asked: list[RemotingCommand] = []

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.asked.append(cmd)
        if self.error is not None:
            raise self.error
        if self.hang:
            await trio.sleep_forever()
        result: RemotingCommand = self.answer(cmd)
        return result


def online(a: Adapter, client: FakeClient, cid: str = "10.0.0.1@1") -> FakeClient:
    a.consumers.register("g", cid, client, 0.0, {})
    return client


async def ask(a: Adapter, cid: str = "10.0.0.1@1", codec: Any = None) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                  GetConsumerRunningInfoRequestHeader("g", cid, True).to_fields())
    cmd.codec = codec
    return await a.processor.get_consumer_running_info(NO_CONN, cmd)


INFO = {"properties": {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"}, "mqTable": []}


async def test_relays_the_consumers_answer(b2c: Adapter) -> None:
    client = online(b2c, FakeClient(lambda cmd: cmd.response(ResponseCode.SUCCESS,
                                                             body=pack_body(INFO))))
    resp = await ask(b2c)
    assert resp.code == ResponseCode.SUCCESS and unpack_body(resp.body) == INFO
    [asked] = client.asked
    h = GetConsumerRunningInfoRequestHeader.from_fields(asked.ext_fields)
    assert (h.consumer_group, h.client_id, h.jstack_enable) == ("g", "10.0.0.1@1", True)
    # an admin speaking RocketMQ's JSON gets the same answer in JSON
    resp = await ask(b2c, codec=ROCKETMQ_JSON)
    assert resp.code == ResponseCode.SUCCESS and ROCKETMQ_JSON.unpack_body(resp.body) == INFO
    resp = await ask(b2c, cid="10.0.0.9@9")
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR,
                                        "The Consumer <g> <10.0.0.9@9> not online")


@pytest.mark.parametrize(("client", "code", "remark"), [
    (FakeClient(lambda cmd: cmd.response(ResponseCode.SYSTEM_ERROR, "no such group")),
     ResponseCode.SYSTEM_ERROR, "no such group"),
    (FakeClient(lambda cmd: cmd.response(ResponseCode.SUCCESS, body=b"x" * (MAX_RELAYED_BODY + 1))),
     ResponseCode.SYSTEM_ERROR, "not relayed"),
    (FakeClient(lambda cmd: cmd.response(ResponseCode.SUCCESS, body=b"\xc1")),
     ResponseCode.SYSTEM_ERROR, "unreadable body"),
    (FakeClient(reading=False), ResponseCode.SYSTEM_BUSY, "does not read"),
    (FakeClient(error=RemotingConnectError("connection closed")),
     ResponseCode.SYSTEM_ERROR, "failed: connection closed"),
    (FakeClient(error=RemotingTimeoutError("no response")),
     ResponseCode.CONSUME_MSG_TIMEOUT, "did not answer"),
])
async def test_relay_refusals(b2c: Adapter, client: FakeClient, code: int, remark: str) -> None:
    online(b2c, client)
    # the unreadable body only matters when it must be re-encoded
    resp = await ask(b2c, codec=ROCKETMQ_JSON if remark == "unreadable body" else None)
    assert resp.code == code and remark in (resp.remark or ""), resp.remark
    assert len(client.asked) == (0 if remark == "does not read" else 1)


async def test_a_silent_consumer_times_out(b2c: Adapter,
                                           autojump_clock: trio.testing.MockClock) -> None:
    online(b2c, FakeClient(hang=True))
    resp = await ask(b2c)
    assert resp.code == ResponseCode.CONSUME_MSG_TIMEOUT
    assert trio.current_time() == pytest.approx(RELAY_TIMEOUT_S)
