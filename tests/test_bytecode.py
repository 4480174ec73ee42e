"""deploy.bytecode: .pyc members beside a zip's sources, used by zipimport."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from deploy.bytecode import (
    add_zip_bytecode,
    compile_packages,
    imported_members,
    spark_worker_modules,
)


def make_zip(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)


def import_without_compiling(archive: Path, module: str) -> str:
    """Import ``module`` from ``archive`` in a fresh interpreter where
    zipimport's source compiler raises: it works only from bytecode."""
    script = textwrap.dedent(f"""
        import sys, zipimport
        def refuse(*a, **k):
            raise SystemExit("compiled from source: " + repr(a[0]))
        zipimport._compile_source = refuse
        sys.path.insert(0, {str(archive)!r})
        import {module} as m
        print(m.VALUE, m.__file__)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or out.stderr.strip()


def test_zip_members_get_bytecode_that_zipimport_uses(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    members = {"pkg/": b"", "pkg/__init__.py": b"VALUE = 'pkg'\n",
               "pkg/mod.py": b"VALUE = 'mod'\n", "pkg/data.txt": b"not code"}
    make_zip(archive, members)
    assert import_without_compiling(archive, "pkg.mod").startswith("compiled from source")
    assert add_zip_bytecode(archive) == 2
    out = import_without_compiling(archive, "pkg.mod")
    assert out == f"mod {archive / 'pkg' / 'mod.pyc'}"  # zipimport names the .pyc it ran
    with zipfile.ZipFile(archive) as z:  # every old member kept as it was
        for name, data in members.items():
            assert z.read(name) == data
        assert sorted(z.namelist()) == sorted([*members, "pkg/__init__.pyc", "pkg/mod.pyc"])
    assert add_zip_bytecode(archive) == 0  # current: the zip is not rewritten
    assert not list(tmp_path.glob("*.tmp"))


def test_a_changed_source_never_runs_old_bytecode(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    make_zip(archive, {"m.py": b"VALUE = 'old'\n"})
    add_zip_bytecode(archive)
    with zipfile.ZipFile(archive) as z:
        pyc = z.read("m.pyc")
    make_zip(archive, {"m.py": b"VALUE = 'new'\n", "m.pyc": pyc})  # the source moved on
    # zipimport checks the source's hash: the stale .pyc is passed over
    assert import_without_compiling(archive, "m").startswith("compiled from source")
    assert add_zip_bytecode(archive) == 1
    assert import_without_compiling(archive, "m").startswith("new ")


def test_only_the_named_sources_get_bytecode(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    make_zip(archive, {"a.py": b"VALUE = 'a'\n", "b.py": b"VALUE = 'b'\n",
                       "shipped.pyc": b"not ours"})
    assert add_zip_bytecode(archive, {"a.py"}) == 1
    assert import_without_compiling(archive, "a").startswith("a ")
    assert import_without_compiling(archive, "b").startswith("compiled from source")
    # another set: b's written, a's (one we wrote beside a source) removed
    assert add_zip_bytecode(archive, {"b.py"}) == 2
    with zipfile.ZipFile(archive) as z:
        assert sorted(z.namelist()) == ["a.py", "b.py", "b.pyc", "shipped.pyc"]
    assert add_zip_bytecode(archive, {"b.py"}) == 0
    assert import_without_compiling(archive, "b").startswith("b ")


def test_imported_members_lists_what_an_import_loads(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    make_zip(archive, {"pkg/__init__.py": b"from pkg import used\n",
                       "pkg/used.py": b"X = 1\n", "pkg/unused.py": b"X = 2\n",
                       "pkg/broken.py": b"raise ImportError('no')\n",
                       "pkg/worker/__init__.py": b"", "pkg/worker/run.py": b"",
                       "pkg/worker/deep/x.py": b""})
    assert imported_members(archive, ["pkg", "pkg.broken"]) == {"pkg/__init__.py",
                                                                 "pkg/used.py"}
    add_zip_bytecode(archive)  # loaded from .pyc, still named by source
    assert imported_members(archive, ["pkg.used"]) == {"pkg/__init__.py", "pkg/used.py"}
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("dies.py", b"import os\nos._exit(3)\n")
    with pytest.raises(RuntimeError, match="listing imports failed"):
        imported_members(archive, ["dies"])  # make leaves the zip as it is then
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("pyspark/sql/worker/__init__.py", b"")
        z.writestr("pyspark/sql/worker/plan_read.py", b"")
        z.writestr("pyspark/sql/worker/sub/deeper.py", b"")
    assert spark_worker_modules(archive) == [
        "pyspark.daemon", "pyspark.worker", "pyspark.sql.worker.plan_read",
        "client.spark.source", "client.spark.arrow"]


def test_our_packages_compile(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    assert compile_packages(tmp_path, ["pkg", "absent"])
    assert list((pkg / "__pycache__").glob("__init__.*.pyc"))
    (pkg / "bad.py").write_text("def (:\n")
    assert not compile_packages(tmp_path, ["pkg"])
