"""Java-compatible hashes, so on-disk indexes match RocketMQ's."""

from __future__ import annotations


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode``: signed 32-bit, over UTF-16 code units."""
    h = 0
    if text.isascii():
        for ch in text.encode():
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        data = text.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def tags_hash_code(tags: str | None) -> int:
    """Tag hash stored in consume-queue entries (0 for no tag)."""
    return java_string_hash(tags) if tags else 0
