"""A producer's batch body into commit-log records, written to be compiled by
Cython (pure Python mode).

``encode_batch`` walks a SEND_BATCH body (protocol/batch.py's layout) and lays
out one commit-log record per message (protocol/record.py's layout) in a single
buffer, copying each body and properties field from the request once, with no
message object, no body ``bytes`` and no properties ``str`` made on the way.
The queue offset, commit-log offset and store time of each record are left as
zeros: they are only known under the commit log's lock, where
``stamp_batch`` writes them and makes each record's dispatch request.

It gives up (None) on anything out of the ordinary, so the caller can take the
general path, which says what is wrong: a layout that does not hold, an empty
or too long body, properties that are too long or not UTF-8, and any message
with a ``TRAN_MSG`` property. What it does make is what ``CommitLog.put_batch``
makes of ``decode_batch``'s items for the same arguments, byte for byte; the
tests compare the two, with this source run as plain Python and compiled.

After a put, every stored record's ``DispatchRequest`` goes to the consume
queue and to the index; two more loops here read its fields in place:

- ``cq_entries(requests)``: the requests' consume-queue entries back to back,
  20 bytes each (commit-log offset 8, size 4, tags code 8; big-endian, as
  ``consume_queue.CQ_ENTRY`` packs them), or None when a value does not fit
  its field (the caller's ``struct`` then says so).
- ``index_hashes(requests, indexed_to, crc32)``: what
  ``index_service.index_hashes_loop`` makes, (hash, commit-log offset, store
  ms) for each KEYS entry and UNIQ_KEY of each record past ``indexed_to``
  that is not a prepared or rolled-back transaction record, and the new
  ``indexed_to``.

``deploy/speedups.py`` compiles it into ``broker.store._batch_records_kernel_c``
with this file's SHA-256 in it; ``commit_log.py`` and the dispatchers use the
compiled module only when that matches this source, and otherwise run their
own Python (``put_batch``, ``struct``, ``index_hashes_loop``).
"""

from __future__ import annotations

from collections.abc import Callable

import cython

if cython.compiled:  # C's memcpy for the bodies and properties; plain Python copies by slices
    from cython.cimports.libc.string import memcpy

# DispatchRequest's fields by position (commit_log.py; a test checks them)
_TOPIC = 0
_OFFSET = 2
_SIZE = 3
_TAGS = 4
_STORE_MS = 5
_KEYS = 7
_UNIQ = 8
_SYS_FLAG = 9
_TX_MASK = 0xC  # protocol.record.TRANSACTION_TYPE_MASK
_TX_PREPARED = 0x4
_TX_ROLLBACK = 0xC
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
def _get(d: cython.const[cython.uchar][::1],  # type: ignore[valid-type]
         at: cython.Py_ssize_t, width: cython.int) -> cython.longlong:
    """The signed big-endian integer of ``width`` bytes at ``at`` (in bounds)."""
    value: cython.longlong = 0
    i: cython.int
    for i in range(width):
        value = (value << 8) | d[at + i]
    if value >= (cython.cast(cython.longlong, 1) << (8 * width - 1)):
        value -= cython.cast(cython.longlong, 1) << (8 * width)
    return value


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
def _put(o: cython.uchar[::1], at: cython.Py_ssize_t, width: cython.int,
         value: cython.longlong) -> cython.void:
    """``value`` as ``width`` big-endian bytes at ``at`` (in bounds; two's
    complement for a negative value)."""
    i: cython.int
    u: cython.ulonglong = cython.cast(cython.ulonglong, value)
    for i in range(width - 1, -1, -1):
        o[at + i] = u & 0xFF
        u >>= 8


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _is(d: cython.const[cython.uchar][::1],  # type: ignore[valid-type]
        at: cython.Py_ssize_t, length: cython.Py_ssize_t,
        name: bytes) -> cython.bint:
    """Whether the ``length`` bytes at ``at`` are ``name`` (a bytes object:
    compiled, read in place, where a memoryview of it is an object made and
    freed each call)."""
    i: cython.Py_ssize_t
    if length != len(name):
        return False
    for i in range(length):
        if d[at + i] != name[i]:
            return False
    return True


