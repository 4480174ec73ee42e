"""CRC-32 (zlib's: the polynomial of ``zlib.crc32`` and Java's ``CRC32``).

Every record's BODYCRC is computed when it is stored and checked each time it is
served, so this is on the hot path of both: zlib's table-driven crc32 takes about
400 ns a KiB on the 2-core target, ISA-L's (``isal.isal_zlib.crc32``, carry-less
multiplication) about 70 ns. ``crc32`` is ISA-L's when python-isal is installed
(a dependency where it has wheels) and zlib's otherwise; both give the same
values, bytes-like input, an optional running value, and an unsigned result.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

Crc32 = Callable[..., int]


def _fast_crc32() -> Crc32 | None:
    try:
        from isal.isal_zlib import crc32 as fast
    except ImportError:
        return None
    if fast(b"123456789", 0) != zlib.crc32(b"123456789"):  # the standard check value
        return None
    return fast


zlib_crc32: Crc32 = zlib.crc32
crc32: Crc32 = _fast_crc32() or zlib_crc32
"""crc32(data, value=0): the CRC-32 of ``data`` continuing from ``value``."""
