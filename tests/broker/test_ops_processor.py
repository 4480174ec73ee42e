"""OpsProcessor's three operator reads over an OpsService with fakes (no controller,
no sockets): each answer's body, the refusals' remarks, and a producer's row as only
its connection knows it (address, language, version). GET/UPDATE_BROKER_CONFIG:
tests/broker/test_config_secrets.py; live daemons: tests/integration/test_ops_requests.py."""

from __future__ import annotations

from typing import Any

from broker.client_manager import ClientGroups
from broker.ops_processor import OpsProcessor
from broker.service.ops import OpsService
from protocol.body import unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from tests.broker.service.test_ops import OffsetGroups, Stats, Topics, subscribed

T = "OpsTopic"
NO_CONN: Any = None  # the handlers read nothing of the asking connection
NO_CONFIG: Any = None  # ... nor the ConfigService


class ProducerConn:
    remote_addr = "10.0.0.7:41000"

    def __init__(self, **attrs: Any) -> None:
        self.attrs = attrs


def processor() -> tuple[OpsProcessor, ClientGroups, ClientGroups]:
    consumers, producers = ClientGroups("consumer"), ClientGroups("producer")
    ops = OpsService(stats=Stats(), offsets=OffsetGroups({T: {"committed"}}), topics=Topics(T),
                     consumers=consumers, producers=producers)
    return OpsProcessor(ops, NO_CONFIG), consumers, producers


def request(code: int, fields: dict[str, Any]) -> RemotingCommand:
    return RemotingCommand.request(code, fields)


def test_stats_and_consumers_of_a_topic() -> None:
    p, consumers, _ = processor()
    resp = p.view_broker_stats_data(NO_CONN, request(
        RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": T}))
    assert resp.code == ResponseCode.SUCCESS
    assert unpack_body(resp.body) == {"statsMinute": {"sum": 3, "tps": 0.0, "avgpt": 0.0}}
    resp = p.view_broker_stats_data(NO_CONN, request(
        RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "x"}))
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR,
                                        "The stats <TOPIC_PUT_NUMS> <x> not exist")
    subscribed(consumers, "online", "c1", T)
    resp = p.query_topic_consume_by_who(NO_CONN, request(
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": T}))
    assert unpack_body(resp.body) == {"groupList": ["committed", "online"]}


def test_producer_connections() -> None:
    p, _, producers = processor()
    producers.register("pg", "b@2", ProducerConn(language="JAVA", version=403), 0.0)
    producers.register("pg", "a@1", ProducerConn(), 0.0)  # no heart-beat attributes
    resp = p.get_producer_connection_list(NO_CONN, request(
        RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg"}))
    assert resp.code == ResponseCode.SUCCESS
    assert unpack_body(resp.body) == {"connectionSet": [
        {"clientId": "a@1", "clientAddr": "10.0.0.7:41000", "language": "OTHER", "version": 0},
        {"clientId": "b@2", "clientAddr": "10.0.0.7:41000", "language": "JAVA", "version": 403}]}
    resp = p.get_producer_connection_list(NO_CONN, request(
        RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "nobody"}))
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR,
                                        "the producer group[nobody] not exist")
