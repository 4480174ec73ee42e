"""The confirm-offset frame of controller mode: only a decoder that asked for
it takes one; it never goes back; data frames around it are unchanged."""

from __future__ import annotations

import pytest

from broker.store.ha.transfer import (
    CONTROLLER_MODE_FIELD,
    HAProtocolError,
    TransferDecoder,
    encode_confirm,
    encode_transfer,
    make_hello,
)
from protocol.errors import LocalProtocolError


def test_a_confirm_frame_between_data_frames_split_anywhere() -> None:
    wire = (encode_transfer(0, b"abc") + encode_confirm(2) + encode_transfer(3, b"de")
            + encode_confirm(5))
    for cut in range(len(wire) + 1):
        d = TransferDecoder(confirm=True)
        got = d.feed_joined(wire[:cut]) + d.feed_joined(wire[cut:])
        assert got == [(0, b"abcde")] or got == [(0, b"abc"), (3, b"de")], (cut, got)
        assert d.confirm_offset == 5


def test_a_decoder_that_did_not_ask_refuses_confirm_frames() -> None:
    with pytest.raises(HAProtocolError, match="negative size"):
        TransferDecoder().feed(encode_confirm(7))


def test_a_confirm_offset_going_back_breaks_the_stream() -> None:
    d = TransferDecoder(confirm=True)
    d.feed(encode_confirm(10))
    with pytest.raises(HAProtocolError, match="went back from 10 to 9"):
        d.feed(encode_confirm(9))
    with pytest.raises(LocalProtocolError):
        encode_confirm(-1)


def test_a_slave_in_controller_mode_says_so_in_its_hello() -> None:
    assert make_hello("b", "c", 1, "n", controller_mode=True).fields[CONTROLLER_MODE_FIELD] \
        == "true"
    assert CONTROLLER_MODE_FIELD not in make_hello("b", "c", 1, "n").fields
