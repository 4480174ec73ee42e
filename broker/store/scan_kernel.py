"""Stored commit-log records into dispatch requests, grouped by queue, written
to be compiled by Cython (pure Python mode).

A slave's appends and recovery dispatch records they did not write: the store
reads each one's dispatch request back from the log. ``scan_records`` walks
the message records of one commit-log file from a position and reads in place
only what a ``DispatchRequest`` holds (topic, queue id, commit-log offset,
size, tags hash code, store time, queue offset, the KEYS and UNIQ_KEY
properties, sys flag), with no message object and no properties dict made on
the way. Consecutive records of one topic and queue, at consecutive queue
offsets, form a group: the dispatchers' ``dispatch_batch`` takes a group as
it takes a put's records.

It stops (before the record) at anything out of the ordinary, for the
store's per-record walk to sort out and say what is wrong: the end of the
written bytes, a BLANK, a record cut by the end or whose sizes do not add up
(``protocol.record.check_record``'s checks), a topic or properties that are
not UTF-8. What it does return is what ``decode_record`` and the store's
``_dispatch_request`` make of the same records; the tests compare the two,
with this source run as plain Python and compiled. The store runs its own
Python twin of this loop (``broker/store/replica_dispatch.py``'s
``scan_loop``) where the compiled module is not in use.

``deploy/speedups.py`` compiles it into ``broker.store._scan_kernel_c`` with
this file's SHA-256 in it; the store uses the compiled module only when that
matches this source.
"""

from __future__ import annotations

from collections.abc import Callable

import cython

if cython.compiled:  # str straight from the buffer's bytes
    from cython.cimports.cpython.unicode import PyUnicode_DecodeUTF8

_HEAD = 88  # protocol.record.RECORD_HEAD_SIZE: TOTALSIZE .. BODY length
_MAGIC = -626843481  # MESSAGE_MAGIC_CODE 0xDAA320A7, as a signed 4-byte field
_CACHE_MAX = 4096  # tags codes kept between calls


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
def _get(d: cython.const[cython.uchar][::1],  # type: ignore[valid-type]
         at: cython.Py_ssize_t, width: cython.int) -> cython.longlong:
    """The signed big-endian integer of ``width`` bytes at ``at`` (in bounds).
    batch_records_kernel has the same helper: each kernel is compiled on its
    own (deploy/speedups.py), and an inline C function is not shared between
    modules without a .pxd."""
    value: cython.longlong = 0
    i: cython.int
    for i in range(width):
        value = (value << 8) | d[at + i]
    if value >= (cython.cast(cython.longlong, 1) << (8 * width - 1)):
        value -= cython.cast(cython.longlong, 1) << (8 * width)
    return value


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _same(d: cython.const[cython.uchar][::1],  # type: ignore[valid-type]
          at: cython.Py_ssize_t, length: cython.Py_ssize_t, name: bytes) -> cython.bint:
    """Whether the ``length`` bytes at ``at`` are ``name``."""
    i: cython.Py_ssize_t
    if length != len(name):
        return False
    for i in range(length):
        if d[at + i] != name[i]:
            return False
    return True


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _text(buf: object, d: cython.const[cython.uchar][::1],  # type: ignore[valid-type]
          at: cython.Py_ssize_t, end: cython.Py_ssize_t) -> str:
    """The UTF-8 text of ``buf[at:end]`` (in bounds); raises UnicodeDecodeError."""
    if cython.compiled:
        if end <= at:
            return ""
        return PyUnicode_DecodeUTF8(  # type: ignore[no-any-return]
            cython.cast(cython.p_char, cython.address(d[at])), end - at, cython.NULL)
    return bytes(buf[at:end]).decode("utf-8")  # type: ignore[index]


