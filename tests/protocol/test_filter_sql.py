"""SQL92 property filters (protocol/filter_sql.py): RocketMQ's examples,
errors with their positions, bounds, and random expressions over random
properties checked against a reference evaluator written here.

The reference follows RocketMQ's expression classes (binary AND/OR folded left,
IS NULL as ``= NULL``, BETWEEN as two comparisons) and takes Java's
conversions of a property's text from ``JAVA``, a table written by hand from
the JDK's documented behaviour (Integer/Long/Double/Boolean.valueOf), so the
implementation's parsers are checked, not copied."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.filter_sql import (
    MAX_DEPTH,
    MAX_HEIGHT,
    MAX_IN_ITEMS,
    MAX_NODES,
    MAX_SQL_LENGTH,
    SqlEvalError,
    SqlParseError,
    compile_sql,
    java_parse_boolean,
    java_parse_double,
    java_parse_int,
)
from protocol.message import properties_to_string

# ---------------------------------------------------------------- RocketMQ's examples

AND = "a=3 and b<>4 And c>5 AND d<=4"
OR = "a=3 or b<>4 Or c>5 OR d<=4"
ABCD = ("a", "b", "c", "d")


def props(*pairs: tuple[str, str]) -> dict[str, str]:
    return dict(pairs)


# (expression, properties, what evaluate gives: True / False / None / "error")
EXAMPLES: list[tuple[str, dict[str, str], Any]] = [
    (AND, dict(zip(ABCD, "3561", strict=True)), True),
    (AND, dict(zip(ABCD, "4561", strict=True)), False),
    (OR, {"a": "3"}, True),
    (OR, {"a": "4", "b": "5"}, True),
    (OR, {"a": "4", "b": "4", "c": "6"}, True),
    (OR, {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
    (OR, {"a": "4", "b": "4", "c": "3", "d": "10"}, False),
    ("a in ('3', '4', '5')", {"a": "4"}, True),
    ("a in ('3', '4', '5')", {"a": "8"}, False),
    ("a not in ('3', '4', '5')", {"a": "8"}, True),
    ("a not in ('3', '4', '5')", {"a": "5"}, False),
    ("a in ('3', '4', '5')", {}, None),
    ("a between 2 and 10", {"a": "2"}, True),
    ("a between 2 and 10", {"a": "10"}, True),
    ("a between 2 and 10", {"a": "1"}, False),
    ("a between 2 and 10", {"a": "11"}, False),
    ("a not between 2 and 10", {"a": "1"}, True),
    ("a not between 2 and 10", {"a": "3"}, False),
    ("a is null", {"abc": "2"}, True),
    ("a is null", {"a": "2"}, False),
    ("a is not null", {"a": "2"}, True),
    ("a is not null", {"abc": "2"}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),
    ("a is not null and a='hello'", {}, False),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    ("a is null OR a='hello'", {}, True),
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
    ("a > 3.1E10", {"a": "3.1415E10"}, True),
    ("a > 3.14", {"a": "3.1415"}, True),
    ("a > b", {"a": "10", "b": "20"}, False),
    ("a > b", {"a": "20", "b": "10"}, True),
    ("a=b", {"a": "3.14", "b": "3.14"}, True),
    ("a<>b", {"a": "3.14", "b": "3.14"}, False),
    ("a<>b", {"a": "3.14", "b": "3.141"}, True),
    ("a between up and low", {"a": "3.14"}, None),
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}, "error"),
    ("key is not null and key between 0 and 100", {"key": "con"}, "error"),
    ("a between 0 and 100", {"a": "abc"}, "error"),
    ("value contains 'x'", {"value": "axb"}, True),
    ("value startswith 'ax'", {"value": "axb"}, True),
    ("value endswith 'xb'", {"value": "axb"}, True),
    ("value not contains 'x'", {"value": "axb"}, False),
    ("value not startswith 'ax'", {"value": "axb"}, False),
    ("value not endswith 'xb'", {"value": "axb"}, False),
    ("value contains 'x'", {"value": "abb"}, False),
    ("value not endswith 'x'", {"value": "abb"}, True),
    ("value contains ''", {"value": "axb"}, False),
    ("value not startswith ''", {"value": "axb"}, False),
    ("value endswith 'x'", {}, False),
    ("value not contains 'x'", {}, False),  # NULL: FALSE, with NOT too
    ("'axb' contains 'x'", {}, True),
    ("'axb' not endswith 'xb'", {}, False),
    ("'axb' startswith 'u'", {}, False),
    ("' ' contains ' '", {}, True),
    ("'axb' contains '.'", {}, False),
    ("'s' endswith '\\'", {}, False),
    ("a not in ('4', '4', '5') and b between 3 and 10 and c not contains 'axbc'",
     {"a": "3", "b": "3", "c": "axbdc"}, True),
    # from RocketMQ's documentation
    ("a between 0 and 3", {"a": "3"}, True),
    ("TAGS is not null and TAGS in ('TagA', 'TagB')", {"TAGS": "TagB"}, True),
    ("TAGS is not null and TAGS in ('TagA', 'TagB')", {}, False),
    # conversions, as RocketMQ's ComparisonExpression makes them
    ("a > 2", {"a": "3"}, True),
    ("a > 2", {"a": "2.5"}, "error"),  # Integer.valueOf("2.5") throws
    ("a > 2.0", {"a": "2.5"}, True),  # Double.valueOf
    ("a = 3", {"a": "3.0"}, "error"),
    ("a = 3.0", {"a": "3"}, True),
    ("a > 2147483647", {"a": "2147483648"}, "error"),  # an Integer literal: 32 bits
    ("a > 2147483648", {"a": "2147483649"}, True),  # a Long literal
    ("a > -1", {"a": "-0"}, True),
    ("a < 5.0", {"a": "NaN"}, False),  # Double.compare: NaN above everything
    ("a < 5", {"a": "NaN"}, "error"),  # Integer.valueOf("NaN")
    ("a > 5.5", {"a": "NaN"}, True),
    ("a = TRUE", {"a": "True"}, True),  # Boolean.valueOf ignores case
    ("a = TRUE", {"a": "yes"}, False),
    ("TRUE = a", {"a": "true"}, "error"),  # RocketMQ casts the Boolean to String
    ("(a = 'x') = 1", {"a": "x"}, False),  # a Boolean against a number: "less"
    ("(a = 'x') <> 1", {"a": "x"}, True),
    ("a = b", {}, True),  # two NULLs are equal
    ("a <> 'x'", {}, None),
    ("NOT a", {"a": "x"}, True),  # a property as a condition: FALSE (NULL when missing)
    ("NOT a", {}, None),
    ("a", {"a": "true"}, False),
    ("NOT a = 'x'", {"a": "x"}, "error"),  # (NOT a) = 'x': Boolean vs String
    ("NOT (a = 'x')", {"a": "y"}, True),
    ("-a = 1", {"a": "-1"}, None),  # a string negated is NULL
    ("a BETWEEN -5 AND -10", {"a": "-7"}, False),  # negated bounds are not checked
    ("a = 1 OR b = 'x'", {"a": "zz", "b": "x"}, "error"),  # one error spoils it all
    ("b = 'x' OR a = 1", {"a": "zz", "b": "x"}, True),  # ... unless OR is TRUE before it
    ("a = 1 AND b = 'x'", {"a": "zz", "b": "y"}, "error"),
    ("b = 'x' AND a = 1", {"a": "zz", "b": "y"}, False),
    ("TRUE", {}, True),
    ("NULL", {}, None),
    ("a = 'é' AND b = '日本'", {"a": "é", "b": "日本"}, True),
    ("x1$_ = 1 /* a comment */ -- another\n", {"x1$_": "1"}, True),
]


@pytest.mark.parametrize(("sql", "properties", "expected"), EXAMPLES)
def test_rocketmq_examples(sql: str, properties: dict[str, str], expected: Any) -> None:
    f = compile_sql(sql)
    if expected == "error":
        with pytest.raises(SqlEvalError):
            f.evaluate(lambda name: properties.get(name))
        assert not f.matches_properties(properties)
    else:
        assert f.evaluate(lambda name: properties.get(name)) is expected
        assert f.matches_properties(properties) is (expected is True)
    assert f.matches_text(properties_to_string(properties)) is (expected is True)


def test_an_empty_property_is_missing() -> None:
    f = compile_sql("a IS NULL")
    assert f.matches_properties({"a": ""}) and f.matches_text("a\x01\x02b\x01x\x02")
    assert not f.matches_text("a\x01v\x02")


VALID = [
    "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
    "(a between 2 and 10) AND (b not between 6 and 9)",
    "a <= now",
    "a=3 and b contains 'xxx' and c not contains 'xxx'",
    "a BETWEEN 3 AND 3.0",
    "1 = TRUE",
    "(a)",
    "+a IN ('x')",
    "(a) IN ('x')",
    "-'x' > 1",
    "NULL AND a = 1",
    "a IS NULL IS NULL",
    "5. > .5 AND 1e3 > 1E-3 AND 7L = 7",
]


@pytest.mark.parametrize("sql", VALID)
def test_valid_expressions(sql: str) -> None:
    compile_sql(sql)


# (expression, column, a fragment of the error)
ERRORS: list[tuple[str, int, str]] = [
    ("a and between 2 and 10", 7, "found BETWEEN"),
    ("a > 100000000000000000000000", 5, "out of range"),
    ("a > 1e999", 5, "greater than 1.7976931348623157E308"),
    ("a > 0.0", 5, "less than 4.9E-324"),
    (" a between 10 and 0", 4, "greater than its high bound"),
    ("a BETWEEN NULL AND 3", 3, "cannot be NULL"),
    ("a >", 4, "expected a property, a literal or '('"),
    ("a = NULL", 3, "write IS NULL"),
    ("NULL = a", 6, "write IS NULL"),
    ("TRUE = 5", 6, "TRUE cannot be compared with 5"),
    ("a > 'x'", 3, "'x' cannot be compared with >"),
    ("a > TRUE", 3, "TRUE cannot be compared"),
    ("(a = 1) > 2", 9, "cannot be compared with >"),
    ("NOT a BETWEEN 1 AND 2", 7, "cannot be compared"),
    ("a > 1 > 2", 7, "cannot be compared"),
    ("5", 1, "5 is not a condition"),
    ("'x' AND a = 1", 1, "is not a condition"),
    ("NOT 5", 5, "is not a condition"),
    ("-a", 1, "is not a condition"),
    ("a = 1 b", 7, "found the property b"),
    ("a = 1 )", 7, "found ')'"),
    ("a == 1", 4, "found '='"),
    ("a != 1", 3, "write <> for not equal"),
    ("a = \"x\"", 5, "single quotes"),
    ("a = 1 && b = 2", 7, "write AND, OR"),
    ("(a = 1", 7, "expected ')'"),
    ("a IN (1)", 7, "a string literal"),
    ("a IN ('x' 'y')", 11, "',' or ')'"),
    ("-a IN ('x')", 4, "IN needs a property"),
    ("a IS x", 6, "NULL or NOT NULL"),
    ("a IS NOT 1", 10, "NULL after IS NOT"),
    ("a CONTAINS b", 12, "a string literal"),
    ("a = 'open", 5, "not closed by '"),
    ("a = 1 /* open", 7, "not closed by */"),
    ("a = .", 5, "'.' must be followed by digits"),
    ("a = 1 --", 7, "found '-'"),  # a line comment needs its line end (RocketMQ's)
    ("in = 1", 1, "found IN"),  # keywords are no property names
    ("", 1, "empty"),
    ("  \n ", 1, "empty"),
    ("a = 1 AND\n  b >", 6, "line 2, column 6"),
    ("a = 1 OR 日 = 2", 10, "unexpected character '日'"),
]


@pytest.mark.parametrize(("sql", "column", "fragment"), ERRORS)
def test_errors_say_where(sql: str, column: int, fragment: str) -> None:
    with pytest.raises(SqlParseError) as info:
        compile_sql(sql)
    assert info.value.column == column, str(info.value)
    assert fragment in str(info.value)


def test_error_position_on_a_later_line() -> None:
    with pytest.raises(SqlParseError) as info:
        compile_sql("a = 1 AND\n  b >")
    assert (info.value.line, info.value.column, info.value.position) == (2, 6, 15)
    assert "line 2, column 6" in str(info.value)


# ---------------------------------------------------------------- bounds


def test_bounds() -> None:
    compile_sql("(" * (MAX_DEPTH - 1) + "a = 1" + ")" * (MAX_DEPTH - 1))
    with pytest.raises(SqlParseError, match="nests deeper"):
        compile_sql("(" * MAX_DEPTH + "a = 1" + ")" * MAX_DEPTH)
    with pytest.raises(SqlParseError, match="nests deeper"):
        compile_sql("NOT " * (MAX_DEPTH + 1) + "a")
    with pytest.raises(SqlParseError, match=f"more than {MAX_NODES}"):
        compile_sql(" OR ".join(["a = 1"] * (MAX_NODES // 3 + 1)))
    with pytest.raises(SqlParseError, match="nests operators deeper"):
        compile_sql("a" + " = 1" * MAX_HEIGHT)
    with pytest.raises(SqlParseError, match="longer than"):
        compile_sql("a = '" + "x" * MAX_SQL_LENGTH + "'")
    # a long IN list counts as one operator, its strings on their own
    items = ", ".join(f"'{i}'" for i in range(MAX_IN_ITEMS))
    f = compile_sql(f"a IN ({items})")
    assert f.matches_properties({"a": str(MAX_IN_ITEMS - 1)})
    assert not f.matches_properties({"a": str(MAX_IN_ITEMS)})
    with pytest.raises(SqlParseError, match=f"more than {MAX_IN_ITEMS} strings"):
        compile_sql(f"a IN ({items}) OR b IN ('x', 'y')")


def test_the_deepest_expressions_evaluate() -> None:
    chain = "a" + " = 1" * (MAX_HEIGHT - 2)  # ((a = 1) = 1) = ...
    assert compile_sql(chain).evaluate(lambda n: "1") is False
    nested = "(" * (MAX_DEPTH - 2) + "NOT a = 1" + ")" * (MAX_DEPTH - 2)
    assert compile_sql(nested).evaluate(lambda n: "1") is False  # TRUE = 1: Boolean vs Integer
    wide = " AND ".join(f"p{i} = {i}" for i in range(MAX_NODES // 3))
    f = compile_sql(wide)
    assert f.matches_properties({f"p{i}": str(i) for i in range(MAX_NODES // 3)})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_compiles_or_says_why(text: str) -> None:
    try:
        f = compile_sql(text)
    except SqlParseError as exc:
        assert 1 <= exc.column and exc.position <= len(text)
        return
    f.matches_properties({"a": "1"})


SOUP = ["a", "b", "TAGS", "1", "2.5", "'x'", "''", "=", "<>", ">", ">=", "<", "<=", "(", ")",
        ",", "+", "-", "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE",
        "CONTAINS", "STARTSWITH", "ENDSWITH", "/* c */"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(SOUP), max_size=14))
def test_token_soup_compiles_or_says_why(tokens: list[str]) -> None:
    text = " ".join(tokens)
    try:
        f = compile_sql(text)
    except SqlParseError:
        return
    for value in ("1", "x", "2.5", "true"):
        f.matches_properties({"a": value, "b": value, "TAGS": value})


# ---------------------------------------------------------------- Java's conversions

ERR = "ERR"
# text -> (Integer.valueOf, Long.valueOf, Double.valueOf, Boolean.valueOf), from the JDK's docs
JAVA: dict[str, tuple[Any, Any, Any, bool]] = {
    "3": (3, 3, 3.0, False),
    "-7": (-7, -7, -7.0, False),
    "+2": (2, 2, 2.0, False),
    "0": (0, 0, 0.0, False),
    "2147483647": (2147483647, 2147483647, 2147483647.0, False),
    "2147483648": (ERR, 2147483648, 2147483648.0, False),
    "-2147483648": (-2147483648, -2147483648, -2147483648.0, False),
    "9223372036854775808": (ERR, ERR, 9.223372036854776e18, False),
    "2.5": (ERR, ERR, 2.5, False),
    "1e3": (ERR, ERR, 1000.0, False),
    "-0.0": (ERR, ERR, -0.0, False),
    "NaN": (ERR, ERR, math.nan, False),
    "-Infinity": (ERR, ERR, -math.inf, False),
    " 4 ": (ERR, ERR, 4.0, False),
    "0x1p3": (ERR, ERR, 8.0, False),
    "0x1.8P1d": (ERR, ERR, 3.0, False),
    "7f": (ERR, ERR, 7.0, False),
    ".5": (ERR, ERR, 0.5, False),
    "5.": (ERR, ERR, 5.0, False),
    "\u0661\u0662": (12, 12, ERR, False),  # Arabic-Indic digits: Character.digit knows them
    "1_000": (ERR, ERR, ERR, False),
    "": (ERR, ERR, ERR, False),
    "-": (ERR, ERR, ERR, False),
    "inf": (ERR, ERR, ERR, False),
    "1e": (ERR, ERR, ERR, False),
    "true": (ERR, ERR, ERR, True),
    "TRUE": (ERR, ERR, ERR, True),
    "tRuE": (ERR, ERR, ERR, True),
    "false": (ERR, ERR, ERR, False),
    "abc": (ERR, ERR, ERR, False),
    "x'y": (ERR, ERR, ERR, False),
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) ==
                                                      math.copysign(1, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("text", sorted(JAVA))
def test_java_conversions(text: str) -> None:
    want_int, want_long, want_double, want_bool = JAVA[text]

    def got(parse: Any, *args: Any) -> Any:
        try:
            return parse(text, *args)
        except SqlEvalError:
            return ERR

    assert _same(got(java_parse_int), want_int)
    assert _same(got(java_parse_int, -(2**63), 2**63 - 1), want_long)
    assert _same(got(java_parse_double), want_double)
    assert java_parse_boolean(text) is want_bool


# ---------------------------------------------------------------- the reference

INT, LONG, DOUBLE, STR, BOOL = "Integer", "Long", "Double", "String", "Boolean"
Value = tuple[str, Any] | None


class RefError(Exception):
    """Where RocketMQ's evaluation throws."""


