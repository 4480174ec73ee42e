"""Broker2Client without sockets: INVOKE_BROKER_TO_RESET_OFFSET (which offsets, counted
resets, the consumers told) and GET_CONSUMER_RUNNING_INFO's relay (a client that does
not answer, does not read, answers too much, errs; a bound on relays in flight; an
answer re-encoded for an admin of another wire format)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.broker_to_client import MAX_RELAYED_BODY, MAX_RELAYS, RELAY_TIMEOUT_S
from broker.config import BrokerConfig
from broker.controller import BrokerController
from protocol.body import pack_body, unpack_body
from protocol.client_data import ResetOffsetBody
from protocol.codecs.rocketmq import ROCKETMQ_JSON
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import GetConsumerRunningInfoRequestHeader, ResetOffsetRequestHeader
from protocol.message import MessageQueue
from protocol.route import TopicConfig
from tests.broker.fakes import FakeConn, call
from tests.broker.store.helpers import inner

T = "ResetTopic"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerController]:
    c = BrokerController(BrokerConfig(
        store_path_root_dir=str(tmp_path), listen_port=0, maped_file_size_commit_log=1 << 20,
        maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64, max_index_num=256))
    c._load()
    c.topic_config_manager.update(TopicConfig(T, 2, 2))
    for i in range(10):  # queue 0: offsets 0..4, queue 1: 0..4
        c.message_store.put_message(inner(T, i % 2, b"m%d" % i))
    c.message_store.reput()
    try:
        yield c
    finally:
        c._persist_and_close()


def reset(c: BrokerController, group: str, timestamp: int, force: bool = True
          ) -> RemotingCommand:
    return call(c, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                ResetOffsetRequestHeader(T, group, timestamp, force).to_fields())


def offsets(resp: RemotingCommand) -> dict[int, int]:
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return {mq.queue_id: o for mq, o in ResetOffsetBody.from_wire(unpack_body(resp.body)).offsets.items()}


def test_skip_moves_every_queue_to_its_end_and_counts_a_reset(broker: BrokerController) -> None:
    table = broker.consumer_offset_manager
    assert [broker.message_store.get_max_offset_in_queue(T, q) for q in (0, 1)] == [5, 5]
    table.commit_offset("g", T, 0, 2)  # queue 1: no offset yet
    assert offsets(reset(broker, "g", -1)) == {0: 5, 1: 5}
    assert table.query_offsets("g", T) == {0: 5, 1: 5}
    assert table.reset_version(T, "g") == 2  # one per queue moved: slaves take them


def test_without_force_offsets_only_move_back(broker: BrokerController) -> None:
    table = broker.consumer_offset_manager
    table.commit_offset("g", T, 0, 2)
    table.commit_offset("g", T, 1, 5)
    before = table.reset_version(T, "g")
    # -1 is the end: never back, so nothing moves where there is an offset
    assert offsets(reset(broker, "g", -1, force=False)) == {0: 2, 1: 5}
    assert table.reset_version(T, "g") == before
    # a time before every message: both go back to 0
    assert offsets(reset(broker, "g", 0, force=False)) == {0: 0, 1: 0}


def test_online_consumers_are_told(broker: BrokerController) -> None:
    conns = [FakeConn(), FakeConn()]
    for i, conn in enumerate(conns):
        broker.consumer_manager.register("g", f"c{i}", conn, 0.0, {})
    resp = reset(broker, "g", -1)
    assert resp.code == ResponseCode.SUCCESS
    for conn in conns:
        [notice] = conn.sent
        assert notice.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET and notice.is_oneway
        h = ResetOffsetRequestHeader.from_fields(notice.ext_fields)
        assert (h.topic, h.group, h.timestamp) == (T, "g", -1)
        body = ResetOffsetBody.from_wire(notice.decode_body())
        assert body.offsets == {MessageQueue(T, broker.config.broker_name, 0): 5,
                                MessageQueue(T, broker.config.broker_name, 1): 5}


def test_reset_refusals(broker: BrokerController) -> None:
    resp = call(broker, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                ResetOffsetRequestHeader("NoSuchTopic", "g", -1).to_fields())
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in (resp.remark or "")
    # a bad header: the connection answers SYSTEM_ERROR "bad request: ..." naming the field
    with pytest.raises(RemoteProtocolError, match="timestamp"):
        call(broker, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": T, "group": "g"})
    assert broker.consumer_offset_manager.query_offsets("g", T) == {}


# ---- the running-info relay ----------------------------------------------------------

class FakeClient:
    """A consumer's connection: answers ``answer(request)``, or never (``hang``)."""

    codec = None
    remote_addr = "127.0.0.1:50000"

    def __init__(self, answer: Any = None, hang: bool = False, reading: bool = True) -> None:
        self.answer = answer
        self.hang = hang
        self.takes_requests = reading
        self.asked: list[RemotingCommand] = []

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.asked.append(cmd)
        if self.hang:
            await trio.sleep_forever()
        result: RemotingCommand = self.answer(cmd)
        return result


