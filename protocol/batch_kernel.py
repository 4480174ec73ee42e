"""``decode_batch``'s loop written to be compiled by Cython (pure Python mode).

The same walk over a batch body as ``protocol.batch.decode_batch``, reading the
big-endian fields a byte at a time: plain Python runs it slowly, compiled code
in a few instructions. It never raises for a bad layout: it returns None, and
``decode_batch`` then runs its own loop, which says which entry is wrong and
why. The tests run this source as plain Python and compiled, against
``decode_batch``'s loop. ``deploy/speedups.py`` compiles it into
``protocol._batch_kernel_c`` with this file's SHA-256 inside, and
``protocol.batch`` uses the compiled module only when that matches.
"""

from __future__ import annotations

import cython


@cython.cfunc
@cython.inline
@cython.boundscheck(True)
@cython.wraparound(False)
def _int(data: bytes, at: cython.Py_ssize_t, width: cython.int) -> cython.longlong:
    """The signed big-endian integer of ``width`` bytes at ``at``."""
    value: cython.longlong = 0
    i: cython.int
    for i in range(width):
        value = (value << 8) | data[at + i]
    if value >= (cython.cast(cython.longlong, 1) << (8 * width - 1)):
        value -= cython.cast(cython.longlong, 1) << (8 * width)
    return value


@cython.boundscheck(True)
@cython.wraparound(False)
def decode_batch(data: bytes) -> list | None:
    """The (flag, body, properties) of each message of a batch body, or None
    when its layout does not hold somewhere (or properties are not UTF-8)."""
    out: list = []
    end: cython.Py_ssize_t = len(data)
    pos: cython.Py_ssize_t = 0
    left: cython.Py_ssize_t
    size: cython.longlong
    flag: cython.longlong
    body_len: cython.longlong
    props_len: cython.longlong
    at: cython.Py_ssize_t
    stop: cython.Py_ssize_t
    overhead: cython.Py_ssize_t = 22  # five 4-byte fields and the properties' length
    while pos < end:
        left = end - pos
        if left < overhead:
            return None
        size = _int(data, pos, 4)
        flag = _int(data, pos + 12, 4)
        body_len = _int(data, pos + 16, 4)
        if size < overhead or size > left:
            return None
        if body_len < 0 or overhead + body_len > size:
            return None
        at = pos + 20 + body_len
        props_len = _int(data, at, 2)
        stop = pos + size
        if props_len < 0 or at + 2 + props_len != stop:
            return None
        try:
            props = data[at + 2:stop].decode("utf-8")
        except UnicodeDecodeError:
            return None
        out.append((flag, data[pos + 20:at], props))
        pos = stop
    return out