def convert(text: str, to: str) -> Any:
    i, lng, d, b = JAVA[text]
    got = {INT: i, LONG: lng, DOUBLE: d, BOOL: b}[to]
    if got == ERR:
        raise RefError(f"{text!r} to {to}")
    return got


def double_key(x: float) -> tuple[Any, ...]:
    return (1,) if math.isnan(x) else (0, x, math.copysign(1.0, x))


def compare_to(cls: str, a: Any, b: Any) -> int:
    if cls == DOUBLE:
        ka, kb = double_key(a), double_key(b)
    elif cls == STR:
        ka, kb = a.encode("utf-16-be"), b.encode("utf-16-be")
    else:
        ka, kb = a, b
    return -1 if ka < kb else 1 if ka > kb else 0


# (left class, right class) -> (class both become, how left converts, how right converts);
# None: the pair compares as -1; "throw": Java throws (ClassCastException)
WIDEN: dict[tuple[str, str], Any] = {
    (INT, LONG): (LONG, None, None), (INT, DOUBLE): (DOUBLE, float, None),
    (INT, STR): (INT, None, INT), (LONG, INT): (LONG, None, None),
    (LONG, DOUBLE): (DOUBLE, float, None), (LONG, STR): (LONG, None, LONG),
    (DOUBLE, INT): (DOUBLE, None, float), (DOUBLE, LONG): (DOUBLE, None, float),
    (DOUBLE, STR): (DOUBLE, None, DOUBLE), (STR, BOOL): (BOOL, BOOL, None),
    (STR, INT): (INT, INT, None), (STR, LONG): (LONG, LONG, None),
    (STR, DOUBLE): (DOUBLE, DOUBLE, None), (BOOL, STR): "throw",
}