@cython.boundscheck(True)
@cython.wraparound(False)
def encode_batch(data: bytes, fixed: cython.Py_ssize_t, topic_field: bytes,
                 queue_id: cython.longlong, sys_flag: cython.longlong,
                 born_timestamp: cython.longlong, born_field: bytes, store_host: bytes,
                 reconsume_times: cython.longlong, max_body: cython.Py_ssize_t,
                 max_props: cython.Py_ssize_t, crc32: Callable[..., int],
                 tags_hash: Callable[[str], int],
                 ) -> tuple | None:
    """(records, metas) for the batch body ``data``, or None (see above).

    ``fixed`` is a record's size without its body and properties
    (``record_size(0, len(topic), 0)``), ``topic_field`` the topic as a
    record holds it, ``born_field`` and ``store_host`` 8-byte hosts;
    ``crc32(buffer)`` and ``tags_hash(str)`` are the CRC and tag hash codes
    the commit log uses. ``records`` is a bytearray of the records back to
    back; ``metas`` holds (start in ``records``, size, tags code, keys,
    unique key) for each."""
    d = cython.declare(cython.const[cython.uchar][::1], data)
    sep: cython.uchar = 2  # \x02 between properties (typed locals: C values compiled)
    kv: cython.uchar = 1  # \x01 between a property's name and its value
    end: cython.Py_ssize_t = len(data)
    overhead: cython.Py_ssize_t = 22  # five 4-byte fields and the properties' length
    head_size: cython.Py_ssize_t = 88  # a record's fields through its body length
    topic_len: cython.Py_ssize_t = len(topic_field)
    if len(born_field) != 8 or len(store_host) != 8 or fixed != head_size + topic_len + 2:
        raise ValueError("hosts are 8 bytes; fixed is the head, topic and properties length")
    # the walk, checking the layout and the sizes: how many records, how long
    pos: cython.Py_ssize_t = 0
    total: cython.Py_ssize_t = 0
    count: cython.Py_ssize_t = 0
    size: cython.longlong
    body_len: cython.longlong
    props_len: cython.longlong
    at: cython.Py_ssize_t
    while pos < end:
        if end - pos < overhead:
            return None
        size = _get(d, pos, 4)
        body_len = _get(d, pos + 16, 4)
        if size < overhead or size > end - pos or body_len <= 0 or body_len > max_body \
                or overhead + body_len > size:
            return None
        at = pos + 20 + body_len
        props_len = _get(d, at, 2)
        if props_len < 0 or props_len > max_props or at + 2 + props_len != pos + size:
            return None
        total += fixed + body_len + props_len
        count += 1
        pos += size
    records = bytearray(total)
    o: cython.uchar[::1] = records
    view = memoryview(data)
    tags_name: bytes = b"TAGS"
    keys_name: bytes = b"KEYS"
    uniq_name: bytes = b"UNIQ_KEY"
    tran_name: bytes = b"TRAN_MSG"
    k: cython.Py_ssize_t
    metas: list = []
    pos = 0
    w: cython.Py_ssize_t = 0  # where the record goes in ``records``
    p: cython.Py_ssize_t
    stop: cython.Py_ssize_t
    entry: cython.Py_ssize_t
    name_end: cython.Py_ssize_t
    value_at: cython.Py_ssize_t
    tags_at: cython.Py_ssize_t
    tags_end: cython.Py_ssize_t
    keys_at: cython.Py_ssize_t
    keys_end: cython.Py_ssize_t
    uniq_at: cython.Py_ssize_t
    uniq_end: cython.Py_ssize_t
    ascii: cython.bint
    c: cython.uchar
    rec: cython.Py_ssize_t
    body_at: cython.Py_ssize_t
    props_at: cython.Py_ssize_t
    for _ in range(count):
        size = _get(d, pos, 4)
        body_len = _get(d, pos + 16, 4)
        body_at = pos + 20
        at = body_at + body_len
        props_len = _get(d, at, 2)
        props_at = at + 2
        stop = props_at + props_len
        # the properties: UTF-8, no TRAN_MSG, and where the last TAGS, KEYS and
        # UNIQ_KEY values are (as protocol.message.find_property finds them)
        ascii = True
        tags_at = keys_at = uniq_at = -1
        tags_end = keys_end = uniq_end = -1
        entry = props_at
        while entry < stop:
            name_end = -1
            p = entry
            while p < stop:
                c = d[p]
                if c == sep:
                    break
                if c >= 0x80:
                    ascii = False
                elif c == kv and name_end < 0:
                    name_end = p
                p += 1
            if name_end >= 0:
                value_at = name_end + 1
                if _is(d, entry, name_end - entry, tran_name):
                    return None
                if _is(d, entry, name_end - entry, uniq_name):
                    uniq_at, uniq_end = value_at, p
                elif _is(d, entry, name_end - entry, tags_name):
                    tags_at, tags_end = value_at, p
                elif _is(d, entry, name_end - entry, keys_name):
                    keys_at, keys_end = value_at, p
            entry = p + 1
        if not ascii:
            try:
                data[props_at:stop].decode("utf-8")
            except UnicodeDecodeError:
                return None
        rec = w
        _put(o, w, 4, fixed + body_len + props_len)
        _put(o, w + 4, 4, -626843481)  # MESSAGE_MAGIC_CODE 0xDAA320A7 (signed: a C literal)
        _put(o, w + 8, 4, crc32(view[body_at:at]) & 0x7FFFFFFF)
        _put(o, w + 12, 4, queue_id)
        for k in range(4):  # FLAG, as the producer sent it
            o[w + 16 + k] = d[pos + 12 + k]
        # QUEUEOFFSET (20) and PHYSICALOFFSET (28): stamp_batch's
        _put(o, w + 36, 4, sys_flag)
        _put(o, w + 40, 8, born_timestamp)
        for k in range(8):  # the hosts and the topic byte by byte: a few bytes each
            o[w + 48 + k] = born_field[k]
        # STORETIMESTAMP (56): stamp_batch's
        for k in range(8):
            o[w + 64 + k] = store_host[k]
        _put(o, w + 72, 4, reconsume_times)
        # PREPARED TRANSACTION OFFSET (76): 0
        _put(o, w + 84, 4, body_len)
        w += head_size
        # a memoryview slice assignment compiled checks both views and loops per call
        if not cython.compiled:
            o[w:w + body_len] = d[body_at:at]
        elif body_len > 0:
            memcpy(cython.address(o[w]), cython.address(d[body_at]), body_len)
        w += body_len
        for k in range(topic_len):
            o[w + k] = topic_field[k]
        w += topic_len
        if cython.compiled:  # the properties' length and text: 2 bytes at least
            memcpy(cython.address(o[w]), cython.address(d[at]), 2 + props_len)
        else:
            o[w:w + 2 + props_len] = d[at:stop]
        w += 2 + props_len
        metas.append((
            rec, w - rec,
            tags_hash(data[tags_at:tags_end].decode("utf-8")) if tags_end > tags_at else 0,
            data[keys_at:keys_end].decode("utf-8") if keys_at >= 0 else None,
            data[uniq_at:uniq_end].decode("utf-8") if uniq_at >= 0 else None,
        ))
        pos = stop
    return records, metas