def online(c: BrokerController, client: FakeClient, cid: str = "10.0.0.1@1") -> None:
    c.consumer_manager.register("g", cid, client, 0.0, {})


async def ask(c: BrokerController, cid: str = "10.0.0.1@1", codec: Any = None) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                  GetConsumerRunningInfoRequestHeader("g", cid, True).to_fields())
    cmd.codec = codec
    _, handler = c._handler_table().lookup(RequestCode.GET_CONSUMER_RUNNING_INFO)
    assert handler is not None
    resp = await handler(FakeConn(), cmd)  # type: ignore[arg-type]
    assert resp is not None
    return resp


INFO = {"properties": {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"}, "mqTable": []}


async def test_relays_the_consumers_answer(broker: BrokerController) -> None:
    client = FakeClient(lambda cmd: cmd.response(ResponseCode.SUCCESS, body=pack_body(INFO)))
    online(broker, client)
    resp = await ask(broker)
    assert resp.code == ResponseCode.SUCCESS and unpack_body(resp.body) == INFO
    [asked] = client.asked
    h = GetConsumerRunningInfoRequestHeader.from_fields(asked.ext_fields)
    assert (h.consumer_group, h.client_id, h.jstack_enable) == ("g", "10.0.0.1@1", True)
    # an admin speaking RocketMQ's JSON gets the same answer in JSON
    resp = await ask(broker, codec=ROCKETMQ_JSON)
    assert resp.code == ResponseCode.SUCCESS and ROCKETMQ_JSON.unpack_body(resp.body) == INFO
    assert (await ask(broker, cid="10.0.0.9@9")).remark == "The Consumer <g> <10.0.0.9@9> not online"


async def test_relay_refusals(broker: BrokerController) -> None:
    online(broker, FakeClient(lambda cmd: cmd.response(ResponseCode.SYSTEM_ERROR, "no such group")))
    resp = await ask(broker)
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "no such group")
    online(broker, FakeClient(lambda cmd: cmd.response(
        ResponseCode.SUCCESS, body=b"x" * (MAX_RELAYED_BODY + 1))))
    resp = await ask(broker)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "not relayed" in (resp.remark or "")
    client = FakeClient(lambda cmd: cmd.response(ResponseCode.SUCCESS), reading=False)
    online(broker, client)
    resp = await ask(broker)
    assert resp.code == ResponseCode.SYSTEM_BUSY and "does not read" in (resp.remark or "")
    assert client.asked == []


async def test_a_silent_consumer_times_out_and_relays_are_bounded(
        broker: BrokerController, autojump_clock: trio.testing.MockClock) -> None:
    ids = [f"10.0.0.1@{i}" for i in range(MAX_RELAYS)]
    for cid in ids:
        online(broker, FakeClient(hang=True), cid)
    answers: list[RemotingCommand] = []
    async with trio.open_nursery() as nursery:
        for cid in ids:
            nursery.start_soon(_collect, broker, cid, answers)
        await trio.testing.wait_all_tasks_blocked()
        assert broker.broker2client.relays == MAX_RELAYS
        busy = await ask(broker, ids[0])  # one more: refused at once
        assert busy.code == ResponseCode.SYSTEM_BUSY
        started = trio.current_time()
    assert trio.current_time() - started == pytest.approx(RELAY_TIMEOUT_S)
    assert [a.code for a in answers] == [ResponseCode.CONSUME_MSG_TIMEOUT] * MAX_RELAYS
    assert broker.broker2client.relays == 0


async def _collect(c: BrokerController, cid: str, out: list[RemotingCommand]) -> None:
    out.append(await ask(c, cid))