def ref_compare(left: tuple[str, Any], right: tuple[str, Any]) -> int:
    (lc, lv), (rc, rv) = left, right
    if lc == rc:
        return compare_to(lc, lv, rv)
    rule = WIDEN.get((lc, rc))
    if rule is None:
        return -1
    if rule == "throw":
        raise RefError("Boolean cast to String")
    cls, lconv, rconv = rule
    if lconv is float:
        lv = float(lv)
    elif lconv is not None:
        lv = convert(lv, lconv)
    if rconv is float:
        rv = float(rv)
    elif rconv is not None:
        rv = convert(rv, rconv)
    return compare_to(cls, lv, rv)


ORDERED = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0,
           "<=": lambda c: c <= 0}


def truth(b: bool) -> Value:
    return (BOOL, b)


def ref_eval(node: tuple[Any, ...], props: dict[str, str]) -> Value:
    kind = node[0]
    if kind == "prop":
        text = props.get(node[1])
        return None if not text else (STR, text)
    if kind == "const":
        return node[1]
    if kind == "neg":
        v = ref_eval(node[1], props)
        if v is None or v[0] not in (INT, LONG, DOUBLE):
            return None
        return (v[0], -v[1])
    if kind == "eq":
        lv, rv = ref_eval(node[1], props), ref_eval(node[2], props)
        if lv is None and rv is None:
            return truth(True)
        if lv is None:
            return None
        if rv is None:
            return truth(False)
        return truth(ref_compare(lv, rv) == 0)
    if kind == "cmp":
        lv = ref_eval(node[2], props)
        if lv is None:
            return None
        rv = ref_eval(node[3], props)
        if rv is None:
            return None
        if lv[0] == rv[0] == STR:
            c = compare_to(DOUBLE, convert(lv[1], DOUBLE), convert(rv[1], DOUBLE))
        else:
            c = ref_compare(lv, rv)
        return truth(ORDERED[node[1]](c))
    if kind == "in":
        text = props.get(node[1])
        if not text:
            return None
        return truth((text in node[2]) != node[3])
    if kind == "strop":
        _, op, operand, search, negated = node
        if not search:
            return truth(False)
        v = ref_eval(operand, props)
        if v is None or v[0] != STR:
            return truth(False)
        hit = {"CONTAINS": search in v[1], "STARTSWITH": v[1].startswith(search),
               "ENDSWITH": v[1].endswith(search)}[op]
        return truth(hit != negated)
    if kind in ("and", "or"):  # binary, folded left: LogicExpression
        acc = ref_eval(node[1][0], props)
        for part in node[1][1:]:
            acc = ref_logic(kind, acc, part, props)
        return acc
    if kind == "not":
        v = ref_eval(node[1], props)
        return None if v is None else truth(not v[1])
    if kind == "cast":
        return None if not props.get(node[1]) else truth(False)
    raise AssertionError(kind)


