"""The code blocks of the project's markdown pages, and what the doc tests do with each.

Pure: text in, blocks and rewritten text out (no files, no processes). ``test_docs.py``
runs what this decides.

A fenced block's language says what it is:

- ``python``: a program, run in a subprocess with the tests' interpreter;
- ``sh`` / ``bash``: a shell script, run with ``bash`` (``set -eo pipefail``);
- ``console``: the lines starting with ``$ `` are run as a script, the rest is output;
- ``properties`` / ``conf``: a broker config (or a name server's or a controller's,
  see ``config``),
  loaded with the daemon's own loader; ``yaml``: an ACL accounts file
  (``plain_acl.yml``), loaded with the broker's ACL loader;
- ``text``: output, a listing or a synopsis: never run.

A block with no language, or another one, is an error: each block says what it is.

HTML comments on the lines right above a block's opening fence steer it, one
directive each (invisible when the page is rendered)::

    <!-- doctest: skip (why it cannot run in a test) -->
    <!-- doctest: until REGEX -->          run until the output matches, then stop it
    <!-- doctest: timeout SECONDS -->      instead of DEFAULT_TIMEOUT
    <!-- doctest: daemons acl -->          against the ACL-enabled pair (plain: the default)
    <!-- doctest: config namesrv -->       a properties block for the name server
                                           (``config controller``: for mqcontroller)
    <!-- doctest: sub "OLD" "NEW" -->      replace OLD by NEW before running (small counts);
                                           NEW may hold placeholders such as {free_port}
    <!-- doctest: needs MODULE -->         skipped, saying why, where MODULE cannot be
                                           imported (an optional client's library)

Before a block runs, the daemons' documented addresses (``127.0.0.1:9876`` and the
like) are replaced by the test daemons' (``rewrite``), and ``/tmp/`` by the test's
own temporary directory.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

DEFAULT_TIMEOUT = 60.0

PYTHON_LANGS = frozenset({"python"})
SHELL_LANGS = frozenset({"sh", "bash"})
CONSOLE_LANGS = frozenset({"console"})
CONFIG_LANGS = frozenset({"properties", "conf", "yaml"})
OUTPUT_LANGS = frozenset({"text"})
KNOWN_LANGS = PYTHON_LANGS | SHELL_LANGS | CONSOLE_LANGS | CONFIG_LANGS | OUTPUT_LANGS

DAEMON_SETS = frozenset({"plain", "acl"})
CONFIG_KINDS = frozenset({"broker", "namesrv", "controller", "acl"})

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*doctest:\s*(?P<body>.*?)\s*-->\s*$")
_DIRECTIVE_START = re.compile(r"<!--\s*doctest:")


class DocTestError(ValueError):
    """A page's block or directive the doc tests cannot read; says where and why."""


class Kind(Enum):
    PYTHON = "python"
    SHELL = "shell"
    CONSOLE = "console"
    CONFIG = "config"
    OUTPUT = "output"


@dataclass(frozen=True)
class Directive:
    """What the comments above a block ask of the doc tests."""

    skip: str | None = None
    until: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    daemons: str = "plain"
    config: str | None = None
    needs: str | None = None
    subs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Block:
    path: str          # the page, relative to the repository
    line: int          # the opening fence's line, 1-based
    lang: str
    text: str          # the content, the fence's indentation taken off
    directive: Directive = field(default_factory=Directive)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def kind(self) -> Kind:
        if self.lang in PYTHON_LANGS:
            return Kind.PYTHON
        if self.lang in SHELL_LANGS:
            return Kind.SHELL
        if self.lang in CONSOLE_LANGS:
            return Kind.CONSOLE
        if self.lang in CONFIG_LANGS:
            return Kind.CONFIG
        return Kind.OUTPUT

    @property
    def config_kind(self) -> str:
        """For a config block: which loader reads it."""
        if self.directive.config is not None:
            return self.directive.config
        return "acl" if self.lang == "yaml" else "broker"


def parse_directive(body: str, where: str) -> dict[str, object]:
    """One ``<!-- doctest: ... -->`` comment's body as Directive fields."""
    word, _, rest = body.partition(" ")
    rest = rest.strip()
    if word == "skip":
        reason = rest.strip()
        if reason.startswith("(") and reason.endswith(")"):
            reason = reason[1:-1].strip()
        if not reason:
            raise DocTestError(f"{where}: 'skip' needs a reason: <!-- doctest: skip (why) -->")
        return {"skip": reason}
    if word == "until":
        if not rest:
            raise DocTestError(f"{where}: 'until' needs a regular expression")
        try:
            re.compile(rest)
        except re.error as exc:
            raise DocTestError(f"{where}: 'until' {rest!r}: {exc}") from None
        return {"until": rest}
    if word == "timeout":
        try:
            seconds = float(rest)
        except ValueError:
            raise DocTestError(f"{where}: 'timeout' needs seconds, not {rest!r}") from None
        if not 0 < seconds <= 600:
            raise DocTestError(f"{where}: 'timeout' must be within (0, 600] s, not {rest}")
        return {"timeout": seconds}
    if word == "daemons":
        if rest not in DAEMON_SETS:
            raise DocTestError(f"{where}: 'daemons' is one of {sorted(DAEMON_SETS)}, not {rest!r}")
        return {"daemons": rest}
    if word == "config":
        if rest not in CONFIG_KINDS:
            raise DocTestError(f"{where}: 'config' is one of {sorted(CONFIG_KINDS)}, not {rest!r}")
        return {"config": rest}
    if word == "needs":
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", rest):
            raise DocTestError(f"{where}: 'needs' takes a module name, not {rest!r}")
        return {"needs": rest}
    if word == "sub":
        try:
            parts = shlex.split(rest)
        except ValueError as exc:
            raise DocTestError(f"{where}: 'sub' {rest!r}: {exc}") from None
        if len(parts) != 2 or not parts[0]:
            raise DocTestError(f'{where}: \'sub\' takes two quoted strings: sub "OLD" "NEW"')
        return {"sub": (parts[0], parts[1])}
    raise DocTestError(f"{where}: unknown doctest directive {word!r} "
                       "(skip, until, timeout, daemons, config, needs, sub)")