@cython.boundscheck(True)
@cython.wraparound(False)
def stamp_batch(records: bytearray, metas: list, topic: str, queue_id: object,
                sys_flag: object, phys: cython.longlong, queue_offset: cython.longlong,
                now: cython.longlong, new_tuple: Callable[..., tuple], request: type,
                id_head: str) -> tuple:
    """Write each record's queue offset (from ``queue_offset`` on), commit-log
    offset (``phys`` is the first record's) and store time ``now`` into
    ``records``; returns (the dispatch requests, ``new_tuple(request, ...)``
    each, and the records' offset msgIds: ``id_head`` then the commit-log
    offset in 16 upper-case hex digits each, comma-separated, as
    ``commit_log.msg_ids`` makes them). Raises ValueError for a negative
    offset or an ``id_head`` that is not ASCII."""
    o: cython.uchar[::1] = records
    head_b: bytes = id_head.encode("ascii")
    head_len: cython.Py_ssize_t = len(head_b)
    step: cython.Py_ssize_t = head_len + 17  # the head, 16 digits and a comma
    n: cython.Py_ssize_t = len(metas)
    ids = bytearray(n * step - 1 if n else 0)
    io: cython.uchar[::1] = ids
    dispatches: list = []
    rec: cython.Py_ssize_t
    at: cython.longlong
    u: cython.ulonglong
    digit: cython.int
    w: cython.Py_ssize_t = 0
    k: cython.Py_ssize_t
    now_obj = now
    for meta in metas:
        rec = meta[0]
        at = phys + rec
        if at < 0:
            raise ValueError(f"a record at the negative offset {at}")
        _put(o, rec + 20, 8, queue_offset)
        _put(o, rec + 28, 8, at)
        _put(o, rec + 56, 8, now)
        for k in range(head_len):
            io[w + k] = head_b[k]
        w += head_len
        u = cython.cast(cython.ulonglong, at)
        for k in range(15, -1, -1):
            digit = u & 0xF
            io[w + k] = digit + 48 if digit < 10 else digit + 55  # 0-9, A-F
            u >>= 4
        w += 16
        if w < n * step - 1:
            io[w] = 44  # ","
            w += 1
        dispatches.append(new_tuple(request, (topic, queue_id, at, meta[1], meta[2], now_obj,
                                              queue_offset, meta[3], meta[4], sys_flag)))
        queue_offset += 1
    return dispatches, ids.decode("ascii")