def ref_logic(kind: str, left: Value, right_node: tuple[Any, ...], props: dict[str, str]
              ) -> Value:
    stop = kind == "or"  # OR stops at TRUE, AND at FALSE
    if left is not None and left[1] is stop:
        return truth(stop)
    right = ref_eval(right_node, props)
    if right is not None and right[1] is stop:
        return truth(stop)
    if left is None or right is None:
        return None
    return truth(not stop)


# ---------------------------------------------------------------- random expressions

NAMES = ("a", "b", "c", "TAGS")
TEXTS = sorted(JAVA)


@dataclass
class Expr:
    text: str
    node: tuple[Any, ...]
    kind: str  # "bool" (a condition), "value", "prop" or "literal" (a ConstantExpression)

    @property
    def const(self) -> Value:
        return self.node[1] if self.node[0] == "const" else None


def sql_string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


@st.composite
def literal(draw: st.DrawFn, numbers_only: bool = False) -> Expr:
    choice = draw(st.sampled_from(["int", "long", "double"] if numbers_only else
                                  ["int", "long", "double", "str", "bool"]))
    if choice == "int":
        v = draw(st.integers(0, 12) | st.sampled_from([2147483647]))
        return Expr(str(v), ("const", (INT, v)), "literal")
    if choice == "long":
        v = draw(st.sampled_from([2147483648, 9223372036854775807, 5]))
        suffix = "L" if v == 5 else ""
        cls = INT if v == 5 else LONG
        return Expr(f"{v}{suffix}", ("const", (cls, v)), "literal")
    if choice == "double":
        text = draw(st.sampled_from(["2.5", "1e3", "3.0", ".5", "5.", "1E-3", "7.25E1"]))
        return Expr(text, ("const", (DOUBLE, float(text))), "literal")
    if choice == "str":
        s = draw(st.sampled_from(TEXTS))
        return Expr(sql_string(s), ("const", (STR, s)), "literal")
    b = draw(st.booleans())
    return Expr("TRUE" if b else "FALSE", ("const", (BOOL, b)), "literal")


