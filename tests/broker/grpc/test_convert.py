"""v2 messages to the send service's values and routes to v2 queues, without sockets."""

from __future__ import annotations

import gzip
import hashlib
import zlib

import pytest

from broker.grpc.convert import (
    PROPERTY_MESSAGE_GROUP,
    Refusal,
    SendItem,
    accept_message_types,
    delay_level,
    message_queues,
    permission,
    queue_for_group,
    sent_type,
    to_send_item,
)
from broker.grpc.pb import definition_pb2 as pb
from protocol.message import string_to_properties
from protocol.record import TRANSACTION_PREPARED_TYPE, transaction_type
from protocol.route import PERM_READ, PERM_RW, PERM_WRITE, TopicConfig

LEVELS = {1: 1000, 2: 5000, 3: 10_000, 4: 30_000}
NOW = 1_700_000_000_000
MAX_DELAY_MS = 3 * 86_400_000


def message(body: bytes = b"hello", **sp: object) -> pb.Message:
    msg = pb.Message(topic=pb.Resource(name="T"), body=body)
    msg.system_properties.message_id = "01ABCDEF"
    msg.system_properties.message_type = pb.NORMAL
    for key, value in sp.items():
        if isinstance(value, pb.Digest):
            msg.system_properties.body_digest.CopyFrom(value)
        else:
            setattr(msg.system_properties, key, value)
    return msg


def item(msg: pb.Message, max_size: int = 1024) -> SendItem:
    return to_send_item(msg, producer_group="G", max_size=max_size, now_ms=NOW,
                        max_delay_ms=MAX_DELAY_MS)


def refusal(msg: pb.Message, max_size: int = 1024) -> Refusal:
    with pytest.raises(Refusal) as err:
        item(msg, max_size)
    return err.value


def test_system_and_user_properties_mapped() -> None:
    msg = message(tag="TagA")
    msg.system_properties.keys.extend(["k1", "k2"])
    msg.system_properties.born_timestamp.FromMilliseconds(NOW - 5)
    msg.user_properties["color"] = "red"
    got = item(msg)
    props = string_to_properties(got.header.properties)
    assert props == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01ABCDEF", "color": "red"}
    assert got.header.topic == "T" and got.header.producer_group == "G"
    assert got.header.born_timestamp == NOW - 5
    assert got.header.queue_id == -1  # the service picks
    assert got.body == b"hello" and got.message_id == "01ABCDEF"
    assert got.message_group is None


def test_message_group_is_the_sharding_key() -> None:
    got = item(message(message_group="order-1", message_type=pb.FIFO))
    assert string_to_properties(got.header.properties)[PROPERTY_MESSAGE_GROUP] == "order-1"
    assert got.message_group == "order-1"
    assert refusal(message(message_type=pb.FIFO)).code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_born_time_defaults_to_now() -> None:
    assert item(message()).header.born_timestamp == NOW


@pytest.mark.parametrize("kind,checksum", [
    (pb.CRC32, format(zlib.crc32(b"hello"), "X")),
    (pb.MD5, hashlib.md5(b"hello").hexdigest().upper()),
    (pb.SHA1, hashlib.sha1(b"hello").hexdigest()),
])
def test_body_digest_checked(kind: int, checksum: str) -> None:
    good = message(body_digest=pb.Digest(type=kind, checksum=checksum))
    assert item(good).body == b"hello"
    bad = message(body=b"hellO", body_digest=pb.Digest(type=kind, checksum=checksum))
    assert refusal(bad).code == pb.MESSAGE_CORRUPTED


def test_crc32_without_leading_zeros() -> None:
    body = next(b for i in range(1000) if zlib.crc32(b := str(i).encode()) < 0x10000000)
    short = format(zlib.crc32(body), "X")
    assert len(short) < 8
    assert item(message(body=body, body_digest=pb.Digest(type=pb.CRC32, checksum=short))).body \
        == body


def test_gzip_body_inflated_and_bounded() -> None:
    got = item(message(body=gzip.compress(b"abc" * 50), body_encoding=pb.GZIP))
    assert got.body == b"abc" * 50
    digest = pb.Digest(type=pb.MD5, checksum=hashlib.md5(b"abc" * 50).hexdigest())
    assert item(message(body=gzip.compress(b"abc" * 50), body_encoding=pb.GZIP,
                        body_digest=digest)).body == b"abc" * 50
    bomb = message(body=gzip.compress(b"\0" * 100_000), body_encoding=pb.GZIP)
    assert refusal(bomb).code == pb.MESSAGE_BODY_TOO_LARGE
    assert refusal(message(body=b"nope", body_encoding=pb.GZIP)).code == pb.MESSAGE_CORRUPTED


def test_body_bounds() -> None:
    assert refusal(message(body=b"")).code == pb.MESSAGE_BODY_EMPTY
    assert refusal(message(body=b"x" * 1025)).code == pb.MESSAGE_BODY_TOO_LARGE


