"""Bytecode ahead of time, for processes that would otherwise compile from source.

Two places pay for compiling on every start:

- Our own packages, wherever ``PYTHONDONTWRITEBYTECODE`` is set (then no
  process writes ``__pycache__``, so every daemon, tool and Spark worker
  compiles each module it imports). ``compileall`` writes the ``.pyc`` files
  once; a source edited later is simply compiled again in memory.
- Spark's Python workers. Spark puts ``$SPARK_HOME/python/lib/pyspark.zip``
  first on a worker's path, and that zip holds sources only, so every worker
  (the data source's lookup, create and plan runners and each ``pyspark.worker``)
  compiles pyspark from source: about 0.8 s of CPU each on a session's first
  read. :func:`add_zip_bytecode` adds a ``.pyc`` beside each ``.py`` member,
  the layout ``zipimport`` looks for, as checked hash-based pycs: the import
  compares the source's hash, so a ``.pyc`` can never stand in for a different
  source, and an interpreter of another version ignores them (magic number).

Both are idempotent; ``make`` runs this module before tests, runs and benches.
"""

from __future__ import annotations

import compileall
import importlib.util
import marshal
import os
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Iterable
from pathlib import Path

import click

PACKAGES = ("protocol", "namesrv", "broker", "client", "deploy", "dashboard")
ROOT = Path(__file__).resolve().parent.parent

_FLAGS_CHECKED_HASH = 0b11  # PEP 552: hash-based, check the source


def hash_pyc(source: bytes, code: object) -> bytes:
    """A checked hash-based pyc (PEP 552) for ``code`` compiled from ``source``."""
    return (importlib.util.MAGIC_NUMBER
            + _FLAGS_CHECKED_HASH.to_bytes(4, "little")
            + importlib.util.source_hash(source)
            + marshal.dumps(code))


def _pyc_is_current(data: bytes, source: bytes) -> bool:
    return (len(data) >= 16 and data[:4] == importlib.util.MAGIC_NUMBER
            and int.from_bytes(data[4:8], "little") == _FLAGS_CHECKED_HASH
            and data[8:16] == importlib.util.source_hash(source))


def add_zip_bytecode(archive: Path) -> int:
    """Give every ``.py`` member of ``archive`` a current ``.pyc`` beside it.

    The archive is rewritten to a temporary file in its directory and renamed
    over the original, so a reader sees the old zip or the new one, whole.
    Returns how many ``.pyc`` members were written (0: already current).
    """
    with zipfile.ZipFile(archive) as zin:
        infos = zin.infolist()
        names = {i.filename for i in infos}
        stale: dict[str, bytes] = {}
        for info in infos:
            if not info.filename.endswith(".py"):
                continue
            source = zin.read(info)
            pyc = info.filename + "c"
            if pyc in names and _pyc_is_current(zin.read(pyc), source):
                continue
            with warnings.catch_warnings():  # its authors' SyntaxWarnings are not ours to print
                warnings.simplefilter("ignore")
                code = compile(source, str(archive / info.filename), "exec", dont_inherit=True)
            stale[pyc] = hash_pyc(source, code)
        if not stale:
            return 0
        fd, tmp = tempfile.mkstemp(prefix=archive.name + ".", suffix=".tmp", dir=archive.parent)
        try:
            with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as zout:
                for info in infos:
                    if info.filename not in stale:
                        zout.writestr(info, zin.read(info))
                for pyc, data in stale.items():
                    zout.writestr(zipfile.ZipInfo(pyc, date_time=(1980, 1, 1, 0, 0, 0)), data,
                                  compress_type=zipfile.ZIP_DEFLATED)
            os.chmod(tmp, os.stat(archive).st_mode & 0o7777)
            os.replace(tmp, archive)
        except BaseException:
            os.unlink(tmp)
            raise
    return len(stale)


def pyspark_zip() -> Path | None:
    """The ``pyspark.zip`` Spark's workers import from, if pyspark is installed."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    home = Path(os.environ.get("SPARK_HOME") or Path(spec.origin).parent)
    path = home / "python" / "lib" / "pyspark.zip"
    return path if path.is_file() else None


def compile_packages(root: Path, packages: Iterable[str]) -> bool:
    """``compileall`` our packages (only what changed is compiled again)."""
    ok = True
    for name in packages:
        if (root / name).is_dir():
            ok = bool(compileall.compile_dir(str(root / name), quiet=1, workers=0)) and ok
    return ok


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--no-spark", is_flag=True, help="Leave pyspark.zip alone.")
def main(no_spark: bool) -> None:
    """Write bytecode for our packages and for Spark's worker zip."""
    if not compile_packages(ROOT, PACKAGES):
        sys.exit("compileall reported errors")
    if no_spark:
        return
    archive = pyspark_zip()
    if archive is None:
        return
    try:
        added = add_zip_bytecode(archive)
    except OSError as e:  # a read-only install: the workers compile, as before
        click.echo(f"pyspark.zip left as it is ({e})", err=True)
        return
    if added:
        click.echo(f"{archive}: {added} modules compiled")


if __name__ == "__main__":
    main()
