"""Reading stored records back, written to be compiled by Cython (pure Python
mode): a pull's walk over its consume-queue entries and its CRC checks (the
broker's side), and a pull body's records decoded into messages (the
consumers' side).

``scan_entries`` does what ``DefaultMessageStore.get_message``'s loop does
with the raw consume-queue entries of one pull (20 bytes each: commit-log
offset, size, tag code, big-endian), with no tuple made for an entry: it
stops at the count and byte limits, skips empty entries, entries whose tag
is not wanted and entries below the log's start or past its end, and groups
the entries it picks into runs of records lying back to back in one
commit-log file. ``check_records`` then checks the records of one run, read
with one ``pread``, against their BODYCRC, as ``protocol.record.check_run``.
The caller still checks each run against its file (the run must lie within
the file's written bytes) and takes the general path when one does not, so a
file missing in the middle of the log is never read past.

``decode_records`` walks the records of one pull body (protocol/record.py's
layout) and makes one message of each, as ``protocol.record.decode_records``
does: the head's fields read in place (no tuple of 15 values a record), the
topic names and hosts decoded once a body. It gives up (None) on anything out
of the ordinary: a size, magic code or length that does not hold, properties
that are not UTF-8, a topic name that is not, or (``verify_crc``) a body that
does not match its BODYCRC; the caller then decodes the body with its own
loop, which says what is wrong.

``walk_records`` is the Spark source's walk of a pull body
(client/spark/arrow.py's ``RecordScan.add``): each record's start, by
TOTALSIZE, up to a stop offset, no tuple unpacked a record. ``gather_ranges``
then copies the bodies (and the property texts) out of the records into one
buffer made to their size, with C's ``memcpy`` where compiled.

What each makes is what the Python loop it stands for makes; the tests
compare them, with this source run as plain Python and compiled.
``deploy/speedups.py`` compiles it into ``protocol._records_kernel_c`` with
this file's SHA-256 in it; ``protocol/record.py`` and
``broker/store/message_store.py`` use the compiled module only when that
matches this source.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import cython

if cython.compiled:  # C's memcpy for gather_ranges; plain Python copies by slices
    from cython.cimports.cpython.object import Py_TYPE
    from cython.cimports.libc.string import memcpy

# The slots a decoded message is made of, in the order ``decode_records``
# fills them when compiled (protocol.message.MessageExt's ``__slots__``, whose
# ``__init__`` sets them from ``make``'s arguments as below).
MESSAGE_SLOTS = ("topic", "body", "_properties", "_properties_text", "_properties_extra",
                 "flag", "queue_id", "queue_offset", "commit_log_offset", "sys_flag",
                 "born_timestamp", "born_host", "store_timestamp", "store_host",
                 "reconsume_times", "prepared_transaction_offset", "body_crc", "store_size",
                 "_msg_id", "_id_head")
_MEMBER_DESCRIPTOR = types.MemberDescriptorType
_slot_cache: dict = {}


def slot_descriptors(make: object) -> tuple | None:
    """``make``'s slot descriptors in MESSAGE_SLOTS' order when ``make`` is a
    class of exactly those slots straight under ``object`` (so a message can be
    made without its ``__init__``: every slot set, nothing else to set), else
    None. Kept per class (a function is never kept: no call of it is skipped)."""
    if not isinstance(make, type):
        return None
    if make in _slot_cache:
        return _slot_cache[make]
    found = None
    if make.__bases__ == (object,) and make.__dict__.get("__slots__") == MESSAGE_SLOTS:
        descrs = tuple(make.__dict__.get(name) for name in MESSAGE_SLOTS)
        if all(type(d) is _MEMBER_DESCRIPTOR for d in descrs):
            found = descrs
    _slot_cache[make] = found
    return found


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
    one: cython.longlong = 1  # constants made by shifts: a literal past 2**31 is a Python int
    value: cython.longlong = _u32(d, at)
    if value >= one << 31:
        value -= one << 32
    return value


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
def _i64(d: cython.const[cython.uchar][::1],  # type: ignore[valid-type]
         at: cython.Py_ssize_t) -> cython.longlong:
    """The signed big-endian 8-byte integer at ``at`` (in bounds): the high
    half signed, the low half not, so no step overflows."""
    one: cython.longlong = 1
    return _i32(d, at) * (one << 32) + _u32(d, at + 4)


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
def _same(d: cython.const[cython.uchar][::1],  # type: ignore[valid-type]
          a: cython.Py_ssize_t, b: cython.Py_ssize_t, n: cython.Py_ssize_t) -> cython.bint:
    """Whether the ``n`` bytes at ``a`` and at ``b`` are the same (in bounds)."""
    i: cython.Py_ssize_t
    for i in range(n):
        if d[a + i] != d[b + i]:
            return False
    return True


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.exceptval(-1)
def _set(descrs: tuple, i: cython.Py_ssize_t, obj: object, value: object) -> cython.int:
    """Slot ``i`` of ``obj`` set to ``value`` through its descriptor's C setter
    (compiled only): what ``obj.<name> = value`` does, less the look-up."""
    d: object = descrs[i]
    return Py_TYPE(d).tp_descr_set(d, obj, value)


@cython.boundscheck(False)
@cython.wraparound(False)
def decode_records(data: bytes, verify_crc: cython.bint, crc32: Callable[[bytes], int],
                   make: Callable[..., object], unpack_host: Callable[[bytes], str],
                   extra: object = None) -> list | None:
    """The messages ``make(...)`` of the records of ``data`` (a pull body), as
    ``protocol.record._decode_at`` passes their fields (``extra``: the
    properties every message gets, ``properties_extra``), or None to leave the
    body to that loop. Compiled, a message of a class with exactly
    MESSAGE_SLOTS is made without a call of its ``__init__``, each slot set
    from the same value."""
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
    prev: cython.Py_ssize_t = -1  # the previous record's start
    prev_topic_at: cython.Py_ssize_t = 0
    prev_topic_len: cython.Py_ssize_t = 0
    topic_len: cython.Py_ssize_t
    topic: object = None
    born: object = None
    stored: object = None
    id_head: object = None
    descrs: tuple | None = slot_descriptors(make) if cython.compiled else None
    new: Callable[..., object] = object.__new__
    msg: object
    while pos < limit:
        if limit - pos < head + 3:
            return None
        total = _i32(d, pos)
        # MESSAGE_MAGIC_CODE 0xDAA320A7, read signed (as a C literal: no Python int)
        if _i32(d, pos + 4) != -626843481 or total < head + 3 or total > limit - pos:
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
        # the topic and hosts: the previous record's when their bytes are the
        # same (no slice, no look-up), else from the body's caches
        topic_len = props_at - 2 - (topic_at + 1)
        if prev < 0 or topic_len != prev_topic_len \
                or not _same(d, topic_at + 1, prev_topic_at, topic_len):
            topic_b = data[topic_at + 1:props_at - 2]
            topic = topics.get(topic_b)
            if topic is None:
                try:
                    topic = topics[topic_b] = topic_b.decode()
                except UnicodeDecodeError:
                    return None
        if prev < 0 or not _same(d, pos + 48, prev + 48, 8):
            born_b = data[pos + 48:pos + 56]
            born = hosts.get(born_b)
            if born is None:
                born = hosts[born_b] = unpack_host(born_b)
        if prev < 0 or not _same(d, pos + 64, prev + 64, 8):
            store_b = data[pos + 64:pos + 72]
            stored = hosts.get(store_b)
            if stored is None:
                stored = hosts[store_b] = unpack_host(store_b)
            id_head = id_heads.get(store_b)
            if id_head is None:
                id_head = id_heads[store_b] = store_b.hex().upper()
        prev = pos
        prev_topic_at = topic_at + 1
        prev_topic_len = topic_len
        if props_at < end:
            try:
                text = data[props_at:end].decode()
            except UnicodeDecodeError:
                return None
        else:
            text = ""
        if descrs is None:
            out.append(make(topic, body, None, _i32(d, pos + 16), _i32(d, pos + 12),
                            _i64(d, pos + 20), _i64(d, pos + 28), _i32(d, pos + 36),
                            _i64(d, pos + 40), born, _i64(d, pos + 56), stored,
                            _i32(d, pos + 72), _i64(d, pos + 76), crc, total, None, text,
                            id_head, extra))
        else:  # the same values, slot by slot (MESSAGE_SLOTS' order)
            msg = new(make)
            _set(descrs, 0, msg, topic)
            _set(descrs, 1, msg, body)
            _set(descrs, 2, msg, None)
            _set(descrs, 3, msg, text)
            _set(descrs, 4, msg, extra)
            _set(descrs, 5, msg, _i32(d, pos + 16))
            _set(descrs, 6, msg, _i32(d, pos + 12))
            _set(descrs, 7, msg, _i64(d, pos + 20))
            _set(descrs, 8, msg, _i64(d, pos + 28))
            _set(descrs, 9, msg, _i32(d, pos + 36))
            _set(descrs, 10, msg, _i64(d, pos + 40))
            _set(descrs, 11, msg, born)
            _set(descrs, 12, msg, _i64(d, pos + 56))
            _set(descrs, 13, msg, stored)
            _set(descrs, 14, msg, _i32(d, pos + 72))
            _set(descrs, 15, msg, _i64(d, pos + 76))
            _set(descrs, 16, msg, crc)
            _set(descrs, 17, msg, total)
            _set(descrs, 18, msg, None)
            _set(descrs, 19, msg, id_head)
            out.append(msg)
        pos = end
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def scan_entries(entries: bytes, max_count: cython.longlong, max_bytes: cython.longlong,
                 tag_codes: set | None, log_start: cython.longlong,
                 log_end: cython.longlong, file_size: cython.longlong) -> tuple:
    """(entries scanned, the last one's commit-log offset, whether an entry was
    gone before the first pick, runs): each run (first commit-log offset, end,
    first entry, entry after the last), its entries all picked and back to
    back within one file. Entries from ``log_start`` to ``log_end`` are in the
    log, which is cut into files of ``file_size`` at its multiples."""
    d: cython.const[cython.uchar][::1] = entries  # type: ignore[valid-type]
    n: cython.Py_ssize_t = len(entries) // 20
    runs: list = []
    i: cython.Py_ssize_t
    at: cython.Py_ssize_t
    phys: cython.longlong
    size: cython.longlong
    picked: cython.longlong = 0
    total: cython.longlong = 0
    scanned: cython.Py_ssize_t = 0
    last_phys: cython.longlong = _i64(d, 0) if n > 0 else 0
    removing: cython.bint = False
    run_open: cython.bint = False
    run_start: cython.longlong = 0
    run_end: cython.longlong = 0
    run_first: cython.Py_ssize_t = 0
    run_next: cython.Py_ssize_t = 0
    if file_size <= 0 or log_start < 0 or log_end < log_start:
        raise ValueError(f"not a log: files of {file_size} bytes from {log_start} to {log_end}")
    for i in range(n):
        at = i * 20
        phys = _i64(d, at)
        size = _i32(d, at + 8)
        if picked and (picked >= max_count or total + size > max_bytes):
            break
        scanned += 1
        last_phys = phys
        if size <= 0 or (tag_codes is not None and _i64(d, at + 12) not in tag_codes):
            if run_open:
                runs.append((run_start, run_end, run_first, run_next))
                run_open = False
            continue
        if phys < log_start or phys > log_end or size > log_end - phys \
                or phys % file_size + size > file_size:
            if not picked:
                removing = True
            if run_open:
                runs.append((run_start, run_end, run_first, run_next))
                run_open = False
            continue
        if run_open and (phys != run_end or phys // file_size != run_start // file_size):
            runs.append((run_start, run_end, run_first, run_next))
            run_open = False
        if not run_open:
            run_open = True
            run_start = phys
            run_first = i
        run_end = phys + size
        run_next = i + 1
        picked += 1
        total += size
    if run_open:
        runs.append((run_start, run_end, run_first, run_next))
    return scanned, last_phys, removing, runs


@cython.boundscheck(False)
@cython.wraparound(False)
def check_records(buf: bytes, entries: bytes, first: cython.Py_ssize_t,
                  last: cython.Py_ssize_t, crc32: Callable[[memoryview], int],
                  head: cython.Py_ssize_t, crc_at: cython.Py_ssize_t,
                  len_at: cython.Py_ssize_t) -> tuple:
    """The records of entries ``first``..``last`` (exclusive), back to back in
    ``buf``: (those whose body matches its BODYCRC, as pieces of ``buf``; how
    many those are; the commit-log offsets of those that do not or whose sizes
    do not fit), as ``protocol.record.check_run``: good records next to each
    other make one piece, ``buf`` itself when all are good and fill it."""
    d: cython.const[cython.uchar][::1] = buf  # type: ignore[valid-type]
    e: cython.const[cython.uchar][::1] = entries  # type: ignore[valid-type]
    view = memoryview(buf)
    pieces: list = []
    bad: list = []
    limit: cython.Py_ssize_t = len(buf)
    pos: cython.Py_ssize_t = 0
    start: cython.Py_ssize_t = 0
    count: cython.Py_ssize_t = 0
    end: cython.Py_ssize_t
    i: cython.Py_ssize_t
    size: cython.longlong
    body_len: cython.longlong
    crc: cython.longlong
    if first < 0 or last * 20 > len(entries) or first > last:
        raise ValueError(f"entries {first}..{last} are not in the {len(entries)} bytes given")
    if head < max(crc_at, len_at) + 4:
        raise ValueError(f"a record head of {head} bytes cannot hold its fields")
    for i in range(first, last):
        size = _i32(e, i * 20 + 8)
        end = pos + size
        if pos >= 0 and size >= head and end <= limit:
            crc = _i32(d, pos + crc_at)
            body_len = _i32(d, pos + len_at)
            if 0 <= body_len <= size - head \
                    and (crc32(view[pos + head:pos + head + body_len]) & 0x7FFFFFFF) == crc:
                count += 1
                pos = end
                continue
        if start < pos:
            pieces.append(view[start:pos])
        bad.append(_i64(e, i * 20))
        pos = end
        start = pos
    if start < pos <= limit:
        pieces.append(buf if start == 0 and pos == limit else view[start:pos])
    return pieces, count, bad


@cython.boundscheck(False)
@cython.wraparound(False)
def walk_records(body: bytes, base: cython.longlong, stop_offset: cython.longlong,
                 use_stop: cython.bint, starts: list) -> tuple:
    """RecordScan.add's walk of a pull body (client/spark/arrow.py): each
    record's start plus ``base`` appended to ``starts``, by TOTALSIZE, up to
    the first record whose queue offset is at least ``stop_offset`` (when
    ``use_stop``). Returns (the bytes walked, how the walk ended): 0 at the
    body's end; 1 at such a record; 2 at a record whose size does not fit
    (fewer than 28 bytes left for TOTALSIZE .. QUEUEOFFSET, or a TOTALSIZE
    below 91, a head, a topic length and a properties length, or past the
    body's end)."""
    d: cython.const[cython.uchar][::1] = body  # type: ignore[valid-type]
    end: cython.Py_ssize_t = len(body)
    pos: cython.Py_ssize_t = 0
    total: cython.longlong
    # typed locals: a module constant would be a Python object, looked up each time
    walk_head: cython.Py_ssize_t = 28
    min_record: cython.longlong = 91
    while pos < end:
        if end - pos < walk_head:
            return pos, 2
        total = _i32(d, pos)
        if total < min_record or total > end - pos:
            return pos, 2
        if use_stop and _i64(d, pos + 20) >= stop_offset:
            return pos, 1
        starts.append(base + pos)
        pos += total
    return pos, 0


@cython.boundscheck(False)
@cython.wraparound(False)
def gather_ranges(data: Any, size: cython.Py_ssize_t,
                  lo: cython.const[cython.long][::1],  # type: ignore[valid-type]
                  hi: cython.const[cython.long][::1],  # type: ignore[valid-type]
                  out: cython.uchar[::1], offsets: cython.int[::1]) -> cython.Py_ssize_t:
    """The Spark source's cut of bodies and property texts out of a batch's
    records (client/spark/arrow.py's ``_cut``): the byte ranges [lo[i], hi[i])
    of ``data``'s first ``size`` bytes (a byte array: NumPy's uint8, say)
    copied back to back into ``out`` (a writable view), ``offsets[i]`` where
    range i starts there and ``offsets[n]`` the end, so the two are an Arrow
    binary array's buffers, each byte copied once into a buffer made to size.
    The ranges must be ascending and not overlap, and ``out`` and ``offsets``
    (int32) must hold them: ValueError otherwise, nothing read out of bounds.
    Returns the bytes written."""
    d: cython.const[cython.uchar][::1] = data  # type: ignore[valid-type]
    n: cython.Py_ssize_t = lo.shape[0]
    i: cython.Py_ssize_t
    a: cython.long
    b: cython.long
    w: cython.Py_ssize_t = 0
    done: cython.long = 0
    int32_max: cython.Py_ssize_t = 0x7FFFFFFF
    if hi.shape[0] != n or offsets.shape[0] != n + 1:
        raise ValueError(f"{n} ranges need {n} ends and {n + 1} offsets")
    if size < 0 or size > d.shape[0]:
        raise ValueError(f"{size} bytes are not within the {d.shape[0]} given")
    for i in range(n):
        a = lo[i]
        b = hi[i]
        if a < done or b < a or b > size:
            raise ValueError(f"range {i} [{a}, {b}) is not ascending within {size} bytes")
        if b - a > out.shape[0] - w or w + (b - a) > int32_max:
            raise ValueError(f"range {i} does not fit the {out.shape[0]} bytes given")
        offsets[i] = cython.cast(cython.int, w)
        if b > a:
            if cython.compiled:  # a slice assignment of memoryviews checks and loops per call
                memcpy(cython.address(out[w]), cython.address(d[a]), b - a)
            else:
                out[w:w + (b - a)] = d[a:b]
        w += b - a
        done = b
    offsets[n] = cython.cast(cython.int, w)
    return w
