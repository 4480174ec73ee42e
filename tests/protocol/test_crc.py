"""protocol.crc: ISA-L's CRC-32 where python-isal is installed, zlib's otherwise,
the same values either way."""

from __future__ import annotations

import importlib
import sys
import types
import zlib
from collections.abc import Iterator

import isal.isal_zlib
import pytest
from hypothesis import given
from hypothesis import strategies as st

import protocol.crc
from protocol.crc import crc32, zlib_crc32


@pytest.fixture
def reloaded() -> Iterator[None]:
    """Whatever a test does to ``protocol.crc``, the module is as it was after."""
    yield
    importlib.reload(protocol.crc)


def test_isal_is_used_when_installed() -> None:
    assert crc32 is isal.isal_zlib.crc32
    assert crc32(b"123456789") == 0xCBF43926  # CRC-32's check value


@given(st.binary(max_size=5000), st.integers(0, 4999), st.integers(0, 0xFFFFFFFF))
def test_same_values_as_zlib(data: bytes, cut: int, start: int) -> None:
    assert crc32(data) == zlib.crc32(data)
    view = memoryview(data)[cut:]
    assert crc32(view) == zlib.crc32(view)
    assert crc32(bytearray(data)) == zlib.crc32(data)
    assert crc32(data, start) == zlib.crc32(data, start)
    # a running value: two parts give the whole's
    assert crc32(data[cut:], crc32(data[:cut])) == zlib.crc32(data)


def test_zlib_without_isal(monkeypatch: pytest.MonkeyPatch, reloaded: None) -> None:
    monkeypatch.setitem(sys.modules, "isal", None)  # import isal raises ImportError
    monkeypatch.setitem(sys.modules, "isal.isal_zlib", None)
    importlib.reload(protocol.crc)
    assert protocol.crc.crc32 is zlib_crc32
    assert protocol.crc.crc32(b"123456789") == 0xCBF43926


def test_a_crc32_giving_other_values_is_not_used(monkeypatch: pytest.MonkeyPatch,
                                                 reloaded: None) -> None:
    fake = types.ModuleType("isal.isal_zlib")
    fake.crc32 = lambda data, value=0: 7  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "isal.isal_zlib", fake)
    importlib.reload(protocol.crc)
    assert protocol.crc.crc32 is zlib_crc32


def test_reload_restores_isal(reloaded: None) -> None:
    importlib.reload(protocol.crc)
    assert protocol.crc.crc32 is isal.isal_zlib.crc32
