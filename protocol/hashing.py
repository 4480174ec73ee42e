"""Java-compatible hashes, so on-disk indexes match RocketMQ's."""

from __future__ import annotations

from operator import mul

_MAX_FAST = 512
# 31**k mod 2**32, highest power first for a string of _MAX_FAST units
_POWERS = [pow(31, k, 2**32) for k in range(_MAX_FAST - 1, -1, -1)]


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode``: signed 32-bit, over UTF-16 code units."""
    if text.isascii():
        units: bytes | list[int] = text.encode()
    else:
        data = text.encode("utf-16-be")
        units = [(data[i] << 8) | data[i + 1] for i in range(0, len(data), 2)]
    n = len(units)
    if n <= _MAX_FAST:
        # sum of unit * 31**(n-1-i), done in C by map/sum
        h = sum(map(mul, units, _POWERS[_MAX_FAST - n :])) & 0xFFFFFFFF
    else:
        h = 0
        for unit in units:
            h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def tags_hash_code(tags: str | None) -> int:
    """Tag hash stored in consume-queue entries (0 for no tag)."""
    return java_string_hash(tags) if tags else 0
