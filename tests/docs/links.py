"""Relative links in the project's markdown pages: every target file exists, every
``#anchor`` names a heading of its page (GitHub's anchors). Pure: text in, problems out."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import PurePosixPath

# [text](target) and ![alt](target), not inside code spans or fenced blocks
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"`+[^`]*`+")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lower case,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link's text stays
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced blocks."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence):
                fence = None
            continue
        if fence is None:
            out.append((n, line))
    return out


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _prose_lines(text):
        m = _HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        if s in seen:
            seen[s] += 1
            out.add(f"{s}-{seen[s]}")
        else:
            seen[s] = 0
            out.add(s)
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every link in the page's prose."""
    out: list[tuple[int, str]] = []
    for n, line in _prose_lines(text):
        for m in _LINK.finditer(_CODE_SPAN.sub("", line)):
            out.append((n, m.group(1)))
    return out


def problems(page: str, text: str, read: Callable[[str], str | None],
             is_dir: Callable[[str], bool]) -> list[str]:
    """What is wrong with ``page``'s relative links. ``page`` and the paths given to
    ``read`` (a file's text, None when there is none) and ``is_dir`` are relative to the
    repository, POSIX style."""
    found: list[str] = []
    here = PurePosixPath(page).parent
    for n, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):   # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        if path:
            resolved = _normalize(here / path)
            if resolved is None:
                found.append(f"{page}:{n}: {target} leaves the repository")
                continue
            if is_dir(resolved):
                if anchor:
                    found.append(f"{page}:{n}: {target}: an anchor on a directory")
                continue
            target_text = read(resolved)
            if target_text is None:
                found.append(f"{page}:{n}: {target}: no such file ({resolved})")
                continue
        else:
            target_text = text
            resolved = page
        if anchor and resolved.endswith(".md") and anchor not in anchors(target_text):
            found.append(f"{page}:{n}: {target}: no heading #{anchor} in {resolved}")
    return found


def _normalize(path: PurePosixPath) -> str | None:
    parts: list[str] = []
    for part in path.parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)
