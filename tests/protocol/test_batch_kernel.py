"""protocol/batch_kernel.py, the batch body's walk written for Cython: run as plain
Python and compiled (deploy/speedups.py), each compared with decode_batch's own loop
on good bodies, cut and corrupted ones, and garbage."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import batch, batch_kernel
from protocol.batch import decode_batch, decode_batch_loop, encode_batch
from protocol.errors import RemoteProtocolError
from protocol.speedups import compiled

Walk = Callable[[bytes], Any]
COMPILED = compiled("protocol._batch_kernel_c",
                    Path(batch.__file__).with_name("batch_kernel.py"), "decode_batch")
WALKS: list[Any] = [pytest.param(batch_kernel.decode_batch, id="plain-python")]
if COMPILED is not None:
    WALKS.append(pytest.param(COMPILED, id="compiled"))

_props = st.text(st.characters(codec="utf-8"), max_size=40)
_items = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64), _props),
                  max_size=8)


def same_as_the_loop(walk: Walk, data: bytes) -> None:
    """``walk`` gives what the loop gives, or None exactly where the loop raises."""
    try:
        want = decode_batch_loop(data)
    except RemoteProtocolError:
        assert walk(data) is None
        return
    assert walk(data) == want


@pytest.mark.parametrize("walk", WALKS)
@settings(max_examples=200, deadline=None)
@given(items=_items, cuts=st.data())
def test_same_as_the_loop_on_good_cut_and_corrupted_bodies(
        walk: Walk, items: list[tuple[int, bytes, str]], cuts: st.DataObject) -> None:
    blob = bytearray(encode_batch(items))
    same_as_the_loop(walk, bytes(blob))
    if blob:
        for _ in range(cuts.draw(st.integers(1, 4))):
            at = cuts.draw(st.integers(0, len(blob) - 1))
            blob[at] = cuts.draw(st.integers(0, 255))
        blob = blob[:cuts.draw(st.integers(0, len(blob)))]
        same_as_the_loop(walk, bytes(blob))


@pytest.mark.parametrize("walk", WALKS)
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_same_as_the_loop_on_garbage(walk: Walk, data: bytes) -> None:
    same_as_the_loop(walk, data)


@pytest.mark.parametrize("walk", WALKS)
def test_edges(walk: Walk) -> None:
    big = [(2**31 - 1, b"x" * 70_000, "K\x01" + "ü" * 5000 + "\x02"), (-(2**31), b"", ""),
           (0, b"\xff", "\u4e2d\x01\U0001f600\x02")]
    data = encode_batch(big)
    assert walk(data) == big
    assert walk(b"") == []
    assert walk(data + b"\x00") is None  # a byte after the last entry
    bad_utf8 = bytearray(encode_batch([(1, b"b", "ab")]))
    bad_utf8[-1] = 0xFF
    assert walk(bytes(bad_utf8)) is None


def test_decode_batch_says_what_is_wrong_whichever_walks() -> None:
    data = encode_batch([(1, b"abc", "A\x01b\x02")])
    with pytest.raises(RemoteProtocolError, match=r"batch entry 0 \(byte 0\)"):
        decode_batch(data[:-1])
    # a body that is not bytes is walked by the loop
    assert decode_batch(bytearray(data)) == decode_batch(data) == [(1, b"abc", "A\x01b\x02")]
