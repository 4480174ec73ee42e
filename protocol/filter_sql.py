"""SQL92 property filters: RocketMQ's ``MessageSelector.bySql`` expressions.

A hand-written tokenizer and recursive-descent parser for the grammar of
RocketMQ's ``SelectorParser.jj`` (ActiveMQ's JMS selector without LIKE,
arithmetic, hex and octal), compiled to a tree of closures. Nothing is ever
``eval``'d. Broker and client compile the same way: the client to refuse a bad
expression before sending it, the broker to filter pulls.

Grammar (keywords are case-insensitive, property names are not)::

    selector   := or EOF
    or         := and (OR and)*
    and        := equality (AND equality)*
    equality   := comparison ( '=' comparison | '<>' comparison
                             | IS NULL | IS NOT NULL )*
    comparison := unary ( ('>' | '>=' | '<' | '<=') unary
                        | [NOT] BETWEEN unary AND unary
                        | [NOT] IN '(' string (',' string)* ')'
                        | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string )*
    unary      := '+' unary | '-' unary | NOT unary | primary
    primary    := literal | property | '(' or ')'
    literal    := 'string' ('' inside is one ') | 123 | 123L | 1.5 | .5 | 5. | 1E3
                | TRUE | FALSE | NULL
    property   := [A-Za-z_$][A-Za-z0-9_$]*        (not a keyword)

Whitespace is `` \\t\\n\\r\\f``; ``-- ...`` up to a line end and ``/* ... */`` are
comments. Note RocketMQ's precedence: ``NOT`` binds tighter than ``=``, so
``NOT a = 'x'`` is ``(NOT a) = 'x'``; write ``NOT (a = 'x')``.

Evaluation is RocketMQ's, Java types and all (``ComparisonExpression``,
``LogicExpression``, ``UnaryExpression`` with ``convertStringExpressions``):

- a property's value is a string (a missing or empty property is NULL); a
  decimal literal is an Integer (a Long outside 32 bits), a floating literal a
  Double, TRUE/FALSE a Boolean;
- three-valued logic: a comparison with NULL is NULL (``=`` of two NULLs is
  TRUE), AND/OR/NOT as SQL; only TRUE selects a message;
- operands of different types are converted as RocketMQ converts them: a
  string compared with an Integer goes through ``Integer.valueOf``, with a Long
  ``Long.valueOf``, with a Double ``Double.valueOf``, with a Boolean
  ``Boolean.valueOf``; Integer/Long/Double promote to the wider one; ``>``
  ``>=`` ``<`` ``<=`` between two strings compare them as Doubles; a Boolean
  against a number compares as "less";
- a conversion that fails (``a > 2`` with ``a='x'``, or ``a='2.5'``: not an
  Integer) is an evaluation error, and a message whose evaluation fails is
  not selected (the broker logs and skips it), whatever the rest of the
  expression says;
- ``IN`` takes string literals and a property; ``CONTAINS`` / ``STARTSWITH`` /
  ``ENDSWITH`` (and their ``NOT`` forms) are FALSE on NULL or an empty search.

Differences from RocketMQ: trailing text after a complete expression is an
error here (RocketMQ's parser silently ignores it), and expressions are
bounded (``MAX_SQL_LENGTH``, ``MAX_DEPTH``, ``MAX_NODES``, ``MAX_HEIGHT``,
``MAX_IN_ITEMS``): compiling one takes a few milliseconds at most, evaluating
it on a message a bounded number of steps.
"""

from __future__ import annotations

import math
import re
import struct
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.message import PROPERTY_TAGS, find_property

# RocketMQ's ExpressionType
TAG = "TAG"
SQL92 = "SQL92"

# Bounds on what one expression may make a broker hold and do per message.
MAX_SQL_LENGTH = 32767  # characters (a heart-beat's subString holds as many)
MAX_DEPTH = 64  # nested parentheses and prefix operators
MAX_NODES = 512  # operators and operands (the strings of an IN list not counted)
# operators inside operators (``a = 1 = 2 = ...`` nests without parentheses);
# evaluation recurses this deep
MAX_HEIGHT = 128
MAX_IN_ITEMS = 1024  # strings in the IN lists of an expression, together

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
DOUBLE_MAX = 1.7976931348623157e308


def is_tag_type(expression_type: str | None) -> bool:
    """RocketMQ's ExpressionType.isTagType: None, empty and TAG are tag expressions."""
    return expression_type is None or expression_type in ("", TAG)


