"""ACL on the gRPC port, the pure part (broker/grpc/access.py): the authorization header,
the signature, its freshness, and the resources each RPC needs."""

from __future__ import annotations

import hashlib
import hmac
from binascii import hexlify

import pytest

from acl import plain
from acl.plain import Need, Perm, parse_plain_acl
from broker.config import BrokerConfig
from broker.grpc import access
from broker.grpc.access import (
    AuthorizationError,
    date_time_text,
    decide,
    freshness_problem,
    needs_of,
    parse_authorization,
    parse_date_time,
    refusal_code,
    sign,
)
from broker.grpc.messaging import MessagingService
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb

NOW_MS = 1_765_000_000_000  # 2025-12-06T05:46:40Z
ACL = """
globalWhiteRemoteAddresses: ["10.9.*.*"]
accounts:
  - accessKey: producerAK
    secretKey: producerSK
    topicPerms: ["TopicA=PUB"]
  - accessKey: consumerAK
    secretKey: consumerSK
    defaultTopicPerm: SUB
    groupPerms: ["GroupA=SUB"]
  - accessKey: trustedAK
    secretKey: trustedSK
    whiteRemoteAddress: 192.168.7.*
"""
CONFIG = parse_plain_acl(ACL)


def metadata(ak: str, sk: str, now_ms: int = NOW_MS) -> dict[str, str]:
    when = date_time_text(now_ms)
    return {"x-mq-date-time": when,
            "authorization": f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
                             f"Signature={sign(sk, when) if ak else ''}"}


def send(topic: str) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic))])


def receive(group: str, topic: str) -> spb.ReceiveMessageRequest:
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)))


def test_sign_is_the_official_clients() -> None:
    # rocketmq/v5/util/signature.py: hexlify(HMAC-SHA1(sk, date-time)).decode()
    when = "20261206T213000Z"
    expected = hexlify(hmac.new(b"secret", when.encode(), hashlib.sha1).digest()).decode()
    assert sign("secret", when) == expected and expected == expected.lower()


def test_parse_authorization() -> None:
    auth = parse_authorization("MQv2-HMAC-SHA1 Credential=AK1234567, "
                               "SignedHeaders=x-mq-date-time, Signature=ABCdef01")
    assert (auth.access_key, auth.signed_headers, auth.signature) == \
        ("AK1234567", ("x-mq-date-time",), "abcdef01")
    anonymous = parse_authorization("MQv2-HMAC-SHA1 Credential=, "
                                    "SignedHeaders=x-mq-date-time, Signature=")
    assert anonymous.access_key == ""


@pytest.mark.parametrize("header,match", [
    ("Bearer xyz", "scheme"),
    ("MQv2-HMAC-SHA1 Credential=AK1234567, SignedHeaders=host, Signature=ab", "SignedHeaders"),
    ("MQv2-HMAC-SHA1 Credential=AK1234567, SignedHeaders=x-mq-date-time, Signature=zz",
     "hexadecimal"),
    ("MQv2-HMAC-SHA1 Credential=AK1234567, Credential=B, Signature=ab", "must be"),
    ("MQv2-HMAC-SHA1 SignedHeaders=x-mq-date-time, Signature=ab", "no Credential"),
    ("MQv2-HMAC-SHA1 Credential=" + "A" * 2000, "longer than"),
])
def test_malformed_authorization(header: str, match: str) -> None:
    with pytest.raises(AuthorizationError, match=match):
        parse_authorization(header)


def test_date_time() -> None:
    assert parse_date_time(date_time_text(NOW_MS)) == NOW_MS // 1000 * 1000
    assert date_time_text(0) == "19700101T000000Z"
    assert parse_date_time("2026-12-06") is None
    assert parse_date_time("2" * 100) is None
    window = 15 * 60_000
    assert freshness_problem(date_time_text(NOW_MS - window + 1000), NOW_MS, window) is None
    assert freshness_problem(date_time_text(NOW_MS + window - 1000), NOW_MS, window) is None
    assert "stale" in (freshness_problem(date_time_text(NOW_MS - window - 1000),
                                         NOW_MS, window) or "")
    assert "stale" in (freshness_problem(date_time_text(NOW_MS + window + 1000),
                                         NOW_MS, window) or "")
    assert "missing" in (freshness_problem("", NOW_MS, window) or "")


def test_every_served_rpc_has_a_rule() -> None:
    service = MessagingService(BrokerConfig(), None, None,  # type: ignore[arg-type]
                               endpoint=lambda: ("127.0.0.1", 8081),
                               on_topics_changed=lambda: None)
    served = {path.rpartition("/")[2] for path in service.methods()}
    missing = served - set(access.RULES)
    assert not missing, f"RPCs without an ACL row in broker/grpc/access.py RULES: {missing}"
    assert set(access.RESPONSES) == set(access.RULES) - {"Telemetry"}