def _directive(comments: list[tuple[int, str]], path: str) -> Directive:
    fields: dict[str, object] = {}
    subs: list[tuple[str, str]] = []
    for line, body in comments:
        got = parse_directive(body, f"{path}:{line}")
        if "sub" in got:
            pair = got.pop("sub")
            assert isinstance(pair, tuple)
            subs.append(pair)
        for key in got:
            if key in fields:
                raise DocTestError(f"{path}:{line}: '{key}' given twice for one block")
        fields.update(got)
    return Directive(subs=tuple(subs), **fields)  # type: ignore[arg-type]


def _strip_indent(line: str, indent: str) -> str:
    return line[len(indent):] if line.startswith(indent) else line.lstrip(" \t")


def parse_blocks(text: str, path: str) -> list[Block]:
    """Every fenced block of a markdown page, with its directive. Raises DocTestError
    for a block without a known language, an unclosed fence, or a directive that is
    not right above a block."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _DIRECTIVE.match(line)
        if m:
            pending.append((i + 1, m.group("body")))
            i += 1
            continue
        if _DIRECTIVE_START.search(line):
            raise DocTestError(f"{path}:{i + 1}: a doctest directive is one whole line: "
                               "<!-- doctest: ... -->")
        fence = _FENCE.match(line)
        if not fence:
            if pending:
                raise DocTestError(f"{path}:{pending[0][0]}: a doctest directive must be "
                                   "right above a code block's opening fence")
            i += 1
            continue
        indent, mark = fence.group("indent"), fence.group("fence")
        info = fence.group("info").strip()
        lang = info.split()[0].lower() if info else ""
        start = i + 1
        close = re.compile(rf"^[ \t]*{re.escape(mark[0])}{{{len(mark)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            body.append(_strip_indent(lines[i], indent))
            i += 1
        if i >= len(lines):
            raise DocTestError(f"{path}:{start}: code block never closed")
        i += 1
        if not lang:
            raise DocTestError(f"{path}:{start}: a code block needs a language "
                               "(text for output, listings and synopses)")
        if lang not in KNOWN_LANGS:
            raise DocTestError(f"{path}:{start}: language {lang!r} is not one the doc tests "
                               f"know ({', '.join(sorted(KNOWN_LANGS))})")
        directive = _directive(pending, path)
        pending = []
        block = Block(path, start, lang, "\n".join(body) + "\n", directive)
        _check_fits(block)
        blocks.append(block)
    if pending:
        raise DocTestError(f"{path}:{pending[0][0]}: a doctest directive must be right above "
                           "a code block's opening fence")
    return blocks


def _check_fits(block: Block) -> None:
    """Directives that mean nothing for the block's kind are mistakes."""
    d, kind = block.directive, block.kind
    runs = kind in (Kind.PYTHON, Kind.SHELL, Kind.CONSOLE)
    if kind is Kind.OUTPUT and d != Directive():
        raise DocTestError(f"{block.id}: a text block is never run: no directive applies")
    if not runs and (d.until or d.subs or d.needs or d.daemons != "plain"
                     or d.timeout != DEFAULT_TIMEOUT):
        raise DocTestError(f"{block.id}: until/sub/needs/daemons/timeout are for blocks "
                           "that run")
    if d.config is not None and kind is not Kind.CONFIG:
        raise DocTestError(f"{block.id}: 'config' is for properties/conf/yaml blocks")


def console_script(text: str) -> str:
    """The commands of a console block: its ``$ `` lines, with their ``\\`` continuations."""
    out: list[str] = []
    continued = False
    for line in text.splitlines():
        if continued:
            out.append(line)
        elif line.startswith("$ "):
            out.append(line[2:])
        else:
            continue
        continued = line.rstrip().endswith("\\")
    return "\n".join(out) + "\n" if out else ""


def substitute(text: str, subs: Iterable[tuple[str, str]],
               placeholders: Mapping[str, str]) -> str:
    """``text`` with each sub's OLD replaced by its NEW (placeholders such as
    ``{free_port}`` filled in). An OLD the text does not hold is an error: the page
    changed and the directive no longer does what it says."""
    for old, new in subs:
        if old not in text:
            raise DocTestError(f"sub: {old!r} is not in the block")
        for name, value in placeholders.items():
            new = new.replace("{" + name + "}", value)
        text = text.replace(old, new)
    return text


def rewrite(text: str, replacements: Mapping[str, str]) -> str:
    """Each key of ``replacements`` replaced by its value, longest keys first, in one
    pass (a value is never rewritten again)."""
    if not replacements:
        return text
    keys = sorted(replacements, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(k) for k in keys))
    return pattern.sub(lambda m: replacements[m.group(0)], text)