_PLAIN_TYPE = re.compile(r"[A-Za-z0-9_]{1,32}")


def unsupported_remark(expression_type: str) -> str:
    """RocketMQ's refusal of a subscription type the broker does not filter by
    (SQL92 without ``enablePropertyFilter``, or an unknown type)."""
    shown = expression_type if _PLAIN_TYPE.fullmatch(expression_type) else \
        repr(expression_type[:32]) + ("..." if len(expression_type) > 32 else "")
    return f"The broker does not support consumer to filter message by {shown}"


class SqlParseError(ValueError):
    """An expression that does not compile: ``position`` is the 0-based index
    in the text, ``line`` and ``column`` 1-based."""

    def __init__(self, text: str, position: int, message: str) -> None:
        self.position = position
        self.line = text.count("\n", 0, position) + 1
        self.column = position - (text.rfind("\n", 0, position) + 1) + 1
        self.reason = message
        where = f"line {self.line}, column {self.column}" if self.line > 1 else \
            f"column {self.column}"
        super().__init__(f"SQL92 expression error at {where}: {message}")


class SqlEvalError(Exception):
    """What makes RocketMQ's evaluation throw (a failed conversion): the
    message is not selected."""


# ---------------------------------------------------------------- Java values


class JInt(int):
    """A java.lang.Integer (a decimal literal within 32 bits)."""

    __slots__ = ()


class JLong(int):
    """A java.lang.Long (a decimal literal beyond 32 bits)."""

    __slots__ = ()


# Values during evaluation: None (NULL), bool, JInt, JLong, float (Double), str.
Get = Callable[[str], "str | None"]
Evaluator = Callable[[Get], Any]

_ASCII_INT = re.compile(r"[+-]?[0-9]+")
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))
_JAVA_DOUBLE = re.compile(
    r"""(?P<sign>[+-]?)(?:
        (?P<nan>NaN) | (?P<inf>Infinity)
      | (?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?
      | (?P<hex>0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?
    )""", re.X)
_DOUBLE_BITS = struct.Struct(">q")
_CANONICAL_NAN_BITS = 0x7FF8000000000000