@st.composite
def prop(draw: st.DrawFn) -> Expr:
    name = draw(st.sampled_from(NAMES))
    return Expr(name, ("prop", name), "prop")


@st.composite
def value(draw: st.DrawFn, depth: int, numbers_only: bool = False) -> Expr:
    """An operand of a comparison (no condition)."""
    options = [prop(), literal(numbers_only)]
    if depth > 0:
        options.append(negated(depth - 1))
    return draw(st.one_of(options))


@st.composite
def negated(draw: st.DrawFn, depth: int) -> Expr:
    inner = draw(value(depth))
    return Expr(f"-({inner.text})", ("neg", inner.node), "value")


def operand(e: Expr) -> Expr:
    """A condition as an operand of = or IS NULL: a bare property there is the
    property (RocketMQ casts it to a condition only under AND, OR, NOT and at
    the top)."""
    return Expr(e.text, ("prop", e.node[1]), "prop") if e.node[0] == "cast" else e


@st.composite
def comparison(draw: st.DrawFn, depth: int) -> Expr:
    form = draw(st.sampled_from(["eq", "ne", "cmp", "between", "notbetween", "in", "strop",
                                 "isnull"]))
    if form in ("eq", "ne"):
        left = operand(draw(st.one_of(value(depth), condition(depth - 1)) if depth > 0
                            else value(0)))
        right = operand(draw(st.one_of(value(depth), condition(depth - 1)) if depth > 0
                             else value(0)))
        if left.node == ("const", None):
            left = draw(prop())  # NULL = x does not compile
        if right.node == ("const", None):
            right = draw(prop())
        if left.node[0] == "const" and left.const is not None and left.const[0] == BOOL \
                and right.kind == "literal":
            left = draw(prop())  # TRUE = 5 does not compile
        node: tuple[Any, ...] = ("eq", left.node, right.node)
        text = f"({left.text}) = ({right.text})"
        if form == "ne":
            return Expr(f"({left.text}) <> ({right.text})", ("not", node), "bool")
        return Expr(text, node, "bool")
    if form == "cmp":
        op = draw(st.sampled_from(sorted(ORDERED)))
        left, right = draw(value(depth, True)), draw(value(depth, True))
        return Expr(f"({left.text}) {op} ({right.text})", ("cmp", op, left.node, right.node),
                    "bool")
    if form in ("between", "notbetween"):
        v, low, high = draw(value(depth, True)), draw(value(depth, True)), draw(value(depth, True))
        if form == "between" and low.kind == high.kind == "literal" \
                and ref_compare(high.const, low.const) < 0:  # type: ignore[arg-type]
            low, high = high, low
        text = f"({v.text}) {'NOT ' if form == 'notbetween' else ''}BETWEEN ({low.text}) " \
               f"AND ({high.text})"
        if form == "between":
            node = ("and", [("cmp", ">=", v.node, low.node), ("cmp", "<=", v.node, high.node)])
        else:
            node = ("or", [("cmp", "<", v.node, low.node), ("cmp", ">", v.node, high.node)])
        return Expr(text, node, "bool")
    if form == "in":
        p = draw(prop())
        items = draw(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=4))
        neg = draw(st.booleans())
        text = f"{p.text} {'NOT ' if neg else ''}IN ({', '.join(map(sql_string, items))})"
        return Expr(text, ("in", p.text, frozenset(items), neg), "bool")
    if form == "strop":
        searched = draw(value(depth))
        op = draw(st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]))
        search = draw(st.sampled_from(["", "1", "e", "a", "'", "0x"]))
        neg = draw(st.booleans())
        text = f"({searched.text}) {'NOT ' if neg else ''}{op} {sql_string(search)}"
        return Expr(text, ("strop", op, searched.node, search, neg), "bool")
    tested = operand(draw(st.one_of(value(depth), condition(depth - 1)) if depth > 0
                          else value(0)))
    neg = draw(st.booleans())
    null = ("const", None)
    node = ("eq", tested.node, null)
    return Expr(f"({tested.text}) IS {'NOT ' if neg else ''}NULL",
                ("not", node) if neg else node, "bool")


