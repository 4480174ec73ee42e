"""The generated header codecs behave as the generic loop over field specs they replace."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import headers
from protocol.errors import RemoteProtocolError
from protocol.headers import Header, IntRange, MaxLen, NameRule


def reference_from_fields(cls: type[Header], fields: dict[str, Any]) -> Any:
    """The former generic decoder, kept here as the specification."""
    kwargs: dict[str, Any] = {}
    for name, wire, typ, optional, required, check in cls._spec():
        value = fields.get(wire)
        if value is None:
            if required and not optional:
                raise RemoteProtocolError(f"{cls.__name__}: missing field {wire!r}")
            continue
        if typ is int:
            if type(value) is not int:
                value = headers.wire_int(value, f"{cls.__name__}: field {wire!r} must be an integer")
            assert isinstance(check, IntRange)
            if not check.lo <= value <= check.hi:
                raise RemoteProtocolError(
                    f"{cls.__name__}: field {wire!r} must be {check.meaning}, got {value}")
        elif not isinstance(value, typ):
            wrong = f"{cls.__name__}: field {wire!r} must be {typ.__name__}"
            if typ is bool:
                value = headers.wire_bool(value, wrong)
            elif typ is str:
                value = headers.wire_str(value, wrong)
            else:
                raise RemoteProtocolError(wrong)
        if typ is int:
            pass
        elif isinstance(check, NameRule):
            problem = check.problem(value)
            if problem is not None:
                raise RemoteProtocolError(f"{cls.__name__}: field {wire!r}: {problem}")
        elif isinstance(check, MaxLen) and len(value) > check.n:
            raise RemoteProtocolError(
                f"{cls.__name__}: field {wire!r} is longer than {check.n} characters")
        kwargs[name] = value
    return cls(**kwargs)


HEADER_CLASSES = sorted(
    (c for c in vars(headers).values()
     if isinstance(c, type) and issubclass(c, Header) and c is not Header),
    key=lambda c: c.__name__,
)

values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**64), max_value=2**64),
    st.text(max_size=8), st.sampled_from(["", "T", "bad topic", "x" * 40000, "%RETRY%g", "a:1",
                                          "12", "-3", " 7 ", "true", "FALSE", "0", "1",
                                          str(2**40), "1e3"]),
    st.binary(max_size=4), st.lists(st.integers(), max_size=2),
)


def outcome(fn: Any, cls: type[Header], fields: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", fn(cls, fields)
    except RemoteProtocolError as exc:
        return "error", str(exc)


@pytest.mark.parametrize("cls", HEADER_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_generated_decoder_matches_the_generic_one(cls: type[Header], data: st.DataObject) -> None:
    wires = [wire for _n, wire, *_ in cls._spec()]
    fields = {w: data.draw(values, label=w) for w in wires if data.draw(st.booleans())}
    got = outcome(lambda c, f: c.from_fields(f), cls, fields)
    want = outcome(reference_from_fields, cls, fields)
    assert got == want
    if got[0] == "ok":
        encoded = got[1].to_fields()
        assert encoded == {wire: getattr(got[1], name)
                           for name, wire, *_ in cls._spec()
                           if getattr(got[1], name) is not None}
        assert cls.from_fields(encoded) == got[1]


def test_each_header_class_has_its_own_codec() -> None:
    @dataclasses.dataclass(slots=True)
    class A(Header):
        a: int = 1

    @dataclasses.dataclass(slots=True)
    class B(A):
        b: str = "x"

    assert A.from_fields({"a": 5}) == A(5)
    assert B.from_fields({"a": 2, "b": "y"}) == B(2, "y")
    assert A(3).to_fields() == {"a": 3}
    assert B(4, "z").to_fields() == {"a": 4, "b": "z"}


@pytest.mark.parametrize("text, expected", [("12", 12), (" -3 ", -3), ("+7", 7), ("0", 0),
                                            (str(2**40), 2**40)])
def test_integer_text_is_read(text: str, expected: int) -> None:
    assert headers.wire_int(text, "bad") == expected


@pytest.mark.parametrize("text", ["", "1_0", "1e3", "٣", "0x10", "12a", "- 1", "9" * 25])
def test_other_text_is_no_integer(text: str) -> None:
    with pytest.raises(RemoteProtocolError, match="bad"):
        headers.wire_int(text, "bad")


@pytest.mark.parametrize("value, expected", [("true", True), ("FALSE", False), ("1", True),
                                             ("0", False), (1, True), (0, False)])
def test_boolean_text_is_read(value: object, expected: bool) -> None:
    assert headers.wire_bool(value, "bad") is expected


@pytest.mark.parametrize("value", ["yes", "2", 2, None, 1.0])
def test_other_values_are_no_boolean(value: object) -> None:
    with pytest.raises(RemoteProtocolError, match="bad"):
        headers.wire_bool(value, "bad")

