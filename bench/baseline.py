"""The old tree ``bench.all --baseline`` measures beside this one.

A directory is taken as it is (another checkout of the project: it must hold ``bench/``
and ``broker/``). Anything else is a git revision of the repository this tree belongs
to: it is checked out for the run with ``git worktree add --detach`` into a temporary
directory, and that worktree is removed afterwards whatever happens (``git worktree
remove --force``, else the directory deleted and ``git worktree prune``). The old
tree's modules then run with this interpreter, its directory first on PYTHONPATH
(``bench.all.checkout_env``); it needs no .venv of its own.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger("bench_baseline")

GIT_TIMEOUT = 300.0
SPEC_CHARS = 200


class BaselineError(Exception):
    """The baseline given is neither a checkout nor a revision that can be checked out."""


@dataclass(frozen=True, slots=True)
class Baseline:
    path: Path  # its modules run the old side's daemons and mqbench
    label: str  # what the table calls it
    temporary: bool  # a worktree made for this run (removed after it)


def looks_like_checkout(path: Path) -> bool:
    return (path / "bench").is_dir() and (path / "broker").is_dir()


def git(repo: Path, *args: str, timeout: float = GIT_TIMEOUT) -> str:
    """``git -C repo args``'s output, stripped; BaselineError with git's own words if it fails."""
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BaselineError(f"git {' '.join(args)}: {exc}") from exc
    if proc.returncode != 0:
        said = " ".join(proc.stderr.split())[-500:] or f"exit {proc.returncode}"
        raise BaselineError(f"git {' '.join(args)}: {said}")
    return proc.stdout.strip()


def revision(spec: str, repo: Path) -> str:
    """The commit ``spec`` names in ``repo``, as a full hash."""
    if not spec or len(spec) > SPEC_CHARS or spec.startswith("-") or any(
            c.isspace() or not c.isprintable() for c in spec):
        raise BaselineError(f"not a directory, and not a git revision either: {spec!r}")
    try:
        git(repo, "rev-parse", "--git-dir")
    except BaselineError as exc:
        raise BaselineError(f"{spec!r} is not a directory, and {repo} is not in a git "
                            f"repository to find it as a revision ({exc})") from exc
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}")
    except BaselineError:
        raise BaselineError(f"{spec!r} is neither a directory nor a commit of the "
                            f"repository at {repo}") from None


def remove_worktree(repo: Path, tree: Path) -> None:
    """Unregister and delete the worktree at ``tree``; deleted and pruned if git refuses."""
    try:
        git(repo, "worktree", "remove", "--force", str(tree))
    except BaselineError as exc:
        log.warning("git worktree remove failed, deleting it", tree=str(tree), error=str(exc))
        shutil.rmtree(tree, ignore_errors=True)
        try:
            git(repo, "worktree", "prune")
        except BaselineError as again:
            log.error("git worktree prune failed", error=str(again))


@contextmanager
def checked_out(spec: str, repo: Path, tmp_dir: str | None = None) -> Iterator[Baseline]:
    """The baseline ``spec`` names: a directory as it is, or revision ``spec`` of ``repo``'s
    repository checked out for the ``with`` block and removed at its end."""
    as_dir = Path(spec)
    if spec and as_dir.is_dir():
        if not looks_like_checkout(as_dir):
            raise BaselineError(f"{spec} is a directory but no checkout of this project "
                                "(no bench/ and broker/ in it)")
        yield Baseline(as_dir.resolve(), str(as_dir.resolve()), temporary=False)
        return
    sha = revision(spec, repo)
    parent = Path(tempfile.mkdtemp(prefix="mq-bench-baseline-", dir=tmp_dir))
    tree = parent / "tree"
    try:
        git(repo, "worktree", "add", "--detach", str(tree), sha)
        log.info("baseline checked out", revision=spec, commit=sha, tree=str(tree))
        try:
            yield Baseline(tree, f"{spec} ({sha[:12]})", temporary=True)
        finally:
            remove_worktree(repo, tree)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


__all__ = ["Baseline", "BaselineError", "checked_out", "git", "looks_like_checkout",
           "remove_worktree", "revision"]