def test_hostile_properties_refused() -> None:
    msg = message()
    msg.user_properties["UNIQ_KEY"] = "forged"
    assert refusal(msg).code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    msg = message()
    msg.user_properties["a\x01b"] = "c"
    assert refusal(msg).code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    msg = message()
    msg.user_properties["a"] = "b\x02"
    assert refusal(msg).code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    assert refusal(message(tag="a||b")).code == pb.ILLEGAL_MESSAGE_TAG
    assert refusal(message(message_id="")).code == pb.ILLEGAL_MESSAGE_ID
    assert refusal(message(message_id="x\x01")).code == pb.ILLEGAL_MESSAGE_ID
    msg = message()
    msg.system_properties.keys.append("two words")
    assert refusal(msg).code == pb.ILLEGAL_MESSAGE_KEY
    msg = message()
    msg.topic.name = ""
    assert refusal(msg).code == pb.ILLEGAL_TOPIC


def test_a_transactional_message_is_a_half_message_of_its_topics_group() -> None:
    got = item(message(message_type=pb.TRANSACTION, tag="TagA"))
    props = string_to_properties(got.header.properties)
    assert props == {"TAGS": "TagA", "UNIQ_KEY": "01ABCDEF", "TRAN_MSG": "true"}
    assert got.header.producer_group == "T" and got.message_type == pb.TRANSACTION
    assert transaction_type(got.header.sys_flag) == TRANSACTION_PREPARED_TYPE
    assert sent_type(message(message_type=pb.TRANSACTION)) == "TRANSACTION"
    # others keep the group given and no transaction flag
    plain = item(message())
    assert plain.header.producer_group == "G" and plain.header.sys_flag == 0
    # a producer may not mark a message prepared itself, nor make it FIFO or delayed
    msg = message()
    msg.user_properties["TRAN_MSG"] = "true"
    assert refusal(msg).code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    assert refusal(message(message_type=pb.TRANSACTION, message_group="g")).code == \
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    msg = message(message_type=pb.TRANSACTION)
    msg.system_properties.delivery_timestamp.FromMilliseconds(NOW + 7000)
    assert refusal(msg).code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_delivery_time_to_delay_level() -> None:
    assert delay_level(NOW - 1, NOW, LEVELS) == 0
    assert delay_level(NOW + 1, NOW, LEVELS) == 1
    assert delay_level(NOW + 1000, NOW, LEVELS) == 1
    assert delay_level(NOW + 1001, NOW, LEVELS) == 2
    assert delay_level(NOW + 10 * 60_000, NOW, LEVELS) == 4


def test_delivery_time_becomes_a_timer() -> None:
    """Exact to the millisecond (the broker's timer), not rounded to a level."""
    msg = message(message_type=pb.DELAY)
    msg.system_properties.delivery_timestamp.FromMilliseconds(NOW + 7001)
    props = string_to_properties(item(msg).header.properties)
    assert props["TIMER_DELIVER_MS"] == str(NOW + 7001) and "DELAY" not in props
    msg.system_properties.delivery_timestamp.FromMilliseconds(NOW - 5)  # past: deliver now
    props = string_to_properties(item(msg).header.properties)
    assert "TIMER_DELIVER_MS" not in props and "DELAY" not in props
    msg.system_properties.delivery_timestamp.FromMilliseconds(NOW + MAX_DELAY_MS + 1)
    got = refusal(msg)
    assert got.code == pb.ILLEGAL_DELIVERY_TIME and "timerMaxDelaySec" in got.message
    msg.system_properties.delivery_timestamp.seconds = 2**62  # far past 64-bit ms
    assert refusal(msg).code == pb.ILLEGAL_DELIVERY_TIME
    msg.system_properties.delivery_timestamp.FromMilliseconds(NOW + 7000)
    msg.system_properties.message_group = "g"
    assert refusal(msg).code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_group_to_queue_is_stable_and_in_range() -> None:
    queues = {queue_for_group(f"g{i}", 8) for i in range(200)}
    assert queues == set(range(8))
    assert all(queue_for_group("same", 8) == queue_for_group("same", 8) for _ in range(3))


def test_queues_of_a_route() -> None:
    cfg = TopicConfig("T", read_queue_nums=4, write_queue_nums=2, perm=PERM_RW)
    queues = message_queues(cfg, "broker-a", 0, "10.0.0.1", 8081, "ns")
    assert [(q.id, q.permission) for q in queues] == [
        (0, pb.READ_WRITE), (1, pb.READ_WRITE), (2, pb.READ), (3, pb.READ)]
    q = queues[0]
    assert q.topic.name == "T" and q.topic.resource_namespace == "ns"
    assert q.broker.name == "broker-a" and q.broker.id == 0
    assert q.broker.endpoints.scheme == pb.IPv4
    assert [(a.host, a.port) for a in q.broker.endpoints.addresses] == [("10.0.0.1", 8081)]
    assert list(q.accept_message_types) == [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
    assert message_queues(cfg, "b", 0, "mq.example", 1)[0].broker.endpoints.scheme \
        == pb.DOMAIN_NAME
    assert permission(PERM_READ) == pb.READ and permission(PERM_WRITE) == pb.WRITE
    assert permission(0) == pb.NONE


def test_accept_types_from_the_message_type_attribute() -> None:
    assert accept_message_types({}) == [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
    assert accept_message_types({"message.type": "FIFO"}) == [pb.FIFO]
    assert accept_message_types({"message.type": "MIXED"}) == [
        pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