@st.composite
def condition(draw: st.DrawFn, depth: int) -> Expr:
    if depth <= 0:
        form = draw(st.sampled_from(["cmp", "cmp", "cmp", "cast", "lit"]))
    else:
        form = draw(st.sampled_from(["cmp", "and", "or", "not", "cast", "lit"]))
    if form == "cmp":
        return draw(comparison(max(depth - 1, 0)))
    if form == "cast":
        p = draw(prop())
        return Expr(p.text, ("cast", p.text), "bool")
    if form == "lit":
        v = draw(st.sampled_from([True, False, None]))
        text = {True: "TRUE", False: "FALSE", None: "NULL"}[v]
        return Expr(text, ("const", None if v is None else (BOOL, v)), "bool")
    if form == "not":
        inner = draw(condition(depth - 1))
        return Expr(f"NOT ({inner.text})", ("not", inner.node), "bool")
    parts = draw(st.lists(condition(depth - 1), min_size=2, max_size=4))
    word = " AND " if form == "and" else " OR "
    return Expr(word.join(f"({p.text})" for p in parts), (form, [p.node for p in parts]),
                "bool")


def properties_getter(properties: dict[str, str]) -> Any:
    return lambda name: properties.get(name) or None


PROPERTY_MAPS = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(TEXTS), max_size=4)


