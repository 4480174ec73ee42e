"""deploy/speedups.py: every kernel is compiled where the tools are (make builds
them before the tests), and the builder embeds its source's hash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deploy import speedups
from protocol.speedups import NO_SPEEDUPS_ENV, compiled


@pytest.mark.parametrize("source, module, name", speedups.KERNELS)
def test_every_kernel_is_compiled_wherever_the_tools_are(source: str, module: str,
                                                         name: str) -> None:
    """Where Cython and a C compiler are at hand a missing or stale build is a
    failure, not a silent fallback to the plain loop."""
    why = speedups.missing_tools()
    if why is not None or os.environ.get(NO_SPEEDUPS_ENV):
        pytest.skip(f"nothing to compile with here: {why or 'turned off'}")
    assert compiled(module, speedups.ROOT / source, name) is not None, (
        "run `make speedups` (python -m deploy.speedups)")


def test_the_builder_embeds_the_source_hash(tmp_path: Path) -> None:
    why = speedups.missing_tools()
    if why is not None:
        pytest.skip(f"nothing to compile with here: {why}")
    package = tmp_path / "kpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = package / "tiny.py"
    source.write_text("import cython\n\n\ndef twice(x: cython.int) -> int:\n    return x * 2\n")
    built = speedups.build(source, "kpkg._tiny_c", root=tmp_path)
    assert built == speedups.built_path("kpkg._tiny_c", tmp_path) and built.exists()
    assert speedups.built_sha("kpkg._tiny_c", tmp_path) == speedups.source_sha(source)
    assert speedups.built_sha("kpkg._nothing_c", tmp_path) is None


def test_without_cython_nothing_is_built_and_make_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    monkeypatch.setattr(speedups, "missing_tools", lambda: "Cython is not installed")
    result = CliRunner().invoke(speedups.main, [])
    assert result.exit_code == 0
    assert "not compiled (Cython is not installed); the plain Python loops run" in result.output


def test_in_use_says_which_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    assert speedups.in_use_text({"a._x_c": True, "b._y_c": True}) == "2 of 2"
    monkeypatch.delenv(NO_SPEEDUPS_ENV, raising=False)
    assert speedups.in_use_text({"a._x_c": True, "b._y_c": False}) == (
        "1 of 2 (not built or stale: b._y_c)")
    monkeypatch.setenv(NO_SPEEDUPS_ENV, "1")
    assert speedups.in_use_text({"a._x_c": False, "b._y_c": False}) == (
        f"0 of 2 ({NO_SPEEDUPS_ENV} set)")
    assert speedups.in_use() == {m: False for _, m, _ in speedups.KERNELS}  # turned off
    assert speedups.in_use_text(None) == speedups.in_use_text({}) == "n/a"
