"""bench.redis_streams: the RESP codec, the table, and one short run against a
real redis-server (installed by make test as root on Debian)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from bench.redis_streams import (
    RespError,
    encode_command,
    read_reply,
    run,
    table_rows,
)


def test_encode_command_is_an_array_of_bulk_strings() -> None:
    assert encode_command(b"XADD", b"s", b"*", b"body", b"") == (
        b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$4\r\nbody\r\n$0\r\n\r\n")


def test_read_reply_kinds() -> None:
    f = io.BytesIO(b"+PONG\r\n:42\r\n$3\r\na\r\n\r\n$-1\r\n*-1\r\n"
                   b"*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$4\r\nbody\r\n$1\r\nx\r\n:7\r\n")
    assert read_reply(f) == b"PONG"
    assert read_reply(f) == 42
    assert read_reply(f) == b"a\r\n"  # a bulk string is read by length, not by line
    assert read_reply(f) is None
    assert read_reply(f) is None
    assert read_reply(f) == [[b"1-0", [b"body", b"x"]], 7]
    with pytest.raises(RespError, match="WRONGTYPE"):
        read_reply(io.BytesIO(b"-WRONGTYPE no\r\n"))
    for broken in (b"", b"$5\r\nab", b"+no end", b"?what\r\n"):
        with pytest.raises(RespError):
            read_reply(io.BytesIO(broken))


def test_table_rows_name_the_rows_as_make_bench() -> None:
    lat = {"p50": 90.4, "p90": 100.0, "p99": 190.0, "p99.9": 1500.0}
    results = {"batched_everysec": {"msgs_per_s": 160000.4, "latency_us": lat},
               "read": {"msgs_per_s": 116000.0}}
    rows = {r[0]: r[1] for r in table_rows(results, 1000, 100)}
    assert rows["batched produce ASYNC msg/s"] == "160,000"
    assert rows["consume pull msg/s"] == "116,000"
    assert rows["batched produce ASYNC request p99/p99.9 ms"] == "0.19 / 1.50"
    assert rows["single send SYNC p50/p99 µs"] == "n/a"


@pytest.mark.skipif(shutil.which("redis-server") is None,
                    reason="redis-server is not installed (make test installs it as root on Debian)")
def test_a_short_run_against_redis(tmp_path: Path) -> None:
    results = run(2_000, 200, str(tmp_path))
    assert results["batched_everysec"]["count"] == 2_000
    assert results["read"]["count"] == 2_000  # every entry written is read back
    assert results["single_always"]["count"] == 200
    assert all(r["msgs_per_s"] > 0 for r in results.values())
    assert list(tmp_path.iterdir()) == []  # the servers' files are gone
