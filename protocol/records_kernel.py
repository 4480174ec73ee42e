"""A pull response body's records into messages, written to be compiled by
Cython (pure Python mode).

``decode_records`` walks the records of one pull body (protocol/record.py's
layout) and makes one message of each, as ``protocol.record.decode_records``
does: the head's fields read in place (no tuple of 15 values a record), the
topic names and hosts decoded once a body. It gives up (None) on anything out
of the ordinary: a size, magic code or length that does not hold, properties
that are not UTF-8, a topic name that is not, or (``verify_crc``) a body that
does not match its BODYCRC; the caller then decodes the body with its own
loop, which says what is wrong. What it does make is what that loop makes,
field for field; the tests compare the two, with this source run as plain
Python and compiled.

``deploy/speedups.py`` compiles it into ``protocol._records_kernel_c`` with
this file's SHA-256 in it; ``protocol/record.py`` uses the compiled module
only when that matches this source.
"""

from __future__ import annotations

from collections.abc import Callable

import cython


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
def _u32(d: cython.const[cython.uchar][::1],  # type: ignore[valid-type]
         at: cython.Py_ssize_t) -> cython.longlong:
    """The unsigned big-endian 4-byte integer at ``at`` (in bounds)."""
    value: cython.longlong = 0
    i: cython.int
    for i in range(4):
        value = (value << 8) | cython.cast(cython.longlong, d[at + i])
    return value


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
def _i32(d: cython.const[cython.uchar][::1],  # type: ignore[valid-type]
         at: cython.Py_ssize_t) -> cython.longlong:
    """The signed big-endian 4-byte integer at ``at`` (in bounds)."""
    value: cython.longlong = _u32(d, at)
    if value >= 0x80000000:
        value -= 0x100000000
    return value


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
def _i64(d: cython.const[cython.uchar][::1],  # type: ignore[valid-type]
         at: cython.Py_ssize_t) -> cython.longlong:
    """The signed big-endian 8-byte integer at ``at`` (in bounds): the high
    half signed, the low half not, so no step overflows."""
    return _i32(d, at) * 0x100000000 + _u32(d, at + 4)


@cython.boundscheck(False)
@cython.wraparound(False)
def decode_records(data: bytes, verify_crc: cython.bint, crc32: Callable[[bytes], int],
                   make: Callable[..., object], unpack_host: Callable[[bytes], str]
                   ) -> list | None:
    """The messages ``make(...)`` of the records of ``data`` (a pull body), as
    ``protocol.record._decode_at`` passes their fields, or None to leave the
    body to that loop."""
    d: cython.const[cython.uchar][::1] = data  # type: ignore[valid-type]
    limit: cython.Py_ssize_t = len(data)
    pos: cython.Py_ssize_t = 0
    end: cython.Py_ssize_t
    total: cython.longlong
    body_len: cython.longlong
    props_len: cython.longlong
    crc: cython.longlong
    topic_at: cython.Py_ssize_t
    props_at: cython.Py_ssize_t
    head: cython.Py_ssize_t = 88  # TOTALSIZE .. BODY length
    out: list = []
    topics: dict = {}
    hosts: dict = {}
    id_heads: dict = {}
    while pos < limit:
        if limit - pos < head + 3:
            return None
        total = _i32(d, pos)
        if _u32(d, pos + 4) != 0xDAA320A7 or total < head + 3 or total > limit - pos:
            return None
        end = pos + total
        body_len = _i32(d, pos + 84)
        if body_len < 0 or body_len > total - head - 3:
            return None
        topic_at = pos + head + body_len
        props_at = topic_at + 3 + d[topic_at]
        if props_at > end:
            return None
        props_len = (d[props_at - 2] << 8) | d[props_at - 1]
        if props_len >= 0x8000 or props_at + props_len != end:
            return None
        body = data[pos + head:topic_at]
        crc = _i32(d, pos + 8)
        if verify_crc and (crc32(body) & 0x7FFFFFFF) != crc:
            return None
        topic_b = data[topic_at + 1:props_at - 2]
        topic = topics.get(topic_b)
        if topic is None:
            try:
                topic = topics[topic_b] = topic_b.decode()
            except UnicodeDecodeError:
                return None
        born_b = data[pos + 48:pos + 56]
        born = hosts.get(born_b)
        if born is None:
            born = hosts[born_b] = unpack_host(born_b)
        store_b = data[pos + 64:pos + 72]
        stored = hosts.get(store_b)
        if stored is None:
            stored = hosts[store_b] = unpack_host(store_b)
        id_head = id_heads.get(store_b)
        if id_head is None:
            id_head = id_heads[store_b] = store_b.hex().upper()
        if props_at < end:
            try:
                text = data[props_at:end].decode()
            except UnicodeDecodeError:
                return None
        else:
            text = ""
        out.append(make(topic, body, None, _i32(d, pos + 16), _i32(d, pos + 12),
                        _i64(d, pos + 20), _i64(d, pos + 28), _i32(d, pos + 36),
                        _i64(d, pos + 40), born, _i64(d, pos + 56), stored,
                        _i32(d, pos + 72), _i64(d, pos + 76), crc, total, None, text, id_head))
        pos = end
    return out
