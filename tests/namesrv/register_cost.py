"""What one REGISTER_BROKER body costs the name server's parse: run as
``python -m tests.namesrv.register_cost KIND`` (KIND: msgpack-legit,
msgpack-attack, json-legit, json-attack). Drives ``parse_register_steps``
over the zlib body as the name server does and prints the result, the
number of steps, the longest step and the growth of peak RSS."""

from __future__ import annotations

import resource
import struct
import sys
import time
import zlib

from namesrv.processor import Inflating, RegisterBody, parse_register_steps
from protocol.codecs import MSGPACK, ROCKETMQ_JSON, Codec
from protocol.errors import RemoteProtocolError
from protocol.route import TopicConfig

MiB = 1024 * 1024


def body_of(kind: str) -> tuple[bytes, Codec]:
    names = [f"TopicTest_{i}" for i in range(100_000)]
    table = {"dataVersion": {"timestamp": 1, "counter": 1},
             "topicConfigTable": {n: TopicConfig(n, 8, 8).to_dict() for n in names}}
    if kind == "json-legit":
        return ROCKETMQ_JSON.pack_body(table), ROCKETMQ_JSON
    if kind == "msgpack-legit":
        return MSGPACK.pack_body(table), MSGPACK
    if kind == "json-attack":  # a long string (bytes for a count to allow), 1 M arrays
        n = 1_000_000
        return ('{"pad":"' + "x" * (64 * MiB - 3 * n - 200) + '","topicConfigTable":{"T":['
                + "[]," * (n - 1) + "[]]}}").encode(), ROCKETMQ_JSON
    n = 60 * MiB  # msgpack-attack: a topic entry of 60 M empty arrays
    return (b"\x81" + MSGPACK.pack_body("topicConfigTable") + b"\x81\xa1T\xdd"
            + struct.pack(">I", n) + b"\x90" * n), MSGPACK


def main(kind: str) -> None:
    body, codec = body_of(kind)
    packed = zlib.compress(body, 1)
    del body
    print(kind, "compressed", len(packed))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = RegisterBody()
    longest = 0.0
    steps = 0
    start = last = time.perf_counter()
    try:
        for _ in parse_register_steps(Inflating(packed, 64 * MiB), out, 1024, 1000, codec):
            now = time.perf_counter()
            longest, last, steps = max(longest, now - last), now, steps + 1
        result = f"registered {len(out.topics)} topics"
    except RemoteProtocolError as exc:
        result = f"refused: {str(exc)[:100]}"
    now = time.perf_counter()
    longest = max(longest, now - last)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
    print(f"{result}; {steps} steps, longest {longest * 1000:.1f} ms, "
          f"total {(now - start) * 1000:.0f} ms, peak RSS +{grown} MiB")


if __name__ == "__main__":
    main(sys.argv[1])
