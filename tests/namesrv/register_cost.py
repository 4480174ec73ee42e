"""What one REGISTER_BROKER body costs the name server's parse: run as
``python -m tests.namesrv.register_cost KIND`` (KIND: msgpack-legit,
msgpack-attack, msgpack-values, json-legit, json-attack, json-values,
json-space, json-number). Drives ``parse_register_steps`` over the zlib
body as the name server does and prints the result, the number of steps, the longest step
(wall time, and the thread's CPU time, which a loaded machine does not
stretch) and the growth of peak RSS (VmHWM, reset once the body is built,
less the RSS then)."""

from __future__ import annotations

import os
import struct
import sys
import time
import zlib

from namesrv.processor import Inflating, RegisterBody, parse_register_steps
from protocol.codecs import MSGPACK, ROCKETMQ_JSON, Codec
from protocol.errors import RemoteProtocolError
from protocol.route import TopicConfig
from tests.integration.decode_cost import peak_kib, reset_peak

MiB = 1024 * 1024


def body_of(kind: str) -> tuple[bytes, Codec]:
    names = [f"TopicTest_{i}" for i in range(100_000)]
    table = {"dataVersion": {"timestamp": 1, "counter": 1},
             "topicConfigTable": {n: TopicConfig(n, 8, 8).to_dict() for n in names}}
    if kind == "json-legit":
        return ROCKETMQ_JSON.pack_body(table), ROCKETMQ_JSON
    if kind == "msgpack-legit":
        return MSGPACK.pack_body(table), MSGPACK
    if kind.endswith("-values"):  # 64 MiB of unknown keys, each a string of almost 16 KiB
        values = {f"k{i}": "x" * 16_000 for i in range(64 * MiB // 16_010)}
        codec = ROCKETMQ_JSON if kind.startswith("json") else MSGPACK
        return codec.pack_body(values), codec
    if kind == "json-space":  # 64 MiB of whitespace between two keys
        return (b'{"topicConfigTable":{},' + b" " * (64 * MiB - 100) + b'"k":1}'), ROCKETMQ_JSON
    if kind == "json-number":  # a number of 64 MiB of digits
        return b'{"topicConfigTable":{},"n":1.' + b"5" * (64 * MiB - 100) + b"}", ROCKETMQ_JSON
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
    before = reset_peak(os.getpid())
    out = RegisterBody()
    longest = longest_cpu = 0.0
    steps = 0
    start = last = time.perf_counter()
    last_cpu = time.thread_time()
    try:
        for _ in parse_register_steps(Inflating(packed, 64 * MiB), out, 1024, 1000, codec):
            now, cpu = time.perf_counter(), time.thread_time()
            longest, longest_cpu = max(longest, now - last), max(longest_cpu, cpu - last_cpu)
            last, last_cpu, steps = now, cpu, steps + 1
        result = f"registered {len(out.topics)} topics"
    except RemoteProtocolError as exc:
        result = f"refused: {str(exc)[:100]}"
    now, cpu = time.perf_counter(), time.thread_time()
    longest, longest_cpu = max(longest, now - last), max(longest_cpu, cpu - last_cpu)
    grown = (peak_kib(os.getpid()) - before) // 1024
    print(f"{result}; {steps} steps, longest {longest * 1000:.1f} ms "
          f"(CPU {longest_cpu * 1000:.1f} ms), total {(now - start) * 1000:.0f} ms, "
          f"peak RSS +{grown} MiB")

if __name__ == "__main__":
    main(sys.argv[1])
