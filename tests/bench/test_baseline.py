"""bench/baseline.py: the old tree of a comparison, a directory or a git revision checked
out into a temporary worktree and removed afterwards (a small repository made here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.baseline import BaselineError, checked_out, git, revision

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c",
       "commit.gpgsign=false"]


def commit(repo: Path, text: str) -> None:
    for d in ("bench", "broker"):
        (repo / d).mkdir(exist_ok=True)
    (repo / "broker" / "version.txt").write_text(text)
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True, capture_output=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-q", "-m", text], check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    subprocess.run(["git", "-C", str(r), "init", "-q"], check=True, capture_output=True)
    commit(r, "one")
    commit(r, "two")
    return r


def worktrees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


def test_a_revision_is_checked_out_for_the_block_and_removed_after(repo: Path,
                                                                   tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    before = worktrees(repo)
    with checked_out("HEAD~1", repo, str(tmp)) as old:
        assert old.temporary and old.path.is_dir() and old.path.is_relative_to(tmp)
        assert (old.path / "broker" / "version.txt").read_text() == "one"
        sha = git(repo, "rev-parse", "HEAD~1")
        assert old.label == f"HEAD~1 ({sha[:12]})"
        assert len(worktrees(repo)) == len(before) + 1
        assert git(old.path, "rev-parse", "HEAD") == sha  # detached at that commit
    assert worktrees(repo) == before
    assert list(tmp.iterdir()) == []
    assert (repo / "broker" / "version.txt").read_text() == "two"  # the repo's own tree


def test_the_worktree_goes_when_the_block_fails(repo: Path, tmp_path: Path) -> None:
    before = worktrees(repo)
    with pytest.raises(KeyboardInterrupt), checked_out("HEAD", repo, str(tmp_path)) as old:
        (old.path / "broker" / "version.txt").write_text("changed")  # a dirty tree too
        raise KeyboardInterrupt
    assert worktrees(repo) == before
    assert not old.path.exists()


def test_a_directory_is_taken_as_it_is(repo: Path, tmp_path: Path) -> None:
    with checked_out(str(repo), tmp_path) as old:
        assert old.path == repo.resolve() and not old.temporary
    assert (repo / "broker" / "version.txt").exists()
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(BaselineError, match="no checkout of this project"), \
            checked_out(str(plain), repo):
        pass


@pytest.mark.parametrize("spec", ["no-such-branch", "HEAD~7", "", "--output=x", "a b",
                                  "x\x00y", "r" * 201])
def test_what_names_no_commit_is_a_clear_error(repo: Path, spec: str) -> None:
    with pytest.raises(BaselineError, match="not a git revision|neither a directory"):
        revision(spec, repo)
    assert len(worktrees(repo)) == 1


def test_a_revision_outside_any_repository(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="not in a git repository"):
        revision("HEAD", tmp_path)
