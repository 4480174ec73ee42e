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
  read. :func:`add_zip_bytecode` adds a ``.pyc`` beside a ``.py`` member, the
  layout ``zipimport`` looks for, as checked hash-based pycs: the import
  compares the source's hash, so a ``.pyc`` can never stand in for a different
  source, and an interpreter of another version ignores them (magic number).
  Only the modules Spark's Python processes import get one
  (:func:`imported_members`: about 120 of pyspark's 1,300): every worker that
  Spark forks for a task calls ``importlib.invalidate_caches()``, which makes
  each of its ~15 zipimporters re-read the whole zip directory in pure Python
  (15 ms for a directory of 2,800 entries here), so a ``.pyc`` for every
  module would double that cost on every task.

Both are idempotent; ``make`` runs this module before tests, runs and benches.
"""

from __future__ import annotations

import compileall
import importlib.util
import marshal
import os
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Collection, Iterable, Sequence
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


def add_zip_bytecode(archive: Path, only: Collection[str] | None = None) -> int:
    """Give the ``.py`` members of ``archive`` a current ``.pyc`` beside them:
    every one, or those named in ``only`` (a ``.pyc`` we would have written
    beside any other source is removed; members without a source stay).

    The archive is rewritten to a temporary file in its directory and renamed
    over the original, so a reader sees the old zip or the new one, whole.
    Returns how many ``.pyc`` members were written or removed (0: already as
    wanted, the zip is left untouched).
    """
    with zipfile.ZipFile(archive) as zin:
        infos = zin.infolist()
        names = {i.filename for i in infos}
        sources = {n for n in names if n.endswith(".py")}
        unwanted = set() if only is None else {
            n + "c" for n in sources - set(only) if n + "c" in names}
        stale: dict[str, bytes] = {}
        for info in infos:
            if info.filename not in sources or (only is not None and info.filename not in only):
                continue
            source = zin.read(info)
            pyc = info.filename + "c"
            if pyc in names and _pyc_is_current(zin.read(pyc), source):
                continue
            with warnings.catch_warnings():  # its authors' SyntaxWarnings are not ours to print
                warnings.simplefilter("ignore")
                code = compile(source, str(archive / info.filename), "exec", dont_inherit=True)
            stale[pyc] = hash_pyc(source, code)
        if not stale and not unwanted:
            return 0
        fd, tmp = tempfile.mkstemp(prefix=archive.name + ".", suffix=".tmp", dir=archive.parent)
        try:
            with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as zout:
                for info in infos:
                    if info.filename not in stale and info.filename not in unwanted:
                        zout.writestr(info, zin.read(info))
                for pyc, data in stale.items():
                    zout.writestr(zipfile.ZipInfo(pyc, date_time=(1980, 1, 1, 0, 0, 0)), data,
                                  compress_type=zipfile.ZIP_DEFLATED)
            os.chmod(tmp, os.stat(archive).st_mode & 0o7777)
            os.replace(tmp, archive)
        except BaseException:
            os.unlink(tmp)
            raise
    return len(stale) + len(unwanted)


# Run in a fresh interpreter: import the modules named in argv[2:] with the
# archive argv[1] first on the path, print the archive's members they loaded.
_LIST_IMPORTED = """
import os, sys
archive = sys.argv[1]
sys.path.insert(0, archive)
for name in sys.argv[2:]:
    try:
        __import__(name)
    except Exception as exc:  # one module that cannot load does not stop the rest
        print(f"cannot import {name}: {exc!r}", file=sys.stderr)
prefix = archive + os.sep
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None) or ""
    if path.startswith(prefix):
        member = path[len(prefix):].replace(os.sep, "/")
        print(member[:-1] if member.endswith(".pyc") else member)
"""


def imported_members(archive: Path, modules: Sequence[str],
                     extra_path: Sequence[Path] = ()) -> set[str]:
    """The ``.py`` members of ``archive`` that importing ``modules`` loads, in
    a fresh interpreter with the archive first on its path (``extra_path``
    after it). Raises RuntimeError if that interpreter fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in extra_path)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    try:
        out = subprocess.run([sys.executable, "-c", _LIST_IMPORTED, str(archive), *modules],
                             capture_output=True, text=True, env=env, timeout=300)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"listing imports took over {exc.timeout} s") from exc
    if out.returncode != 0:
        raise RuntimeError(f"listing imports failed: {out.stderr.strip()[-500:]}")
    return {line for line in out.stdout.splitlines() if line.endswith(".py")}


def spark_worker_modules(archive: Path) -> list[str]:
    """What Spark runs in its Python processes (the daemon, the worker and
    every ``pyspark.sql.worker`` runner), and this project's data source."""
    with zipfile.ZipFile(archive) as z:
        runners = sorted(n[:-3].replace("/", ".") for n in z.namelist()
                         if n.startswith("pyspark/sql/worker/") and n.endswith(".py")
                         and n.count("/") == 3 and not n.endswith("__init__.py"))
    return ["pyspark.daemon", "pyspark.worker", *runners, "client.spark.source",
            "client.spark.arrow"]


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
        wanted = imported_members(archive, spark_worker_modules(archive), [ROOT])
        changed = add_zip_bytecode(archive, wanted)
    except (OSError, RuntimeError) as e:  # e.g. a read-only install: workers compile, as before
        click.echo(f"pyspark.zip left as it is ({e})", err=True)
        return
    if changed:
        click.echo(f"{archive}: bytecode for the {len(wanted)} modules Spark's workers import")


if __name__ == "__main__":
    main()
