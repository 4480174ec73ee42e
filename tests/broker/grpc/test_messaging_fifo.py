"""A FIFO group (consumeMessageOrderly) over gRPC, in process: Telemetry's Settings say
``fifo``; ReceiveMessage pops orderly (a queue blocked until its batch is acked, a long
poll woken when the batch is visible again, delivered again with the next attempt);
a remoting POP_MESSAGE with ``order=true`` the same. The edge of tests/broker/test_pop_processor.py; a MockClock for the long poll."""

from __future__ import annotations

import trio
import trio.testing

from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import PopMessageResponseHeader
from protocol.record import decode_records
from protocol.subscription_group import SubscriptionGroupConfig
from tests.broker.fakes import FakeConn
from tests.broker.grpc.test_clients import consumer_settings
from tests.broker.grpc.test_messaging_pop import ack, call, messaging, receive, receive_request
from tests.broker.service.test_pop import GROUP
from tests.broker.test_pop_processor import Edge, handle_cmd, pop_cmd
from tests.broker.test_pop_processor import edge as edge  # noqa: F401  (the fixture)


def orderly(e: Edge) -> None:
    e.svc.groups.table[GROUP] = SubscriptionGroupConfig(  # type: ignore[attr-defined]
        GROUP, consume_message_orderly=True)


def messages(frames: list[spb.ReceiveMessageResponse]) -> list[pb.Message]:
    return [f.message for f in frames if f.WhichOneof("content") == "message"]


async def test_settings_say_fifo_for_an_orderly_group_only(edge: Edge) -> None:
    svc = await messaging(edge)
    svc.groups = edge.svc.groups.table.get  # type: ignore[attr-defined]  # the broker's one table
    orderly(edge)
    _, raws = await call(svc, "Telemetry", spb.TelemetryCommand(
        settings=consumer_settings(GROUP)))
    assert spb.TelemetryCommand.FromString(raws[0]).settings.subscription.fifo
    _, raws = await call(svc, "Telemetry", spb.TelemetryCommand(
        settings=consumer_settings("other")))
    assert not spb.TelemetryCommand.FromString(raws[0]).settings.subscription.fifo


async def test_receive_of_a_fifo_group_is_one_batch_at_a_time(
        edge: Edge, autojump_clock: trio.testing.MockClock) -> None:
    svc = await messaging(edge)
    orderly(edge)
    edge.put(3)
    first = messages(await receive(svc, receive_request(batch=2)))
    assert [m.system_properties.queue_offset for m in first] == [0, 1]
    blocked = await receive(svc, receive_request())
    assert [f.status.code for f in blocked] == [pb.MESSAGE_NOT_FOUND]
    # a long poll on the blocked queue ends when the batch is visible again (10 s)
    start = trio.current_time()
    again = messages(await receive(svc, receive_request(poll_s=15)))
    assert 10 <= trio.current_time() - start < 11
    assert [m.system_properties.queue_offset for m in again] == [0, 1]
    assert [m.system_properties.delivery_attempt for m in again] == [2, 2]
    assert [m.body for m in again] == [b"m0", b"m1"]
    handles = [m.system_properties.receipt_handle for m in again]
    assert (await ack(svc, *handles)).status.code == pb.OK
    rest = messages(await receive(svc, receive_request()))
    assert [m.system_properties.queue_offset for m in rest] == [2]
    assert [m.system_properties.delivery_attempt for m in rest] == [1]
    assert edge.revived == []  # never through %RETRY%


async def test_remoting_pop_with_order_blocks_and_an_ack_wakes_a_held_pop(
        edge: Edge, mock_clock: trio.testing.MockClock) -> None:
    """POP_MESSAGE ``order=true`` (a plain group): the queue waits for its batch; the ack
    that ends the batch wakes a pop held on it (the clock stands still: nothing else
    could end the poll)."""
    edge.runner.sync_flush = False  # answers once written: no worker thread to wait for
    edge.put(3)
    conn = FakeConn()

    def pop(poll: int = 0) -> RemotingCommand:
        cmd = pop_cmd(poll)
        cmd.ext_fields["order"] = "true"
        cmd.ext_fields["maxMsgNums"] = "2"
        return cmd

    first = await edge.proc.pop_message(conn, pop())  # type: ignore[arg-type]
    handles = PopMessageResponseHeader.from_fields(first.ext_fields).receipt_handles.split()
    assert [m.queue_offset for m in decode_records(first.body)] == [0, 1]
    answers: list[RemotingCommand] = []
    async with trio.open_nursery() as nursery:
        async def held() -> None:
            answers.append(await edge.proc.pop_message(conn, pop(poll=5_000)))  # type: ignore[arg-type]
        nursery.start_soon(held)
        await trio.testing.wait_all_tasks_blocked()
        assert not answers and edge.runner.held == 1
        for h in handles:
            acked = await edge.proc.ack_message(conn, handle_cmd(  # type: ignore[arg-type]
                RequestCode.ACK_MESSAGE, h))
            assert acked.code == ResponseCode.SUCCESS
        await trio.testing.wait_all_tasks_blocked()
        assert answers, "the held pop was not woken by the ack that ended the batch"
    (rest,) = answers
    assert [m.queue_offset for m in decode_records(rest.body)] == [2]