def java_parse_int(s: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    """``Integer.valueOf`` (``Long.valueOf`` with the long bounds): an optional
    sign and decimal digits (any Unicode decimal digit of the BMP, as Java's
    ``Character.digit``), nothing else, within bounds. Raises SqlEvalError."""
    if _ASCII_INT.fullmatch(s):
        value = int(s)
    else:
        if not s:
            raise SqlEvalError("NumberFormatException: empty string")
        i, negative = 0, False
        if s[0] < "0":
            if s[0] == "-":
                negative = True
            elif s[0] != "+":
                raise SqlEvalError(f"NumberFormatException: for input string {s!r}")
            if len(s) == 1:
                raise SqlEvalError(f"NumberFormatException: for input string {s!r}")
            i = 1
        value = 0
        for ch in s[i:]:
            digit = unicodedata.decimal(ch, -1) if ord(ch) < 0x10000 else -1
            if digit < 0:
                raise SqlEvalError(f"NumberFormatException: for input string {s!r}")
            value = value * 10 + digit
            if value > hi + 1:  # bounded work on a long string of digits
                break
        value = -value if negative else value
    if not lo <= value <= hi:
        raise SqlEvalError(f"NumberFormatException: for input string {s!r} (out of range)")
    return value


def java_parse_double(s: str) -> float:
    """``Double.valueOf``: Java's format (trimmed, an optional sign, NaN,
    Infinity, decimal with an optional exponent, hexadecimal with a binary
    exponent, an optional f/F/d/D suffix). Raises SqlEvalError."""
    m = _JAVA_DOUBLE.fullmatch(s.strip(_JAVA_TRIM))
    if m is None:
        raise SqlEvalError(f"NumberFormatException: for input string {s!r}")
    negative = m["sign"] == "-"
    if m["nan"]:
        return math.nan
    if m["inf"]:
        return -math.inf if negative else math.inf
    if m["dec"] is not None:
        value = float(m["dec"])
    else:
        try:
            value = float.fromhex(m["hex"])
        except OverflowError:
            value = math.inf
    return -value if negative else value


def java_parse_boolean(s: str) -> bool:
    """``Boolean.valueOf``: "true" in any case."""
    return len(s) == 4 and s.lower() == "true"


def _double_compare(a: float, b: float) -> int:
    """``Double.compare``: -0.0 below 0.0, NaN equal to itself and above all."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b and a != 0.0:
        return 0
    ab = _CANONICAL_NAN_BITS if a != a else _DOUBLE_BITS.unpack(struct.pack(">d", a))[0]
    bb = _CANONICAL_NAN_BITS if b != b else _DOUBLE_BITS.unpack(struct.pack(">d", b))[0]
    return (ab > bb) - (ab < bb)


def _string_compare(a: str, b: str) -> int:
    """``String.compareTo``: by UTF-16 code units."""
    if a == b:
        return 0
    ea, eb = a.encode("utf-16-be", "surrogatepass"), b.encode("utf-16-be", "surrogatepass")
    return (ea > eb) - (ea < eb)


def java_compare(lv: Any, rv: Any) -> int:
    """RocketMQ's ``ComparisonExpression.__compare`` with string conversion on:
    convert the operands to one type as Java does, then ``compareTo``; a pair
    Java cannot convert compares as -1. Raises SqlEvalError where Java throws."""
    lc, rc = type(lv), type(rv)
    if lc is rc:
        if lc is float:
            return _double_compare(lv, rv)
        if lc is str:
            return _string_compare(lv, rv)
        return (lv > rv) - (lv < rv)
    if lc is str:
        if rc is JInt:
            lv = java_parse_int(lv)
        elif rc is JLong:
            lv = java_parse_int(lv, LONG_MIN, LONG_MAX)
        elif rc is float:
            return _double_compare(java_parse_double(lv), rv)
        elif rc is bool:
            lv = java_parse_boolean(lv)
        else:
            return -1
    elif lc is JInt or lc is JLong:
        if rc is float:
            return _double_compare(float(lv), rv)
        if rc is str:
            rv = java_parse_int(rv) if lc is JInt else java_parse_int(rv, LONG_MIN, LONG_MAX)
        elif rc is not JInt and rc is not JLong:
            return -1
    elif lc is float:
        if rc is JInt or rc is JLong:
            return _double_compare(lv, float(rv))
        if rc is str:
            return _double_compare(lv, java_parse_double(rv))
        return -1
    elif lc is bool:
        if rc is str:
            # RocketMQ casts the Boolean to String here: a ClassCastException
            raise SqlEvalError("ClassCastException: a Boolean compared with a String")
        return -1
    else:
        return -1
    return (lv > rv) - (lv < rv)


def _negate(v: Any) -> Any:
    """``UnaryExpression.createNegate``: numbers keep their type, anything else is NULL."""
    t = type(v)
    if t is JInt:
        return JInt(-v)
    if t is JLong:
        return JLong(-v)
    if t is float:
        return -v
    return None


# ---------------------------------------------------------------- tokens

_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
                       "CONTAINS", "STARTSWITH", "ENDSWITH"})
_STRING_OPS = ("CONTAINS", "STARTSWITH", "ENDSWITH")
_WHITESPACE = " \t\n\r\f"
# One pattern, tried at each position: its alternatives in an order that gives
# JavaCC's longest match (a floating literal before a decimal one, two-character
# operators before one-character ones, a comment before '-'), keywords before
# properties by a look-up of the identifier.
_TOKEN = re.compile(r"""
    (?P<space>[ \t\n\r\f]+)
  | (?P<comment>--[^\n\r]*(?:\n|\r\n?)|/\*.*?\*/)
  | (?P<string>'(?:[^']|'')*')
  | (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|\.[0-9]+(?:[eE][+-]?[0-9]+)?)
  | (?P<decimal>0|[1-9][0-9]*[lL]?)
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|<=|>=|[<>=(),+-])
""", re.X | re.S)


@dataclass(slots=True)
class Token:
    kind: str  # a keyword, an operator, "string", "decimal", "float", "id" or "eof"
    text: str
    pos: int


def _describe_token(tok: Token) -> str:
    if tok.kind == "eof":
        return "the end of the expression"
    if tok.kind == "string":
        return f"the string {_short(tok.text)}"
    if tok.kind in ("decimal", "float"):
        return f"the number {tok.text}"
    if tok.kind == "id":
        return f"the property {tok.text}"
    if tok.kind in _KEYWORDS:
        return tok.kind
    return f"'{tok.text}'"


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _lexical_error(text: str, i: int) -> SqlParseError:
    ch = text[i]
    if ch == "'":
        return SqlParseError(text, i, "a string literal is not closed by '")
    if text.startswith("/*", i):
        return SqlParseError(text, i, "a /* comment is not closed by */")
    if ch == ".":
        return SqlParseError(text, i, "'.' must be followed by digits")
    hint = ""
    if ch == '"':
        hint = " (string literals take single quotes: 'text')"
    elif ch == "!":
        hint = " (write <> for not equal, NOT for negation)"
    elif ch in "&|":
        hint = " (write AND, OR)"
    return SqlParseError(text, i, f"unexpected character {ch!r}{hint}")


def tokens(text: str) -> Iterator[Token]:
    """The tokens of ``text`` as they are needed (JavaCC's longest match,
    keywords before properties), then ``eof`` tokens. Raises SqlParseError at
    the first character no token starts with."""
    match = _TOKEN.match
    i, n = 0, len(text)
    while i < n:
        m = match(text, i)
        if m is None:
            raise _lexical_error(text, i)
        kind = m.lastgroup
        word = m.group()
        if kind == "id":
            upper = word.upper()
            if upper in _KEYWORDS:
                kind = upper
        elif kind == "op":
            kind = word
        if kind not in ("space", "comment"):
            yield Token(kind or "", word, i)
        i = m.end()
    while True:
        yield Token("eof", "", n)


def tokenize(text: str) -> list[Token]:
    """Every token of ``text``, ending with one ``eof`` token. Raises SqlParseError."""
    out: list[Token] = []
    for tok in tokens(text):
        out.append(tok)
        if tok.kind == "eof":
            return out
    raise AssertionError("unreachable")  # pragma: no cover


# ---------------------------------------------------------------- the tree

# Node kinds; the boolean ones are RocketMQ's BooleanExpressions.
PROP, CONST, BCONST, NEG = "prop", "const", "bconst", "neg"
EQ, CMP, IN, STROP, AND, OR, NOT, CAST = "eq", "cmp", "in", "strop", "and", "or", "not", "cast"
_BOOLEAN_KINDS = frozenset({BCONST, EQ, CMP, IN, STROP, AND, OR, NOT, CAST})


@dataclass(slots=True, eq=False)
class Node:
    """One operator or operand. ``value``: a property's name, a constant,
    a comparison's operator, an IN list (frozenset), a string operator's
    (kind, search). ``negated``: NOT IN / NOT CONTAINS ..."""

    kind: str
    pos: int
    args: tuple[Node, ...] = ()
    value: Any = None
    negated: bool = False
    height: int = 1

    @property
    def is_boolean(self) -> bool:
        return self.kind in _BOOLEAN_KINDS

    @property
    def is_constant(self) -> bool:
        """A literal (RocketMQ's ConstantExpression): a negated one is not."""
        return self.kind in (CONST, BCONST)


def describe(node: Node) -> str:
    """A node as it reads in an expression (for error messages)."""
    if node.kind == PROP:
        return str(node.value)
    if node.kind in (CONST, BCONST):
        v = node.value
        if v is None:
            return "NULL"
        if type(v) is bool:
            return "TRUE" if v else "FALSE"
        if type(v) is str:
            return _short("'" + v.replace("'", "''") + "'")
        return repr(v) if type(v) is float else str(int(v))
    if node.kind == NEG:
        return "-" + describe(node.args[0])
    if node.kind == NOT:
        return "NOT " + describe(node.args[0])
    if node.kind == CAST:
        return describe(node.args[0])
    if node.kind == CMP:
        return f"{describe(node.args[0])} {node.value} {describe(node.args[1])}"
    if node.kind == EQ:
        return f"{describe(node.args[0])} = {describe(node.args[1])}"
    return "a condition"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self._stream = tokens(text)
        self.ahead: list[Token] = [next(self._stream)]  # the current token, and any peeked
        self.depth = 0
        self.nodes = 0
        self.in_items = 0
        self.names: set[str] = set()

    # -- tokens, read as the parser needs them (a mistake early in a long text
    # is found without reading the rest)
    @property
    def tok(self) -> Token:
        return self.ahead[0]

    def peek(self, k: int = 1) -> Token:
        while len(self.ahead) <= k:
            self.ahead.append(next(self._stream))
        return self.ahead[k]

    def take(self) -> Token:
        tok = self.ahead.pop(0)
        if not self.ahead:
            self.ahead.append(next(self._stream))
        return tok

    def fail(self, expected: str, tok: Token | None = None) -> SqlParseError:
        tok = self.tok if tok is None else tok
        return SqlParseError(self.text, tok.pos, f"expected {expected}, found {_describe_token(tok)}")

    def error(self, pos: int, message: str) -> SqlParseError:
        return SqlParseError(self.text, pos, message)

    def expect(self, kind: str, expected: str) -> Token:
        if self.tok.kind != kind:
            raise self.fail(expected)
        return self.take()

    def node(self, kind: str, pos: int, args: tuple[Node, ...] = (), value: Any = None,
             negated: bool = False) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.error(pos, f"the expression has more than {MAX_NODES} operators "
                                  "and operands")
        height = 1 + max((a.height for a in args), default=0)
        if height > MAX_HEIGHT:
            raise self.error(pos, f"the expression nests operators deeper than {MAX_HEIGHT} "
                                  "levels")
        return Node(kind, pos, args, value, negated, height)

    def enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(pos, f"the expression nests deeper than {MAX_DEPTH} levels")

    # -- RocketMQ's checks, as its create* methods make them
    def as_boolean(self, node: Node) -> Node:
        """``asBooleanExpression``: a condition, or a property cast to one."""
        if node.is_boolean:
            return node
        if node.kind == PROP:
            return self.node(CAST, node.pos, (node,))
        raise self.error(node.pos, f"{describe(node)} is not a condition (compare it, "
                                   "e.g. with = or >)")

    def check_ordered(self, node: Node, op: Token) -> None:
        """``checkLessThanOperand``: no boolean, string or NULL literal, no condition."""
        if node.is_boolean or (node.kind == CONST and type(node.value) is str):
            raise self.error(op.pos, f"{describe(node)} cannot be compared with {op.text} "
                                     "(only numbers and properties can)")

    def check_equal(self, left: Node, right: Node, op: Token) -> None:
        """``checkEqualOperand`` and ``checkEqualOperandCompatability``."""
        for side in (left, right):
            if side.is_constant and side.value is None:
                raise self.error(op.pos, f"NULL cannot be compared with {op.text} "
                                         "(write IS NULL or IS NOT NULL)")
        if left.kind == BCONST and right.is_constant and right.kind != BCONST:
            raise self.error(op.pos, f"{describe(left)} cannot be compared with "
                                     f"{describe(right)}")

    # -- grammar
    def selector(self) -> Node:
        node = self.as_boolean(self.or_expr())
        if self.tok.kind != "eof":
            raise self.fail("AND, OR, a comparison or the end of the expression")
        return node

    def or_expr(self) -> Node:
        self.enter(self.tok.pos)
        first = self.and_expr()
        parts = [first]
        while self.tok.kind == "OR":
            self.take()
            if len(parts) == 1:
                parts[0] = self.as_boolean(first)
            parts.append(self.as_boolean(self.and_expr()))
        self.depth -= 1
        if len(parts) == 1:
            return first
        return self.node(OR, first.pos, tuple(parts))

    def and_expr(self) -> Node:
        first = self.equality()
        parts = [first]
        while self.tok.kind == "AND":
            self.take()
            if len(parts) == 1:
                parts[0] = self.as_boolean(first)
            parts.append(self.as_boolean(self.equality()))
        if len(parts) == 1:
            return first
        return self.node(AND, first.pos, tuple(parts))

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            tok = self.tok
            if tok.kind in ("=", "<>"):
                self.take()
                right = self.comparison()
                self.check_equal(left, right, tok)
                eq = self.node(EQ, tok.pos, (left, right))
                left = eq if tok.kind == "=" else self.node(NOT, tok.pos, (eq,))
            elif tok.kind == "IS":
                self.take()
                negated = self.tok.kind == "NOT"
                if negated:
                    self.take()
                self.expect("NULL", "NULL after IS NOT" if negated else "NULL or NOT NULL after IS")
                null = self.node(BCONST, tok.pos, value=None)
                eq = self.node(EQ, tok.pos, (left, null))
                left = self.node(NOT, tok.pos, (eq,)) if negated else eq
            else:
                return left

    def comparison(self) -> Node:
        left = self.unary()
        while True:
            tok = self.tok
            kind = tok.kind
            negated = False
            if kind == "NOT" and self.peek().kind in ("BETWEEN", "IN", *_STRING_OPS):
                self.take()
                negated = True
                kind = self.tok.kind
            if kind in (">", ">=", "<", "<="):
                self.take()
                right = self.unary()
                left = self.ordered(kind, left, right, tok)
            elif kind == "BETWEEN":
                self.take()
                low = self.unary()
                self.expect("AND", "AND between the bounds of BETWEEN")
                high = self.unary()
                left = self.between(left, low, high, negated, tok)
            elif kind == "IN":
                self.take()
                self.expect("(", "'(' after IN")
                items = [self.in_item()]
                while self.tok.kind == ",":
                    self.take()
                    items.append(self.in_item())
                self.expect(")", "',' or ')' in the IN list")
                if left.kind != PROP:
                    raise self.error(tok.pos, f"IN needs a property on its left, not "
                                              f"{describe(left)}")
                self.names.add(left.value)
                left = self.node(IN, tok.pos, (left,), frozenset(items), negated)
            elif kind in _STRING_OPS:
                self.take()
                search = self.string()
                left = self.node(STROP, tok.pos, (left,), (kind, search), negated)
            else:
                return left

    def ordered(self, op: str, left: Node, right: Node, tok: Token) -> Node:
        self.check_ordered(left, tok)
        self.check_ordered(right, tok)
        return self.node(CMP, tok.pos, (left, right), op)

    def between(self, value: Node, low: Node, high: Node, negated: bool, tok: Token) -> Node:
        if not negated and low.is_constant and high.is_constant:
            if low.value is None or high.value is None:
                raise self.error(tok.pos, "the bounds of BETWEEN cannot be NULL")
            try:
                inverted = java_compare(high.value, low.value) < 0
            except SqlEvalError:
                raise self.error(tok.pos, f"the bounds of BETWEEN, {describe(low)} and "
                                          f"{describe(high)}, cannot be compared") from None
            if inverted:
                raise self.error(tok.pos, f"the low bound of BETWEEN, {describe(low)}, is "
                                          f"greater than its high bound, {describe(high)}")
        if negated:  # value < low OR value > high
            at = Token("<", "NOT BETWEEN", tok.pos)
            parts = (self.ordered("<", value, low, at), self.ordered(">", value, high, at))
            return self.node(OR, tok.pos, parts)
        at = Token(">=", "BETWEEN", tok.pos)
        parts = (self.ordered(">=", value, low, at), self.ordered("<=", value, high, at))
        return self.node(AND, tok.pos, parts)

    def in_item(self) -> str:
        self.in_items += 1
        if self.in_items > MAX_IN_ITEMS:
            raise self.error(self.tok.pos, f"the IN lists hold more than {MAX_IN_ITEMS} strings")
        return self.string()

    def string(self) -> str:
        tok = self.expect("string", "a string literal in single quotes")
        return tok.text[1:-1].replace("''", "'")

    def unary(self) -> Node:
        tok = self.tok
        if tok.kind in ("+", "-", "NOT"):
            self.take()
            self.enter(tok.pos)
            operand = self.unary()
            self.depth -= 1
            if tok.kind == "+":
                return operand  # RocketMQ's unary plus is the operand itself
            if tok.kind == "-":
                return self.node(NEG, tok.pos, (operand,))
            return self.node(NOT, tok.pos, (self.as_boolean(operand),))
        return self.primary()

    def primary(self) -> Node:
        tok = self.tok
        kind = tok.kind
        if kind == "(":
            self.take()
            node = self.or_expr()
            self.expect(")", "')'")
            return node
        if kind == "id":
            self.take()
            self.names.add(tok.text)
            return self.node(PROP, tok.pos, value=tok.text)
        if kind == "string":
            return self.node(CONST, tok.pos, value=self.string())
        if kind == "decimal":
            self.take()
            digits = tok.text.rstrip("lL")
            value = int(digits)
            if value > LONG_MAX:
                raise self.error(tok.pos, f"{tok.text} is out of range (decimal literals are "
                                          "64-bit integers)")
            const = JInt(value) if value <= INT_MAX else JLong(value)
            return self.node(CONST, tok.pos, value=const)
        if kind == "float":
            self.take()
            number = float(tok.text)
            if number > DOUBLE_MAX:
                raise self.error(tok.pos, f"{tok.text} is greater than 1.7976931348623157E308")
            if number < 5e-324:  # RocketMQ refuses below Double.MIN_VALUE, zero included
                raise self.error(tok.pos, f"{tok.text} is less than 4.9E-324 (RocketMQ "
                                          "refuses a floating-point zero: write 0)")
            return self.node(CONST, tok.pos, value=number)
        if kind in ("TRUE", "FALSE", "NULL"):
            self.take()
            truth = None if kind == "NULL" else kind == "TRUE"
            return self.node(BCONST, tok.pos, value=truth)
        raise self.fail("a property, a literal or '('")


def parse_sql(text: str) -> tuple[Node, int, frozenset[str]]:
    """(the tree, its node count, the property names it reads) of an
    expression. Raises SqlParseError."""
    if not isinstance(text, str):
        raise SqlParseError("", 0, "the expression must be a string")
    if len(text) > MAX_SQL_LENGTH:
        raise SqlParseError(text[:MAX_SQL_LENGTH], MAX_SQL_LENGTH,
                            f"the expression is longer than {MAX_SQL_LENGTH} characters")
    if not text.strip(_WHITESPACE):
        raise SqlParseError(text, 0, "the expression is empty")
    p = _Parser(text)
    root = p.selector()
    return root, p.nodes, frozenset(p.names)


# ---------------------------------------------------------------- evaluation

_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0,
}