def reference(node: tuple[Any, ...], properties: dict[str, str]) -> Any:
    try:
        v = ref_eval(node, properties)
    except RefError:
        return "error"
    return None if v is None else v[1]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=condition(3), maps=st.lists(PROPERTY_MAPS, min_size=1, max_size=8))
def test_random_expressions_match_the_reference(expr: Expr, maps: list[dict[str, str]]) -> None:
    f = compile_sql(expr.text)
    for properties in maps:
        want = reference(expr.node, properties)
        get = properties_getter(properties)
        if want == "error":
            with pytest.raises(SqlEvalError):
                f.evaluate(get)
        else:
            assert f.evaluate(get) is want, (expr.text, properties)
        selected = want is True
        assert f.matches_properties(properties) is selected, (expr.text, properties)
        assert f.matches_text(properties_to_string(properties)) is selected


# ---------------------------------------------------------------- tags the broker can pre-check


@pytest.mark.parametrize(("sql", "tags"), [
    ("TAGS = 'A'", {"A"}),
    ("'A' = TAGS", {"A"}),
    ("TAGS IN ('A', 'B') AND a > 1", {"A", "B"}),
    ("TAGS IN ('A', 'B') AND TAGS = 'B'", {"B"}),
    ("TAGS = 'A' OR TAGS IN ('B')", {"A", "B"}),
    ("TAGS = 'A' OR a > 1", None),
    ("TAGS NOT IN ('A')", None),
    ("NOT (TAGS = 'A')", None),
    ("TAGS <> 'A'", None),
    ("TAGS = 1", None),
    ("a > 1", None),
    ("(TAGS = 'A' AND a = 1) OR (TAGS = 'C' AND b = 2)", {"A", "C"}),
    ("TAGS = 'A' AND TAGS = 'B'", set()),
])
def test_required_tags(sql: str, tags: set[str] | None) -> None:
    assert compile_sql(sql).tags == (None if tags is None else frozenset(tags))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=condition(2), maps=st.lists(PROPERTY_MAPS, min_size=1, max_size=8))
def test_required_tags_never_exclude_a_match(expr: Expr, maps: list[dict[str, str]]) -> None:
    f = compile_sql(expr.text)
    for properties in maps:
        if f.tags is not None and f.matches_properties(properties):
            assert properties.get("TAGS") in f.tags
