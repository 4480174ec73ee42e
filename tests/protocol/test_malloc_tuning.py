"""tune_malloc: buffers of 128 KiB to 16 MiB come from the heap, not fresh mappings.

Checked in a child process (the tuning is process-wide) with glibc's mallinfo2:
``hblks`` counts the blocks malloc mapped on their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.trio import memory

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import ctypes, sys
from protocol.trio.memory import tune_malloc

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2

def mapped_while_holding(size):
    # blocks mapped on their own while a buffer of ``size`` is held, less after
    held = bytearray(size)
    n = libc.mallinfo2().hblks
    del held
    return n - libc.mallinfo2().hblks

before = mapped_while_holding(1 << 20)
tuned = tune_malloc()
after = mapped_while_holding(1 << 20)
huge = mapped_while_holding(32 << 20)  # over the threshold: mapped as before
print(before, tuned, after, huge)
"""


def child(**env: str) -> list[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
        if name not in env:  # glibc's defaults, whatever this process runs with
            full.pop(name, None)
    out = subprocess.run([sys.executable, "-c", CHILD], env=full, capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux") or memory._libc() is None
                    or not hasattr(memory._libc(), "mallinfo2"),
                    reason="needs glibc 2.33 or later (mallinfo2)")
def test_big_buffers_come_from_the_heap_once_tuned() -> None:
    before, tuned, after, huge = child(ROCKETMQ_TUNE_MALLOC="1")
    assert tuned == "True"
    assert int(before) == 1  # glibc's default maps a 1 MiB buffer on its own
    assert int(after) == 0  # tuned: from the heap
    assert int(huge) == 1
    # opted out, or glibc's own setting in the environment: left alone
    assert child(ROCKETMQ_TUNE_MALLOC="0")[1] == "False"
    assert child(MALLOC_MMAP_THRESHOLD_="131072")[1] == "False"
    assert child(GLIBC_TUNABLES="glibc.malloc.mmap_threshold=131072")[1] == "False"