@cython.boundscheck(True)
@cython.wraparound(False)
def cq_entries(requests: list) -> bytearray | None:
    """The consume-queue entries of ``requests``, 20 bytes each, or None when
    a field is not an int or does not fit (8, 4 and 8 signed bytes)."""
    # the field positions as typed locals: compiled, C values, not module objects
    at_offset: cython.Py_ssize_t = _OFFSET
    at_size: cython.Py_ssize_t = _SIZE
    at_tags: cython.Py_ssize_t = _TAGS
    n: cython.Py_ssize_t = len(requests)
    out = bytearray(n * 20)
    o: cython.uchar[::1] = out
    i: cython.Py_ssize_t
    phy: cython.longlong
    size: cython.int
    tags: cython.longlong
    req: tuple
    for i in range(n):
        item = requests[i]
        if not isinstance(item, tuple) or len(item) <= at_tags:
            return None
        req = cython.cast(tuple, item)  # a DispatchRequest: its fields read in place
        phy_o = req[at_offset]
        size_o = req[at_size]
        tags_o = req[at_tags]
        if type(phy_o) is not int or type(size_o) is not int or type(tags_o) is not int:
            return None
        if not cython.compiled:  # compiled, the assignments below check the ranges
            if not (_INT64_MIN <= phy_o <= _INT64_MAX and _INT32_MIN <= size_o <= _INT32_MAX
                    and _INT64_MIN <= tags_o <= _INT64_MAX):
                return None
        try:
            phy = phy_o
            size = size_o
            tags = tags_o
        except OverflowError:
            return None
        _put(o, i * 20, 8, phy)
        _put(o, i * 20 + 8, 4, size)
        _put(o, i * 20 + 12, 8, tags)
    return out


@cython.boundscheck(True)
@cython.wraparound(False)
def index_hashes(requests: list, indexed_to: object, crc32: Callable[..., int],
                 ) -> tuple | None:
    """(the (hash, commit-log offset, store ms) of each key to index, the
    highest commit-log offset seen): ``IndexService.dispatch_batch``'s loop;
    None for a request that is not a tuple of DispatchRequest's fields.
    A key's hash is the CRC of "topic#key" made from the CRC of "topic#",
    31 bits; records at or below ``indexed_to`` are skipped (a replay)."""
    at_topic: cython.Py_ssize_t = _TOPIC
    at_offset: cython.Py_ssize_t = _OFFSET
    at_ms: cython.Py_ssize_t = _STORE_MS
    at_keys: cython.Py_ssize_t = _KEYS
    at_uniq: cython.Py_ssize_t = _UNIQ
    at_flag: cython.Py_ssize_t = _SYS_FLAG
    hashed: list = []
    topic = None
    topic_crc = 0
    req: tuple
    for item in requests:
        if not isinstance(item, tuple) or len(item) <= at_flag:
            return None
        req = cython.cast(tuple, item)  # a DispatchRequest: its fields read in place
        phy = req[at_offset]
        if phy <= indexed_to:
            continue  # already indexed (re-dispatch after recovery)
        tx = req[at_flag] & _TX_MASK
        if tx != _TX_PREPARED and tx != _TX_ROLLBACK:
            req_topic = req[at_topic]
            if topic is None or req_topic is not topic:
                topic = req_topic
                topic_crc = crc32(f"{req_topic}#".encode())
            ms = req[at_ms]
            keys = req[at_keys]
            if keys:
                for key in keys.split(" "):
                    if key:
                        hashed.append((crc32(key.encode(), topic_crc) & 0x7FFFFFFF, phy, ms))
            uniq = req[at_uniq]
            if uniq:
                hashed.append((crc32(uniq.encode(), topic_crc) & 0x7FFFFFFF, phy, ms))
        indexed_to = phy
    return hashed, indexed_to