def _compile(node: Node) -> Evaluator:
    kind = node.kind
    if kind == PROP:
        name = node.value

        def prop(get: Get) -> Any:
            return get(name)
        return prop
    if kind in (CONST, BCONST):
        constant = node.value
        return lambda get: constant
    if kind == NEG:
        operand = node.args[0]
        if operand.is_constant:
            negated = _negate(operand.value)
            return lambda get: negated
        inner = _compile(operand)
        return lambda get: _negate(inner(get))
    if kind == CAST:
        name = node.args[0].value

        def cast(get: Get) -> Any:
            # a property is a string, never a Boolean: FALSE, or NULL when missing
            return None if get(name) is None else False
        return cast
    if kind == NOT:
        inner = _compile(node.args[0])

        def not_(get: Get) -> Any:
            v = inner(get)
            return None if v is None else not v
        return not_
    if kind == AND:
        parts = tuple(_compile(a) for a in node.args)

        def and_(get: Get) -> Any:
            unknown = False
            for part in parts:
                v = part(get)
                if v is False:
                    return False
                if v is None:
                    unknown = True
            return None if unknown else True
        return and_
    if kind == OR:
        parts = tuple(_compile(a) for a in node.args)

        def or_(get: Get) -> Any:
            unknown = False
            for part in parts:
                v = part(get)
                if v is True:
                    return True
                if v is None:
                    unknown = True
            return None if unknown else False
        return or_
    if kind in (EQ, CMP):
        fast = _compile_property_test(node)
        if fast is not None:
            return fast
    if kind == EQ:
        left, right = (_compile(a) for a in node.args)

        def eq(get: Get) -> Any:
            lv = left(get)
            rv = right(get)
            if lv is None:
                return True if rv is None else None
            if rv is None:
                return False
            if type(lv) is str and type(rv) is str:
                return lv == rv
            return java_compare(lv, rv) == 0
        return eq
    if kind == CMP:
        left, right = (_compile(a) for a in node.args)
        test = _TESTS[node.value]

        def cmp(get: Get) -> Any:
            lv = left(get)
            if lv is None:
                return None
            rv = right(get)
            if rv is None:
                return None
            if type(lv) is str and type(rv) is str:  # two strings: as Doubles
                return test(_double_compare(java_parse_double(lv), java_parse_double(rv)))
            return test(java_compare(lv, rv))
        return cmp
    if kind == IN:
        name = node.args[0].value
        items: frozenset[str] = node.value
        negated_in = node.negated

        def in_(get: Get) -> Any:
            v = get(name)
            if v is None:
                return None
            return (v in items) != negated_in
        return in_
    if kind == STROP:
        inner = _compile(node.args[0])
        op, search = node.value
        negated_op = node.negated
        method = {"CONTAINS": str.__contains__, "STARTSWITH": str.startswith,
                  "ENDSWITH": str.endswith}[op]

        def strop(get: Get) -> Any:
            if not search:
                return False
            v = inner(get)
            if type(v) is not str:  # NULL or not a string: FALSE, with NOT too
                return False
            return bool(method(v, search)) != negated_op
        return strop
    raise AssertionError(f"unknown node {kind}")  # pragma: no cover


