"""Dispatch requests read back from stored records, in groups: what a slave's
appends and recovery dispatch (``DefaultMessageStore._dispatch_to_end``).

``scan_loop`` is ``scan_kernel.scan_records`` in plain Python (``struct``,
``find_property``): the same groups and stop for the same bytes. The store
takes the compiled kernel when built (``compiled_scan``) and this loop
otherwise; the tests compare both with ``decode_record``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.store.commit_log import DispatchRequest
from protocol.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, find_property
from protocol.record import MESSAGE_MAGIC_CODE, RECORD_HEAD_SIZE
from protocol.speedups import compiled

# TOTALSIZE, MAGICCODE, QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG,
# STORETIMESTAMP, BODY length (protocol/record.py's layout; the rest skipped)
SCAN_HEAD = struct.Struct(">iI4xi4xqqi16xq20xi")
assert SCAN_HEAD.size == RECORD_HEAD_SIZE
_PROPS_LEN = struct.Struct(">h")
_CACHE_MAX = 4096  # tags codes kept between calls (scan_kernel's too)
MAX_RECORDS = 1024  # records one scan reads at most (a bound on the requests held)

# (requests, position after the group's last record) per group, where the scan stopped
ScanResult = tuple[list[tuple[list[DispatchRequest], int]], int]
Scan = Callable[..., ScanResult]


def compiled_scan() -> Scan | None:
    """``scan_kernel.scan_records`` compiled (deploy/speedups.py), when built
    from the source beside this file and not turned off; else None."""
    return compiled("broker.store._scan_kernel_c", Path(__file__).with_name("scan_kernel.py"),
                    "scan_records")


def scan_loop(buf: Any, pos: int, limit: int, max_records: int, topics: dict[bytes, str],
              tag_codes: dict[str, int], tags_hash: Callable[[str], int], schedule_topic: str,
              delay_levels: dict[int, int], new_tuple: Callable[..., Any],
              request: type) -> ScanResult:
    """``scan_kernel.scan_records``, in plain Python (see there)."""
    limit = min(limit, len(buf))
    unpack_head = SCAN_HEAD.unpack_from
    unpack_props_len = _PROPS_LEN.unpack_from
    groups: list[tuple[list[DispatchRequest], int]] = []
    group: list[DispatchRequest] = []
    add = group.append
    count = 0
    last: tuple[object, int, int] | None = None
    tags_probe, keys_probe = PROPERTY_TAGS + "\x01", PROPERTY_KEYS + "\x01"
    uniq_probe = PROPERTY_UNIQ_KEY + "\x01"
    while count < max_records and limit - pos >= RECORD_HEAD_SIZE + 3:
        (total, magic, queue_id, queue_offset, phys, sys_flag, store_ms,
         body_len) = unpack_head(buf, pos)
        if magic != MESSAGE_MAGIC_CODE or total < RECORD_HEAD_SIZE + 3 or total > limit - pos:
            break
        end = pos + total
        if body_len < 0 or body_len > total:
            break
        topic_at = pos + RECORD_HEAD_SIZE + body_len
        if topic_at + 3 > end:
            break
        props_at = topic_at + 3 + buf[topic_at]
        if props_at > end:
            break
        (props_len,) = unpack_props_len(buf, props_at - 2)
        if props_len < 0 or props_at + props_len != end:
            break
        topic_b = bytes(buf[topic_at + 1 : props_at - 2])
        topic = topics.get(topic_b)
        if topic is None:
            try:
                topic = topic_b.decode()
            except UnicodeDecodeError:
                break
            topics[topic_b] = topic
        try:
            text = bytes(buf[props_at:end]).decode() if props_len else ""
        except UnicodeDecodeError:
            break
        if topic == schedule_topic:
            tags_code = store_ms + delay_levels.get(queue_id + 1, 0)
        else:
            tags = find_property(text, PROPERTY_TAGS) if tags_probe in text else None
            if tags:
                code = tag_codes.get(tags)
                if code is None:
                    if len(tag_codes) >= _CACHE_MAX:
                        tag_codes.clear()
                    code = tag_codes[tags] = tags_hash(tags)
                tags_code = code
            else:
                tags_code = 0
        req = new_tuple(request, (
            topic, queue_id, phys, total, tags_code, store_ms, queue_offset,
            find_property(text, PROPERTY_KEYS) if keys_probe in text else None,
            find_property(text, PROPERTY_UNIQ_KEY) if uniq_probe in text else None, sys_flag))
        if last is not None and not (topic is last[0] and queue_id == last[1]
                                     and queue_offset == last[2] + 1):
            groups.append((group, pos))
            group = []
            add = group.append
        add(req)
        last = (topic, queue_id, queue_offset)
        count += 1
        pos = end
    if group:
        groups.append((group, pos))
    return groups, pos


__all__ = ["MAX_RECORDS", "SCAN_HEAD", "Scan", "ScanResult", "compiled_scan", "scan_loop"]
