"""The index file's per-key loop, written to be compiled by Cython (pure Python mode).

``put_hashes`` does what ``IndexFile.put_hashes`` does for each key: read the
key's slot in the slot table, link the new entry to the slot's previous one,
write the entry's 20 bytes and point the slot at it. The same source runs as
plain Python (slowly: it reads and writes the big-endian fields a byte at a
time, which compiled code does in a few instructions), and the tests run it so
and compare it with the reference loop in ``index_file.py``.

``deploy/speedups.py`` compiles it (``make`` does, where Cython and a C
compiler are at hand) into ``broker.store._index_kernel_c``, with the SHA-256
of this file in it: ``index_file.py`` uses the compiled module only when that
matches this source, so a stale build is never run. Bounds are checked (an
index out of a buffer raises IndexError, as in Python); values that do not fit
their fields raise OverflowError where the reference loop's ``struct`` raises
``struct.error``.
"""

from __future__ import annotations

import cython


@cython.boundscheck(True)
@cython.wraparound(False)
@cython.cdivision(False)
def put_hashes(keys: list, table: cython.uchar[::1], dirty: cython.uchar[::1],
               slots: cython.longlong, count: cython.longlong, begin: cython.longlong,
               ) -> tuple:
    """Index (hash, commit-log offset, store ms) ``keys`` in order, the first
    as entry ``count``: returns (the entries' bytes, the next count, how many
    slots were empty). ``table`` is the slot table (4 big-endian bytes a
    slot), ``dirty`` a byte per 4 KiB page of it, set to 1 for each page
    written; ``begin`` the file's begin timestamp (ms)."""
    # constants as typed locals: compiled, they are C values, not module objects
    int32_max: cython.longlong = 2147483647
    int32_min: cython.longlong = -2147483648
    int64_max: cython.longlong = 9223372036854775807
    int64_min: cython.longlong = -int64_max - 1  # not a literal: C has no such constant
    entry_size: cython.Py_ssize_t = 20
    page_shift: cython.int = 10  # 1,024 slots of 4 bytes in a 4 KiB page
    n: cython.Py_ssize_t = len(keys)
    if slots <= 0 or len(table) < slots * 4:
        raise ValueError(f"a slot table of {len(table)} bytes cannot hold {slots} slots")
    if count < 0 or count + n - 1 > int32_max:
        raise OverflowError(f"entry numbers {count}..{count + n - 1} do not fit 4 bytes")
    entries = bytearray(n * entry_size)
    out: cython.uchar[::1] = entries
    i: cython.Py_ssize_t
    k: cython.int
    at: cython.Py_ssize_t = 0
    pos: cython.Py_ssize_t
    h: cython.longlong
    phy: cython.longlong
    ms: cython.longlong
    slot: cython.longlong
    prev: cython.longlong
    diff: cython.longlong = 0
    last_ms: cython.longlong = 0
    have_ms: cython.bint = False
    new_slots: cython.longlong = 0
    for i in range(n):
        key = keys[i]
        h = key[0]
        phy = key[1]
        ms = key[2]
        if h < int32_min or h > int32_max:
            raise OverflowError(f"key hash {h} does not fit 4 bytes")
        if phy < int64_min or phy > int64_max:  # compiled, the assignment has checked
            raise OverflowError(f"commit-log offset {phy} does not fit 8 bytes")
        slot = h % slots
        pos = slot * 4
        prev = ((table[pos] << 24) | (table[pos + 1] << 16) | (table[pos + 2] << 8)
                | table[pos + 3])
        if prev > int32_max:  # the reference reads a signed field: a negative one
            prev = 0
        if prev <= 0 or prev >= count:
            prev = 0
            new_slots += 1
        if not have_ms or ms != last_ms:
            have_ms = True
            last_ms = ms
            diff = (ms - begin) // 1000
            if diff < 0:
                diff = 0
            elif diff > int32_max:
                diff = int32_max
        # the entry: hash (4), offset (8), time diff (4), previous entry (4), big-endian
        for k in range(4):
            out[at + 3 - k] = (h >> (8 * k)) & 0xFF
            out[at + 15 - k] = (diff >> (8 * k)) & 0xFF
            out[at + 19 - k] = (prev >> (8 * k)) & 0xFF
            table[pos + 3 - k] = (count >> (8 * k)) & 0xFF  # the slot: this entry
        for k in range(8):
            out[at + 11 - k] = (phy >> (8 * k)) & 0xFF
        at += entry_size
        dirty[slot >> page_shift] = 1
        count += 1
    return entries, count, new_slots
