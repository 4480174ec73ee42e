"""``CommitLog._encode``'s loop written to be compiled by Cython (pure Python mode).

``encode_records`` lays out the records of a put, one after another in one
buffer, as ``CommitLog._encode`` does with ``RECORD_HEAD.pack`` and a join: the
88-byte head (big-endian fields, the layout of ``protocol.record``), the body,
the topic field and the properties field. It also makes each record's dispatch
request and notes its offset. The head's fields are written a byte at a time:
slow as plain Python, a few instructions compiled. The tests run this source as
plain Python and compiled against ``_encode``'s own loop.

``deploy/speedups.py`` compiles it into ``broker.store._record_kernel_c`` with
this file's SHA-256 inside; ``commit_log.py`` uses the compiled module only
when that matches. A value that does not fit its field raises OverflowError
(``struct.error`` in the reference loop); the caller treats both alike.
"""

from __future__ import annotations

from typing import Any

import cython


@cython.cfunc
@cython.inline
@cython.boundscheck(True)
@cython.wraparound(False)
def _put(out: cython.uchar[::1], at: cython.Py_ssize_t, value: cython.longlong,
         width: cython.int) -> cython.Py_ssize_t:
    """Write ``value`` big-endian in ``width`` bytes at ``at``; the next position."""
    i: cython.int
    for i in range(width):
        out[at + width - 1 - i] = value & 0xFF
        value >>= 8
    return at + width


@cython.cfunc
@cython.inline
def _int32(value: cython.longlong, what: str) -> cython.longlong:
    if value < -2147483648 or value > 2147483647:
        raise OverflowError(f"{what} {value} does not fit 4 bytes")
    return value


@cython.cfunc
@cython.inline
def _int64(value: cython.longlong, what: str) -> cython.longlong:
    if value < -9223372036854775807 - 1 or value > 9223372036854775807:
        raise OverflowError(f"{what} {value} does not fit 8 bytes")
    return value


@cython.cfunc
@cython.inline
@cython.boundscheck(True)
@cython.wraparound(False)
def _put8s(out: cython.uchar[::1], at: cython.Py_ssize_t, field: bytes) -> cython.Py_ssize_t:
    """``field`` in 8 bytes at ``at``, zero-padded or cut (struct's ``8s``)."""
    n: cython.Py_ssize_t = len(field)
    i: cython.Py_ssize_t
    for i in range(8):
        out[at + i] = field[i] if i < n else 0
    return at + 8


@cython.boundscheck(True)
@cython.wraparound(False)
def encode_records(encoded: list, wrote_offset: Any, total: Any, queue_offset: Any,
                   queue_offsets: list | None, now: Any, store_host: bytes, schedule_topic: str,
                   schedule_levels: dict, dispatch_type: type, pack_host: Any) -> tuple:
    """The records of ``encoded`` ((message, topic field, properties field,
    record size, body CRC) each) appended at commit-log offset
    ``wrote_offset``: (their bytes, a dispatch request each, each record's
    offset). Queue offsets run from ``queue_offset``, or are ``queue_offsets``."""
    n: cython.Py_ssize_t = len(encoded)
    size_all: cython.Py_ssize_t = total
    data = bytearray(size_all)
    out: cython.uchar[::1] = data
    dispatches: list = []
    offsets: list = []
    at: cython.Py_ssize_t = 0
    start: cython.Py_ssize_t
    phys: cython.longlong = _int64(wrote_offset, "commit-log offset")
    qoff: cython.longlong = _int64(queue_offset, "queue offset")
    store_ts: cython.longlong = _int64(now, "store timestamp")
    size: cython.longlong
    queue_id: cython.longlong
    sys_flag: cython.longlong
    i: cython.Py_ssize_t
    magic: cython.longlong = 0xDAA320A7  # protocol.record.MESSAGE_MAGIC_CODE
    born_host: object = None
    born_field: bytes = b""
    new = tuple.__new__
    for i in range(n):
        m, topic_field, props_field, size_obj, crc = encoded[i]
        if queue_offsets is not None:
            qoff = _int64(queue_offsets[i], "queue offset")
        body = m.body
        if isinstance(body, (bytearray, memoryview)):
            body = bytes(body)  # a message rebuilt from a stored record may hold a view
        if born_host is None or m.born_host is not born_host:
            born_host = m.born_host
            born_field = pack_host(born_host)
        size = _int32(size_obj, "record size")
        queue_id = _int32(m.queue_id, "queue id")
        sys_flag = _int32(m.sys_flag, "sys flag")
        start = at
        # checked before anything is written: a slice assignment never resizes the buffer
        if 88 + len(body) + len(topic_field) + len(props_field) != size:
            raise ValueError(f"record {i}'s parts do not add up to its size {size}")
        if start + size > size_all:
            raise ValueError(f"record {i} runs past the {size_all} bytes expected")
        at = _put(out, at, size, 4)
        at = _put(out, at, magic, 4)
        at = _put(out, at, _int32(crc, "body CRC"), 4)
        at = _put(out, at, queue_id, 4)
        at = _put(out, at, _int32(m.flag, "flag"), 4)
        at = _put(out, at, qoff, 8)
        at = _put(out, at, phys, 8)
        at = _put(out, at, sys_flag, 4)
        at = _put(out, at, _int64(m.born_timestamp, "born timestamp"), 8)
        at = _put8s(out, at, born_field)
        at = _put(out, at, store_ts, 8)
        at = _put8s(out, at, store_host)
        at = _put(out, at, _int32(m.reconsume_times, "reconsume times"), 4)
        at = _put(out, at, _int64(m.prepared_transaction_offset, "prepared offset"), 8)
        at = _put(out, at, _int32(len(body), "body length"), 4)
        # the variable parts copied by the bytearray (one memcpy each)
        data[at:at + len(body)] = body
        at += len(body)
        data[at:at + len(topic_field)] = topic_field
        at += len(topic_field)
        data[at:at + len(props_field)] = props_field
        at += len(props_field)
        topic = m.topic
        tags_code = m.tags_code
        if topic == schedule_topic:
            tags_code = store_ts + schedule_levels.get(queue_id + 1, 0)
        dispatches.append(new(dispatch_type, (
            topic, queue_id, phys, size, tags_code, store_ts, qoff, m.keys, m.uniq_key,
            sys_flag)))
        offsets.append(phys)
        phys += size
        qoff += 1
    if at != size_all:
        raise ValueError(f"the records are {at} bytes, not the {size_all} expected")
    return data, dispatches, offsets