@cython.boundscheck(True)
@cython.wraparound(False)
def scan_records(buf: object, pos: cython.Py_ssize_t, limit: cython.Py_ssize_t,
                 max_records: cython.Py_ssize_t, topics: dict, tag_codes: dict,
                 tags_hash: Callable[[str], int], schedule_topic: str, delay_levels: dict,
                 new_tuple: Callable[..., tuple], request: type) -> tuple:
    """(groups, stop): the message records of ``buf`` (one commit-log file,
    its bytes written up to ``limit``) from ``pos`` on, at most
    ``max_records``, and where the walk stopped (see above).

    ``groups`` holds (requests, end) for each group: its dispatch requests,
    ``new_tuple(request, fields)`` each, and the position after its last
    record. ``topics`` maps a topic's bytes to its name (filled here);
    ``tag_codes`` a TAGS value to ``tags_hash(value)`` (filled here, emptied
    past 4096 names); a record of ``schedule_topic`` has the tags code store
    time + ``delay_levels[queue id + 1]`` (0 when not there)."""
    d = cython.declare(cython.const[cython.uchar][::1], buf)
    if limit > len(d):
        limit = len(d)
    sep: cython.uchar = 2  # \x02 between properties (typed: C values compiled)
    kv: cython.uchar = 1  # \x01 between a property's name and its value
    head: cython.Py_ssize_t = _HEAD
    magic_code: cython.longlong = _MAGIC
    tags_name: bytes = b"TAGS"
    keys_name: bytes = b"KEYS"
    uniq_name: bytes = b"UNIQ_KEY"
    groups: list = []
    group: list = []
    count: cython.Py_ssize_t = 0
    total: cython.longlong
    body_len: cython.longlong
    props_len: cython.longlong
    queue_id: cython.longlong
    queue_offset: cython.longlong
    store_ms: cython.longlong
    end: cython.Py_ssize_t
    topic_at: cython.Py_ssize_t
    topic_len: cython.Py_ssize_t
    props_at: cython.Py_ssize_t
    entry: cython.Py_ssize_t
    name_end: cython.Py_ssize_t
    p: cython.Py_ssize_t
    tags_at: cython.Py_ssize_t
    tags_end: cython.Py_ssize_t
    keys_at: cython.Py_ssize_t
    keys_end: cython.Py_ssize_t
    uniq_at: cython.Py_ssize_t
    uniq_end: cython.Py_ssize_t
    ascii: cython.bint
    c: cython.uchar
    last_qid: cython.longlong = -1
    last_qoff: cython.longlong = -1
    topic_b: bytes = b""
    topic: object = None
    last_topic: object = None
    while count < max_records and limit - pos >= head + 3:
        total = _get(d, pos, 4)
        if _get(d, pos + 4, 4) != magic_code or total < head + 3 or total > limit - pos:
            break
        end = pos + total
        body_len = _get(d, pos + 84, 4)
        if body_len < 0 or body_len > total:
            break
        topic_at = pos + head + body_len
        if topic_at + 3 > end:
            break
        topic_len = d[topic_at]
        props_at = topic_at + 3 + topic_len
        if props_at > end:
            break
        props_len = _get(d, props_at - 2, 2)
        if props_len < 0 or props_at + props_len != end:
            break
        # the topic: the previous record's as a rule
        if topic is None or not _same(d, topic_at + 1, topic_len, topic_b):
            topic_b = bytes(buf[topic_at + 1:topic_at + 1 + topic_len])  # type: ignore[index]
            topic = topics.get(topic_b)
            if topic is None:
                try:
                    topic = topic_b.decode("utf-8")
                except UnicodeDecodeError:
                    break
                topics[topic_b] = topic
        # the properties: UTF-8, and where the last TAGS, KEYS and UNIQ_KEY
        # values are (as string_to_properties(text).get(name) finds them)
        ascii = True
        tags_at = keys_at = uniq_at = -1
        tags_end = keys_end = uniq_end = -1
        entry = props_at
        while entry < end:
            name_end = -1
            p = entry
            while p < end:
                c = d[p]
                if c == sep:
                    break
                if c >= 0x80:
                    ascii = False
                elif c == kv and name_end < 0:
                    name_end = p
                p += 1
            if name_end >= 0:
                if _same(d, entry, name_end - entry, uniq_name):
                    uniq_at, uniq_end = name_end + 1, p
                elif _same(d, entry, name_end - entry, tags_name):
                    tags_at, tags_end = name_end + 1, p
                elif _same(d, entry, name_end - entry, keys_name):
                    keys_at, keys_end = name_end + 1, p
            entry = p + 1
        if not ascii:
            try:
                _text(buf, d, props_at, end)
            except UnicodeDecodeError:
                break
        queue_id = _get(d, pos + 12, 4)
        queue_offset = _get(d, pos + 20, 8)
        store_ms = _get(d, pos + 56, 8)
        if topic == schedule_topic:
            tags_code = store_ms + delay_levels.get(queue_id + 1, 0)
        elif tags_end > tags_at:
            tags = _text(buf, d, tags_at, tags_end)
            tags_code = tag_codes.get(tags)
            if tags_code is None:
                if len(tag_codes) >= _CACHE_MAX:
                    tag_codes.clear()
                tags_code = tag_codes[tags] = tags_hash(tags)
        else:
            tags_code = 0
        req = new_tuple(request, (
            topic, queue_id, _get(d, pos + 28, 8), total, tags_code, store_ms, queue_offset,
            _text(buf, d, keys_at, keys_end) if keys_at >= 0 else None,
            _text(buf, d, uniq_at, uniq_end) if uniq_at >= 0 else None,
            _get(d, pos + 36, 4)))
        if group and not (topic is last_topic and queue_id == last_qid
                          and queue_offset == last_qoff + 1):
            groups.append((group, pos))
            group = []
        group.append(req)
        last_topic, last_qid, last_qoff = topic, queue_id, queue_offset
        count += 1
        pos = end
    if group:
        groups.append((group, pos))
    return groups, pos