def test_needs() -> None:
    assert needs_of("SendMessage", send("TopicA")) == [Need("TopicA", Perm.PUB)]
    assert needs_of("ReceiveMessage", receive("G", "T")) == \
        [Need("T", Perm.SUB), Need("%RETRY%G", Perm.SUB)]
    assert needs_of("QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name="T"))) == \
        [Need("T", Perm.ANY)]
    producer = spb.HeartbeatRequest(client_type=pb.PRODUCER, group=pb.Resource(name="G"))
    consumer = spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER,
                                    group=pb.Resource(name="G"))
    assert needs_of("Heartbeat", producer) == []
    assert needs_of("Heartbeat", consumer) == [Need("%RETRY%G", Perm.SUB)]
    settings = spb.TelemetryCommand(settings=pb.Settings(subscription=pb.Subscription(
        group=pb.Resource(name="G"),
        subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="T"))])))
    assert needs_of("Telemetry", settings) == [Need("%RETRY%G", Perm.SUB), Need("T", Perm.SUB)]
    assert needs_of("EndTransaction", spb.EndTransactionRequest(
        topic=pb.Resource(name="T"))) == [Need("T", Perm.PUB)]


def test_signed_calls() -> None:
    ok = decide(CONFIG, "SendMessage", send("TopicA"), metadata("producerAK", "producerSK"),
                "127.0.0.1", NOW_MS)
    assert ok.allowed and ok.access_key == "producerAK"
    forbidden = decide(CONFIG, "SendMessage", send("TopicB"),
                       metadata("producerAK", "producerSK"), "127.0.0.1", NOW_MS)
    assert not forbidden.allowed and refusal_code(forbidden) == pb.Code.FORBIDDEN
    assert "topic=TopicB" in forbidden.remark
    assert decide(CONFIG, "ReceiveMessage", receive("GroupA", "TopicA"),
                  metadata("consumerAK", "consumerSK"), "127.0.0.1", NOW_MS).allowed
    no_group = decide(CONFIG, "ReceiveMessage", receive("GroupB", "TopicA"),
                      metadata("consumerAK", "consumerSK"), "127.0.0.1", NOW_MS)
    assert refusal_code(no_group) == pb.Code.FORBIDDEN


def test_unauthenticated_calls() -> None:
    wrong = decide(CONFIG, "SendMessage", send("TopicA"), metadata("producerAK", "nope!!"),
                   "127.0.0.1", NOW_MS)
    unknown = decide(CONFIG, "SendMessage", send("TopicA"), metadata("someoneAK", "x"),
                     "127.0.0.1", NOW_MS)
    anonymous = decide(CONFIG, "SendMessage", send("TopicA"), metadata("", ""),
                       "127.0.0.1", NOW_MS)
    bare = decide(CONFIG, "QueryRoute", spb.QueryRouteRequest(), {}, "127.0.0.1", NOW_MS)
    for refused in (wrong, unknown, anonymous, bare):
        assert not refused.allowed and refusal_code(refused) == pb.Code.UNAUTHORIZED
    assert wrong.remark == unknown.remark == plain.SIGNATURE_REFUSED  # no key is told apart
    garbled = decide(CONFIG, "SendMessage", send("TopicA"), {"authorization": "Basic x"},
                     "127.0.0.1", NOW_MS)
    assert refusal_code(garbled) == pb.Code.UNAUTHORIZED and "scheme" in garbled.remark
    assert refusal_code(decide(None, "SendMessage", send("T"), {}, "1.2.3.4", NOW_MS)) == \
        pb.Code.UNAUTHORIZED


def test_stale_signature() -> None:
    window = 15 * 60_000
    for skew in (-window - 60_000, window + 60_000):
        stale = decide(CONFIG, "SendMessage", send("TopicA"),
                       metadata("producerAK", "producerSK", NOW_MS + skew), "127.0.0.1",
                       NOW_MS, window)
        assert not stale.allowed and "stale" in stale.remark
        assert refusal_code(stale) == pb.Code.UNAUTHORIZED
    assert decide(CONFIG, "SendMessage", send("TopicA"),
                  metadata("producerAK", "producerSK", NOW_MS - 60_000), "127.0.0.1",
                  NOW_MS, window).allowed
    # a wrong secret with a stale time says "signature", not "stale": nothing is told
    wrong = decide(CONFIG, "SendMessage", send("TopicA"),
                   metadata("producerAK", "bad", NOW_MS - 10 * window), "127.0.0.1", NOW_MS)
    assert wrong.remark == plain.SIGNATURE_REFUSED


def test_white_addresses() -> None:
    # a global white address passes whatever it sends (anonymous, malformed)
    assert decide(CONFIG, "SendMessage", send("TopicZ"), {"authorization": "junk"},
                  "10.9.1.1", NOW_MS).allowed
    # an account's white address passes it unsigned, to any resource as remoting does
    assert decide(CONFIG, "SendMessage", send("TopicZ"), metadata("trustedAK", "wrong"),
                  "192.168.7.3", NOW_MS).allowed
    assert not decide(CONFIG, "SendMessage", send("TopicZ"), metadata("trustedAK", "wrong"),
                      "192.168.8.3", NOW_MS).allowed


def test_window_key_default() -> None:
    assert BrokerConfig().acl_grpc_date_time_window == access.DEFAULT_WINDOW_MS