def _property_reader(constant: Any) -> Callable[[str], Any] | None:
    """How a property's text is converted to compare with ``constant`` on the
    right (``java_compare``'s string-on-the-left conversions), or None when it
    is compared as it is (a string) or the pair takes the general path."""
    t = type(constant)
    if t is JInt:
        return java_parse_int
    if t is JLong:
        return lambda v: java_parse_int(v, LONG_MIN, LONG_MAX)
    if t is float:
        return java_parse_double
    return None


def _compile_property_test(node: Node) -> Evaluator | None:
    """``property OP constant``, the usual shape, without the general path's
    calls: the same results (NULL and conversion errors included), or None
    for any other shape."""
    left, right = node.args
    if left.kind != PROP or right.kind != CONST or right.value is None:
        return None
    name, constant = left.value, right.value
    read = _property_reader(constant)
    if node.kind == EQ:
        if type(constant) is str:
            def eq_text(get: Get) -> Any:
                v = get(name)
                return None if v is None else v == constant
            return eq_text
        if read is None:
            return None
        if type(constant) is float:
            def eq_double(get: Get) -> Any:
                v = get(name)
                return None if v is None else _double_compare(read(v), constant) == 0
            return eq_double

        def eq_number(get: Get) -> Any:
            v = get(name)
            return None if v is None else read(v) == constant
        return eq_number
    test = _TESTS[node.value]
    if read is None:  # (a string literal is never ordered: it does not compile)
        return None
    if type(constant) is float:
        def cmp_double(get: Get) -> Any:
            v = get(name)
            return None if v is None else test(_double_compare(read(v), constant))
        return cmp_double

    def cmp_number(get: Get) -> Any:
        v = get(name)
        if v is None:
            return None
        x = read(v)
        return test((x > constant) - (x < constant))
    return cmp_number


