"""A producer compresses large single bodies as RocketMQ's clients do."""

from __future__ import annotations

import os
import zlib

import pytest

from client import Message, MQClientError, Producer
from protocol.codes import RequestCode
from protocol.record import FLAG_COMPRESSED
from tests.client.fakes import FakeCluster

TOPIC = FakeCluster.TOPIC


def sent(cluster: FakeCluster) -> list:
    return [r for b in cluster.brokers for r in b.requests_of(RequestCode.SEND_MESSAGE)]


async def test_bodies_from_the_threshold_are_sent_compressed(cluster: FakeCluster) -> None:
    text = b"a compressible line of text\n" * 200  # 5,600 bytes
    small = text[:4095]
    async with Producer("compress_group", cluster.namesrv_addr) as producer:
        await producer.send(Message(TOPIC, small))
        await producer.send(Message(TOPIC, text[:4096]))
        await producer.send(Message(TOPIC, text))
    plain = [r for r in sent(cluster) if r.ext_fields["sysFlag"] == 0]
    packed = [r for r in sent(cluster) if r.ext_fields["sysFlag"] == FLAG_COMPRESSED]
    assert [r.body for r in plain] == [small]
    assert sorted(zlib.decompress(r.body) for r in packed) == [text[:4096], text]
    assert all(len(r.body) < 4096 // 4 for r in packed)


async def test_incompressible_bodies_and_batches_go_as_they_are(cluster: FakeCluster) -> None:
    noise = os.urandom(8192)
    async with Producer("compress_group", cluster.namesrv_addr) as producer:
        await producer.send(Message(TOPIC, noise))
        await producer.send_batch([Message(TOPIC, b"x" * 8192), Message(TOPIC, b"y" * 8192)])
    (single,) = sent(cluster)
    assert single.ext_fields["sysFlag"] == 0 and single.body == noise
    (batch,) = [r for b in cluster.brokers for r in b.requests_of(RequestCode.SEND_BATCH_MESSAGE)]
    assert batch.ext_fields["sysFlag"] == 0 and b"x" * 8192 in batch.body


async def test_threshold_and_level_are_settings(cluster: FakeCluster) -> None:
    body = b"0123456789" * 100
    async with Producer("compress_group", cluster.namesrv_addr,
                        compress_msg_body_over_howmuch=100, compress_level=9) as producer:
        await producer.send(Message(TOPIC, body))
    async with Producer("compress_group", cluster.namesrv_addr,
                        compress_msg_body_over_howmuch=0) as producer:
        await producer.send(Message(TOPIC, body * 10))
    compressed, plain = sorted(sent(cluster), key=lambda r: len(r.body))
    assert compressed.ext_fields["sysFlag"] == FLAG_COMPRESSED
    assert compressed.body == zlib.compress(body, 9)
    assert plain.ext_fields["sysFlag"] == 0 and plain.body == body * 10


def test_bad_compression_settings_are_refused() -> None:
    with pytest.raises(MQClientError, match="compress_msg_body_over_howmuch"):
        Producer("g", compress_msg_body_over_howmuch=-1)
    with pytest.raises(MQClientError, match="compress_level"):
        Producer("g", compress_level=10)
