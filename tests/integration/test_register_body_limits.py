"""A live name server answers a REGISTER_BROKER whose compressed body holds
millions of empty arrays in a topic's entry (msgpack, RocketMQ's JSON) with
SYSTEM_ERROR, its peak memory barely moved, and still takes a real
registration afterwards (namesrv/processor.py, BODY_ENTRY)."""

from __future__ import annotations

import zlib

from protocol.codecs import MSGPACK, ROCKETMQ_JSON, Codec
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from protocol.headers import RegisterBrokerRequestHeader
from protocol.route import TopicConfig
from tests.integration.cluster import Cluster
from tests.integration.decode_cost import peak_kib, reset_peak, send_frame

CODECS: tuple[Codec, ...] = (MSGPACK, ROCKETMQ_JSON)
ARRAYS = 2_000_000  # json.loads or msgpack of these built about 130 MiB
BROKER = "127.0.0.1:1"  # nothing listens there


def attack_body(codec: Codec) -> bytes:
    if codec is MSGPACK:
        value = b"\xdd" + ARRAYS.to_bytes(4, "big") + b"\x90" * ARRAYS
        return (b"\x81" + MSGPACK.pack_body("topicConfigTable") + b"\x81"
                + MSGPACK.pack_body("T") + value)
    return b'{"topicConfigTable":{"T":[' + b"[]," * (ARRAYS - 1) + b"[]]}}"


def register_frame(codec: Codec, body: bytes, opaque: int) -> bytes:
    packed = zlib.compress(body, 1)
    header = RegisterBrokerRequestHeader(broker_name="broker-x", broker_addr=BROKER,
                                         cluster_name="C", broker_id=0, compressed=True,
                                         body_crc32=zlib.crc32(packed) & 0x7FFFFFFF)
    cmd = RemotingCommand(code=RequestCode.REGISTER_BROKER, opaque=opaque,
                          ext_fields=header.to_fields(), body=packed, codec=codec)
    return encode_frame(codec.encode(cmd))


async def test_a_register_body_of_millions_of_arrays_is_refused_in_bounded_memory(
        cluster: Cluster) -> None:
    ns = cluster.namesrv()
    assert ns.proc is not None
    pid = ns.proc.pid
    for opaque, codec in enumerate(CODECS, 1):
        before = reset_peak(pid)
        resp = await send_frame(ns.port, register_frame(codec, attack_body(codec), opaque))
        grown_mib = (peak_kib(pid) - before) / 1024
        # the compressed frame, the JSON text (6 MiB) and its pieces; not the arrays
        assert grown_mib < 40, f"{codec.name}: the name server grew {grown_mib:.0f} MiB"
        assert resp is not None and resp.code == ResponseCode.SYSTEM_ERROR, resp
        assert "bad request: undecodable body" in (resp.remark or ""), resp.remark

    # a real registration, in each codec, still goes through (its connection
    # then closes, which unregisters it)
    for opaque, codec in enumerate(CODECS, 10):
        topic = f"Real_{codec.name.replace('-', '_')}"
        body = codec.pack_body({"dataVersion": {"timestamp": opaque, "counter": opaque},
                                "topicConfigTable": {topic: TopicConfig(topic, 4, 4).to_dict()}})
        resp = await send_frame(ns.port, register_frame(codec, body, opaque))
        assert resp is not None and resp.code == ResponseCode.SUCCESS, resp
    assert "REGISTER_BROKER failed" not in ns.log_text()
