"""The dispatchers' per-record loops, written to be compiled by Cython (pure Python mode).

After a put, each stored record's ``DispatchRequest`` goes to the consume
queue and to the index. Per record, in Python, that is a tuple unpacked, a
``struct`` pack and a key hashed, a few hundred nanoseconds each; a batch of 32
paid about 12 µs of the broker's 80-100 µs a request. Compiled, these loops
read the fields in place:

- ``cq_entries(requests)``: the requests' consume-queue entries back to back,
  20 bytes each (commit-log offset 8, size 4, tags code 8; big-endian, as
  ``consume_queue.CQ_ENTRY`` packs them), or None when a value does not fit
  its field (the caller's ``struct`` then says so).
- ``index_hashes(requests, indexed_to, crc32)``: what
  ``IndexService.dispatch_batch``'s loop makes, (hash, commit-log offset,
  store ms) for each KEYS entry and UNIQ_KEY of each record past
  ``indexed_to`` that is not a prepared or rolled-back transaction record,
  and the new ``indexed_to``.

The same source runs as plain Python, and the tests run it so and compiled,
each against the reference loops in ``dispatch.py`` and ``index_service.py``.
``deploy/speedups.py`` compiles it into ``broker.store._dispatch_kernel_c``
with this file's SHA-256 in it; the dispatchers use the compiled module only
when that matches this source, and otherwise run their own loops.
"""

from __future__ import annotations

from collections.abc import Callable

import cython

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
def _put(o: cython.uchar[::1], at: cython.Py_ssize_t, width: cython.int,
         value: cython.longlong) -> cython.void:
    """``value`` as ``width`` big-endian bytes at ``at`` (in bounds; two's
    complement for a negative value)."""
    i: cython.int
    u: cython.ulonglong = cython.cast(cython.ulonglong, value)
    for i in range(width - 1, -1, -1):
        o[at + i] = u & 0xFF
        u >>= 8


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
