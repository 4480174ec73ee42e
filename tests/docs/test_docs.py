"""Every code block of README.md and docs/**/*.md, run (tests/docs/blocks.py says how).

Blocks run in page order, README.md first, each page's blocks top to bottom, against
daemons shared by the session: a page's later block may use what an earlier one made
(a topic, a message). A block marked ``<!-- doctest: skip (reason) -->`` is reported
as skipped with its reason (``pytest -ra`` lists them); ``test_inventory`` counts
every kind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from acl.plain import parse_plain_acl
from broker.config import BrokerConfig
from controller.config import ControllerConfig
from namesrv.config import NamesrvConfig
from protocol.config import ConfigError, parse_properties
from tests.docs.blocks import (
    Block,
    DocTestError,
    Kind,
    console_script,
    parse_blocks,
    rewrite,
    substitute,
)
from tests.docs.conftest import REPO, DocEnv
from tests.docs.links import problems
from tests.integration.cluster import free_port
from tests.integration.official_client import load_error
from tests.waits import wait_until_sync

OUTPUT_TAIL = 6000


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def collect() -> tuple[list[Block], list[tuple[str, str]]]:
    """Every page's blocks, and (page, error) for pages the parser refused."""
    blocks: list[Block] = []
    errors: list[tuple[str, str]] = []
    for page in pages():
        rel = str(page.relative_to(REPO))
        try:
            blocks += parse_blocks(page.read_text(), rel)
        except DocTestError as exc:
            errors.append((rel, str(exc)))
    return blocks, errors


BLOCKS, PAGE_ERRORS = collect()
CHECKED = [b for b in BLOCKS if b.kind is not Kind.OUTPUT]


def test_pages_parse() -> None:
    """Each page's blocks say what they are, and its directives are well formed."""
    assert not PAGE_ERRORS, "\n".join(f"{page}: {err}" for page, err in PAGE_ERRORS)


def _read(rel: str) -> str | None:
    path = REPO / rel
    return path.read_text(errors="replace") if path.is_file() else None


def test_links() -> None:
    """Every relative link of every page leads to a file of the checkout, and every
    ``#anchor`` to a heading of its page."""
    found: list[str] = []
    for page in pages():
        rel = str(page.relative_to(REPO))
        found += problems(rel, page.read_text(), _read, lambda r: (REPO / r).is_dir())
    assert not found, "\n".join(found)


def test_inventory() -> None:
    """How many blocks of each kind the pages hold, and which are skipped and why
    (printed; ``pytest -s`` shows it)."""
    kinds = Counter(b.kind.value for b in BLOCKS)
    skipped = [b for b in BLOCKS if b.directive.skip]
    print(f"\n{len(BLOCKS)} blocks in {len(pages())} pages: "
          + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
          + f"; {len(skipped)} skipped:")
    for b in skipped:
        print(f"  {b.id} ({b.lang}): {b.directive.skip}")
    assert BLOCKS, "no code blocks found"
    # the skips stay few: each is a block no test can run, with its reason
    assert len(skipped) * 4 <= len(CHECKED), f"{len(skipped)} of {len(CHECKED)} blocks skipped"


def check_config(block: Block) -> None:
    kind = block.config_kind
    try:
        if kind == "acl":
            parse_plain_acl(block.text)
        elif kind == "namesrv":
            NamesrvConfig.from_properties(parse_properties(block.text, f"{block.id}:"))
        elif kind == "controller":
            ControllerConfig.from_properties(parse_properties(block.text, f"{block.id}:"))
        else:
            BrokerConfig.from_properties(parse_properties(block.text, f"{block.id}:"))
    except (ConfigError, ValueError) as exc:
        pytest.fail(f"{block.id}: the {kind} loader refuses this {block.lang} block: {exc}",
                    pytrace=False)


def block_file(env: DocEnv, block: Block, text: str) -> tuple[list[str], Path]:
    """The program to run for ``block`` (its text already rewritten)."""
    stem = re.sub(r"[^A-Za-z0-9]+", "_", block.id)
    if block.kind is Kind.PYTHON:
        path = env.workdir / "blocks" / f"{stem}.py"
        path.write_text(text)
        return [sys.executable, str(path)], path
    script = console_script(text) if block.kind is Kind.CONSOLE else text
    if not script.strip():
        pytest.fail(f"{block.id}: nothing to run (a console block's commands start with '$ ')",
                    pytrace=False)
    path = env.workdir / "blocks" / f"{stem}.sh"
    path.write_text("set -eo pipefail\n" + script)
    return ["bash", str(path)], path


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """End a block's process and everything it started (its own session)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


def failure(block: Block, text: str, why: str, output: str) -> str:
    return (f"{block.id} ({block.lang}) {why}\n--- block as run ---\n{text}"
            f"--- output (last {OUTPUT_TAIL} chars) ---\n{output[-OUTPUT_TAIL:]}")


def run_block(env: DocEnv, block: Block) -> None:
    d = block.directive
    daemons = env.daemons(d.daemons)
    try:
        text = substitute(block.text, d.subs, {
            "free_port": str(free_port(1)),
            "broker_pid": str(daemons.broker.proc.pid if daemons.broker.proc else ""),
        })
    except DocTestError as exc:
        pytest.fail(f"{block.id}: {exc}", pytrace=False)
    text = rewrite(text, {**daemons.replacements, "/tmp/": f"{env.workdir / 'tmp'}/"})
    argv, path = block_file(env, block, text)
    out_path = path.with_suffix(".out")
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(argv, cwd=env.workdir, env=env.env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        if d.until is None:
            try:
                code = proc.wait(d.timeout)
            except subprocess.TimeoutExpired:
                pytest.fail(failure(block, text, f"did not end within {d.timeout:g} s",
                                    out_path.read_text(errors="replace")), pytrace=False)
            if code != 0:
                pytest.fail(failure(block, text, f"exited with {code}",
                                    out_path.read_text(errors="replace")), pytrace=False)
        else:
            wait_for_output(block, text, proc, out_path, re.compile(d.until, re.MULTILINE),
                            d.timeout)
    finally:
        stop_group(proc)
    daemons.check_logs()


def wait_for_output(block: Block, text: str, proc: subprocess.Popen[bytes], out_path: Path,
                    pattern: re.Pattern[str], timeout: float) -> None:
    """Until ``pattern`` shows in the output; failing if the process ends first."""
    def shown() -> bool:
        return pattern.search(out_path.read_text(errors="replace")) is not None

    def running() -> None:
        code = proc.poll()
        if code is not None and not shown():
            pytest.fail(failure(block, text, f"exited with {code} before printing "
                                f"/{pattern.pattern}/", out_path.read_text(errors="replace")),
                        pytrace=False)

    try:
        wait_until_sync(shown, timeout, f"/{pattern.pattern}/ in the output", check=running)
    except AssertionError as exc:
        pytest.fail(failure(block, text, str(exc), out_path.read_text(errors="replace")),
                    pytrace=False)


@pytest.mark.parametrize("block", CHECKED, ids=[b.id for b in CHECKED])
def test_block(doc_env: DocEnv, block: Block) -> None:
    if block.directive.skip:
        pytest.skip(f"{block.id} ({block.lang}): {block.directive.skip}")
    if block.directive.needs is not None:
        why = load_error(block.directive.needs)
        if why is not None:
            pytest.skip(f"{block.id} ({block.lang}): needs {block.directive.needs}: {why}")
    if block.kind is Kind.CONFIG:
        check_config(block)
    else:
        run_block(doc_env, block)
