"""Transactions over gRPC without sockets: the transaction id token, EndTransaction's
mapping and validation over the real TransactionService and fakes of its store, the check's
RecoverOrphanedTransactionCommand, the Telemetry outbox, a transactional SendMessage
through MessagingService in process, and the broker's ask_producer reaching a gRPC
producer's stream."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.grpc.clients import GrpcClients
from broker.grpc.convert import Refusal
from broker.grpc.framing import encode_message
from broker.grpc.messaging import SERVICE, MessagingService
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb
from broker.grpc.server import GrpcApp
from broker.grpc.telemetry import TelemetryOutbox
from broker.grpc.transactions import (
    END_CODES,
    end_request,
    end_transaction,
    parse_token,
    recover_command,
    transaction_token,
)
from broker.message_rewrite import PGROUP, REAL_QID, REAL_TOPIC, TRAN_MSG, check_request_record
from broker.service.send import SendOutcome, SendStatus
from broker.service.transactions import SUCCESSES, EndAction, EndStatus
from broker.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC
from broker.transaction_service import Asked, CheckRequest
from protocol.headers import CheckTransactionStateRequestHeader, SendMessageRequestHeader
from protocol.message import PROPERTY_UNIQ_KEY, MessageExt, string_to_properties
from protocol.record import encode_msg_id, pack_host
from protocol.route import TopicConfig
from tests.broker.grpc.test_clients import World as ClientsWorld
from tests.broker.grpc.test_clients import broker, producer_settings, w  # noqa: F401
from tests.broker.grpc.test_messaging import FakeSend, FakeTopics, call, service
from tests.broker.grpc.test_server import Exchange
from tests.broker.service.test_transactions import GROUP, World

STORE_HOST = "10.0.0.9:10911"


def request(token: str, *, topic: str = GROUP, msg_id: str = "ID1",
            resolution: int = pb.COMMIT, source: int = pb.SOURCE_CLIENT
            ) -> spb.EndTransactionRequest:
    return spb.EndTransactionRequest(topic=pb.Resource(name=topic), message_id=msg_id,
                                     transaction_id=token, resolution=resolution,  # type: ignore[arg-type]
                                     source=source)  # type: ignore[arg-type]


# ---- the token ------------------------------------------------------------------------


def test_the_token_names_both_offsets_and_nothing_else_parses() -> None:
    token = transaction_token(123_456, 7)
    assert token == "000000000001E240" + "0000000000000007"
    assert parse_token(token) == (123_456, 7)
    assert parse_token(transaction_token(2**63 - 1, 0)) == (2**63 - 1, 0)
    for bad in ("", token[:-1], token + "0", token.lower(), "G" * 32, "F" * 32,
                " " + token[1:], "ID1"):
        assert parse_token(bad) is None, bad
    with pytest.raises(ValueError):
        transaction_token(-1, 0)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.text(max_size=40))
def test_tokens_round_trip_and_any_text_parses_or_is_refused(clo: int, qo: int, text: str
                                                             ) -> None:
    assert parse_token(transaction_token(clo, qo)) == (clo, qo)
    got = parse_token(text)
    assert got is None or transaction_token(*got) == text


# ---- EndTransaction ---------------------------------------------------------------------


def test_every_end_status_has_a_code_and_only_successes_are_ok() -> None:
    assert set(END_CODES) == set(EndStatus)
    assert {s for s, c in END_CODES.items() if c == pb.OK} == SUCCESSES


def test_end_request_validates_before_the_store_is_read() -> None:
    token = transaction_token(100, 3)
    got = end_request(request(token, source=pb.SOURCE_SERVER_CHECK), "10.0.0.2:5")
    assert (got.producer_group, got.commit_log_offset, got.queue_offset) == (GROUP, 100, 3)
    assert got.action is EndAction.COMMIT and got.from_check and got.uniq_key == "ID1"
    assert end_request(request(token, resolution=pb.ROLLBACK), "h").action is EndAction.ROLLBACK
    assert end_request(request(token, resolution=0), "h").action is EndAction.UNKNOWN
    assert end_request(request(token, resolution=9), "h").action == 9
    assert not end_request(request(token), "h").from_check
    for bad, code in ((request(token, topic=""), pb.ILLEGAL_TOPIC),
                      (request(token, msg_id=""), pb.ILLEGAL_MESSAGE_ID),
                      (request(token, msg_id="a b"), pb.ILLEGAL_MESSAGE_ID),
                      (request(token, msg_id="x" * 129), pb.ILLEGAL_MESSAGE_ID),
                      (request("not-ours"), pb.INVALID_TRANSACTION_ID)):
        with pytest.raises(Refusal) as err:
            end_request(bad, "h")
        assert err.value.code == code


def test_end_transaction_through_the_transaction_service() -> None:
    world = World()
    qo, clo = world.prepared(0, 500, **{PROPERTY_UNIQ_KEY: "ID1"})
    token = transaction_token(clo, qo)

    def code(req: spb.EndTransactionRequest) -> int:
        return end_transaction(world.svc, req, "10.0.0.2:5").status.code

    # hostile or mistaken: nothing is written
    assert code(request(transaction_token(clo + 1, qo))) == pb.INVALID_TRANSACTION_ID
    assert code(request(transaction_token(clo, qo + 1))) == pb.INVALID_TRANSACTION_ID
    assert code(request(token, msg_id="ID2")) == pb.INVALID_TRANSACTION_ID
    assert code(request(token, topic="other")) == pb.INVALID_TRANSACTION_ID
    assert code(request(token, resolution=9)) == pb.BAD_REQUEST
    assert code(request(token, resolution=0)) == pb.OK  # unknown: asked later
    assert world.store.writes == []
    # a commit: the message and its op record in one write; again: nothing changes
    answer = end_transaction(world.svc, request(token), "10.0.0.2:5")
    assert answer.status.code == pb.OK and len(world.store.writes) == 1
    assert [m.topic for m in world.store.writes[0]] == ["orders", "RMQ_SYS_TRANS_OP_HALF_TOPIC"]
    assert code(request(token, source=pb.SOURCE_SERVER_CHECK)) == pb.OK
    assert len(world.store.writes) == 1
    rolled = end_transaction(world.svc, request(token, resolution=pb.ROLLBACK), "h").status
    assert rolled.code == pb.PRECONDITION_FAILED and "committed" in rolled.message
    world.role.is_slave = True
    assert code(request(token)) == pb.FORBIDDEN


# ---- the check's command ------------------------------------------------------------


def check_request(queue_offset: int = 4, commit_log_offset: int = 900) -> CheckRequest:
    half = MessageExt(RMQ_SYS_TRANS_HALF_TOPIC, b"the body",
                      {PGROUP: "Orders", REAL_TOPIC: "Orders", REAL_QID: "1", TRAN_MSG: "true",
                       PROPERTY_UNIQ_KEY: "ID7", "TAGS": "TagA", "color": "red"},
                      queue_offset=queue_offset, commit_log_offset=commit_log_offset,
                      born_timestamp=1_700_000_000_000, born_host="10.0.0.3:4000",
                      store_host=STORE_HOST)
    header = CheckTransactionStateRequestHeader(
        tran_state_table_offset=queue_offset, commit_log_offset=commit_log_offset,
        msg_id="ID7", transaction_id="ID7",
        offset_msg_id=encode_msg_id(pack_host(STORE_HOST), commit_log_offset))
    return CheckRequest("Orders", header, check_request_record(half, STORE_HOST), "Orders")


def test_the_recover_command_carries_the_message_and_the_copys_token() -> None:
    cmd = recover_command(check_request())
    assert cmd.WhichOneof("command") == "recover_orphaned_transaction_command"
    recover = cmd.recover_orphaned_transaction_command
    assert parse_token(recover.transaction_id) == (900, 4)
    msg = recover.message
    assert msg.topic.name == "Orders" and msg.body == b"the body"
    sp = msg.system_properties
    assert sp.message_id == "ID7" and sp.tag == "TagA" and sp.message_type == pb.TRANSACTION
    assert dict(msg.user_properties) == {"color": "red"}
    assert not sp.receipt_handle and not sp.HasField("invisible_duration")
    assert sp.born_timestamp.ToMilliseconds() == 1_700_000_000_000


# ---- the Telemetry outbox ------------------------------------------------------------


async def test_the_outbox_is_bounded_and_writes_in_order() -> None:
    outbox = TelemetryOutbox(capacity=2)
    commands = [spb.TelemetryCommand(status=pb.Status(code=pb.OK, message=str(i)))
                for i in range(3)]
    assert outbox.offer(commands[0]) and outbox.offer(commands[1])
    assert not outbox.has_room() and not outbox.offer(commands[2]) and outbox.refused == 1
    written: list[bytes] = []

    async def write(payload: bytes) -> None:
        written.append(payload)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.pump, write)
        await trio.testing.wait_all_tasks_blocked()
        assert [spb.TelemetryCommand.FromString(p).status.message for p in written] == ["0", "1"]
        assert outbox.has_room() and outbox.offer(commands[2])
        await trio.testing.wait_all_tasks_blocked()
        assert len(written) == 3 and outbox.sent == 3
        outbox.close()
    assert not outbox.offer(commands[0]) and not outbox.has_room()


# ---- through MessagingService and the broker ------------------------------------------


class HalfSend(FakeSend):
    """Stores "half messages": answers an offset message id and the queue offset."""

    def send_single(self, h: SendMessageRequestHeader, body: bytes, born_host: str
                    ) -> SendOutcome:
        self.sent.append((h, body, born_host))
        return SendOutcome(SendStatus.OK, None, encode_msg_id(pack_host(STORE_HOST), 4096),
                           1, 12, "ID0")


def tx_send(topic: str) -> spb.SendMessageRequest:
    request = spb.SendMessageRequest()
    msg = request.messages.add(topic=pb.Resource(name=topic), body=b"tx")
    msg.system_properties.message_id = "ID0"
    msg.system_properties.message_type = pb.TRANSACTION
    return request


async def test_a_transactional_send_answers_its_token_where_the_topic_takes_it() -> None:
    svc, _, topics, _ = service()
    send = svc.send_service = HalfSend()  # type: ignore[assignment]
    _, (raw,) = await call(svc, "SendMessage", tx_send("T"))
    entry = spb.SendMessageResponse.FromString(raw).entries[0]
    assert entry.status.code == pb.OK and entry.message_id == "ID0"
    assert parse_token(entry.transaction_id) == (4096, 12)
    header = send.sent[0][0]
    assert header.producer_group == "T"
    assert string_to_properties(header.properties)["TRAN_MSG"] == "true"
    for kind, ok in (("NORMAL", False), ("FIFO", False), ("TRANSACTION", True), ("MIXED", True)):
        topics.table[kind] = TopicConfig(kind, 4, 4, attributes={"message.type": kind})
        _, (raw,) = await call(svc, "SendMessage", tx_send(kind))
        code = spb.SendMessageResponse.FromString(raw).status.code
        assert code == (pb.OK if ok else pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE), kind
    assert len(send.sent) == 3


def test_the_broker_asks_a_grpc_producer_on_its_stream(broker: BrokerController  # noqa: F811
                                                       ) -> None:
    clients = broker.grpc_clients = GrpcClients(broker.client_service)
    assert clients.settings("p1", "h:2", producer_settings("Orders"), 0.0)[0] == pb.OK
    built: list[int] = []

    def build() -> CheckRequest:
        built.append(1)
        return check_request()

    # registered, but no Telemetry stream open: no producer to ask
    assert broker.ask_producer("Orders", build) is Asked.NO_PRODUCER and built == []
    outbox = TelemetryOutbox(capacity=1)
    clients.attach("p1", outbox)
    assert broker.ask_producer("Orders", build) is Asked.SENT
    assert broker.ask_producer("Orders", build) is Asked.BUSY  # its outbox is full
    assert len(built) == 1
    payload = outbox._receive.receive_nowait()
    recover = spb.TelemetryCommand.FromString(payload).recover_orphaned_transaction_command
    assert recover.message.system_properties.message_id == "ID7"
    # the stream closed: not asked any more; another client's stream is not this one's
    clients.detach("p1", TelemetryOutbox())
    assert clients.outboxes(broker.producer_manager.connections("Orders")) == [outbox]
    clients.detach("p1", outbox)
    assert broker.ask_producer("Orders", build) is Asked.NO_PRODUCER
    clients.attach("p1", TelemetryOutbox())
    clients.terminate("p1")
    assert broker.ask_producer("Orders", build) is Asked.NO_PRODUCER


async def test_a_telemetry_stream_carries_commands_while_it_is_open(w: ClientsWorld  # noqa: F811
                                                                    ) -> None:
    svc = MessagingService(BrokerConfig(broker_name="broker-a"), FakeSend(),  # type: ignore[arg-type]
                           FakeTopics(), endpoint=lambda: ("10.1.2.3", 8081),
                           on_topics_changed=lambda: None, clients=w.clients)
    settings = spb.TelemetryCommand(settings=producer_settings("Orders"))
    ex = Exchange([{"type": "http.request", "more_body": True,
                    "body": encode_message(settings.SerializeToString())}])
    scope = {"type": "http", "http_version": "2", "method": "POST",
             "path": f"/{SERVICE}/Telemetry", "client": ("10.9.9.9", 4000),
             "headers": [(b"content-type", b"application/grpc"), (b"x-mq-client-id", b"p1")]}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(GrpcApp(svc.methods()), scope, ex.receive, ex.send)
        await trio.testing.wait_all_tasks_blocked()
        outbox = w.clients.sessions["p1"].outbox
        assert outbox is not None  # the stream is open: the client can be reached
        assert outbox.offer(recover_command(check_request()))
        await trio.testing.wait_all_tasks_blocked()
        answers = [spb.TelemetryCommand.FromString(m) for m in ex.messages()]
        assert [a.WhichOneof("command") for a in answers] == [
            "settings", "recover_orphaned_transaction_command"]
        ex.disconnect.set()  # the client goes away
    assert w.clients.sessions["p1"].outbox is None and outbox.closed
    assert not outbox.offer(recover_command(check_request()))