def required_tags(node: Node) -> frozenset[str] | None:
    """Tags a message must have to be selected (``TAGS = 'x'``, ``TAGS IN
    (...)`` in the expression's top AND/OR structure), or None when any tag
    can match: the broker then skips other tags by their consume-queue hash
    without reading the records."""
    kind = node.kind
    if kind == EQ:
        left, right = node.args
        for prop, const in ((left, right), (right, left)):
            if prop.kind == PROP and prop.value == PROPERTY_TAGS and const.kind == CONST \
                    and type(const.value) is str:
                return frozenset((const.value,))
        return None
    if kind == IN and not node.negated and node.args[0].value == PROPERTY_TAGS:
        return node.value
    if kind == AND:
        found = [t for t in (required_tags(a) for a in node.args) if t is not None]
        if not found:
            return None
        out = found[0]
        for t in found[1:]:
            out &= t
        return out
    if kind == OR:
        union: frozenset[str] = frozenset()
        for a in node.args:
            needed = required_tags(a)
            if needed is None:
                return None
            union |= needed
        return union
    return None


@dataclass(frozen=True, slots=True, eq=False)
class SqlFilter:
    """A compiled expression."""

    text: str
    node_count: int
    names: frozenset[str]  # the properties it reads
    tags: frozenset[str] | None  # ``required_tags``
    _root: Evaluator

    def evaluate(self, get: Get) -> bool | None:
        """TRUE, FALSE or NULL for the properties ``get`` gives (None for a
        missing one). Raises SqlEvalError where RocketMQ's evaluation throws."""
        result = self._root(get)
        return result if result is None else bool(result)

    def matches(self, get: Get) -> bool:
        """Whether a message is selected: only TRUE selects, an evaluation error never."""
        try:
            return self._root(get) is True
        except SqlEvalError:
            return False

    def matches_properties(self, props: Mapping[str, str]) -> bool:
        """``matches`` over a property map (an empty value is a missing one, as
        RocketMQ's property decoding drops it)."""
        return self.matches(lambda name: props.get(name) or None)

    def matches_text(self, text: str) -> bool:
        """``matches`` over a record's properties text (``key\\x01value\\x02...``)."""
        values = {name: find_property(text, name) or None for name in self.names}
        return self.matches(values.get)


def compile_sql(text: str) -> SqlFilter:
    """Compile an SQL92 expression. Raises SqlParseError. (The broker keeps
    compiled subscriptions in broker/consumer_filter_manager.py, the client in
    client/subscription.py.)"""
    root, count, names = parse_sql(text)
    return SqlFilter(text, count, names, required_tags(root), _compile(root))
