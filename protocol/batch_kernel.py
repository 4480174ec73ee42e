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

from collections.abc import Callable
from typing import Any

import cython

from protocol.message import TIMER_INPUTS

if cython.compiled:  # C's memcpy for the bodies and properties; plain Python copies by slices
    from cython.cimports.libc.string import memcpy


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


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
def _put(o: cython.uchar[::1], at: cython.Py_ssize_t, width: cython.int,
         value: cython.longlong) -> cython.void:
    """``value`` as ``width`` big-endian bytes at ``at`` (in bounds; two's
    complement for a negative value). broker/store/batch_records_kernel.py has
    the same helper: each kernel is compiled on its own (deploy/speedups.py),
    and an inline C function is not shared between modules without a .pxd."""
    i: cython.int
    u: cython.ulonglong = cython.cast(cython.ulonglong, value)
    for i in range(width - 1, -1, -1):
        o[at + i] = u & 0xFF
        u >>= 8


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
def _copy(o: cython.uchar[::1], at: cython.Py_ssize_t, data: bytes,
          length: cython.Py_ssize_t) -> cython.void:
    """The ``length`` bytes of ``data`` (all of it) at ``at`` (in bounds)."""
    if not cython.compiled:
        o[at:at + length] = data
    elif length > 0:
        memcpy(cython.address(o[at]), cython.cast(cython.p_char, data), length)


@cython.boundscheck(True)
@cython.wraparound(False)
def encode_messages(batch: list, topic: str, max_body: cython.Py_ssize_t, ids: list,
                    message_type: Any, uniq_key: str, delay_key: str,
                    encode_properties: Callable[[dict], str]) -> bytes | None:
    """The batch body of the producer's ``batch`` of messages, or None.

    What ``Producer._prepare_batch``'s own loop makes of the same arguments,
    byte for byte, and with the same changes to the messages: each message
    without a ``uniq_key`` property gets ``ids[i]`` as it; one with its own
    puts that in ``ids[i]``. None where that loop would raise or where
    anything is out of the ordinary (a message not exactly ``message_type``,
    another topic, a body that is not ``bytes`` or is empty or over
    ``max_body``, properties not a dict, a ``delay_key`` other than "0", a
    timer property (``TIMER_INPUTS``), a flag that is not a 32-bit int, properties ``encode_properties`` refuses
    or longer than 32,767 bytes): the caller then runs its loop, which says
    what is wrong. Messages before the one given up on may have their
    ``uniq_key`` set already, which the loop finds and keeps."""
    n: cython.Py_ssize_t = len(batch)
    if len(ids) != n or not uniq_key.isascii():
        return None
    uniq: bytes = uniq_key.encode()
    # the properties of a message that had none: uniq_key, 1, its id, 2
    uniq_len: cython.Py_ssize_t = len(uniq) + 2
    bodies: list = []
    texts: list = []
    flags: list = []
    total: cython.Py_ssize_t = 0
    i: cython.Py_ssize_t
    body_len: cython.Py_ssize_t
    props_len: cython.Py_ssize_t
    for i in range(n):
        msg = batch[i]
        if type(msg) is not message_type or msg.topic != topic:
            return None
        body = msg.body
        if type(body) is not bytes:
            return None
        body_len = len(body)
        if body_len == 0 or body_len > max_body:
            return None
        flag = msg.flag
        if type(flag) is not int or not -2147483648 <= flag <= 2147483647:
            return None
        props = msg.properties
        if type(props) is not dict:
            return None
        if not props:  # the usual message: its properties its new id's, written below
            new_id = ids[i]
            if type(new_id) is not str or not new_id.isascii() \
                    or uniq_len + len(new_id) > 32767:
                return None
            props[uniq_key] = new_id
            bodies.append(body)
            texts.append(new_id)
            flags.append(flag)
            total += 22 + body_len + uniq_len + len(new_id)
            continue
        try:
            if props.get(delay_key, "0") != "0":
                return None
            for name in TIMER_INPUTS:
                if name in props:
                    return None
            own = props.get(uniq_key)
            if own:
                ids[i] = own
            else:
                props[uniq_key] = ids[i]
            encoded = encode_properties(props).encode()
        except Exception:  # the loop raises it again, with its own message
            return None
        props_len = len(encoded)
        if props_len > 32767:
            return None
        bodies.append(body)
        texts.append(encoded)
        flags.append(flag)
        total += 22 + body_len + props_len
    out = bytearray(total)
    o: cython.uchar[::1] = out
    w: cython.Py_ssize_t = 0
    j: cython.Py_ssize_t
    t: str
    ch: cython.Py_UCS4
    for i in range(n):
        body = bodies[i]
        text = texts[i]
        body_len = len(body)
        props_len = uniq_len + len(text) if type(text) is str else len(text)
        _put(o, w, 4, 22 + body_len + props_len)
        # BODYCRC and the magic code (4 bytes each) stay 0
        _put(o, w + 12, 4, flags[i])
        _put(o, w + 16, 4, body_len)
        w += 20
        _copy(o, w, body, body_len)
        w += body_len
        _put(o, w, 2, props_len)
        w += 2
        if type(text) is str:  # an id of ASCII characters
            _copy(o, w, uniq, uniq_len - 2)
            w += uniq_len - 2
            o[w] = 1
            w += 1
            t = text
            if not cython.compiled:
                o[w:w + len(t)] = t.encode()
            else:  # a character at a time: no bytes made
                for j in range(len(t)):
                    ch = t[j]
                    o[w + j] = ch
            w += len(t)
            o[w] = 2
            w += 1
        else:
            _copy(o, w, text, props_len)
            w += props_len
    return bytes(out)
