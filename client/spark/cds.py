"""Class data sharing for Spark's driver JVM: sessions start and first-query faster.

A Spark session's JVM loads and verifies some 14,000 classes while it starts
and while it plans and runs its first query, each from a jar. A dynamic CDS
archive (JDK 13 and later) holds those classes already parsed and verified;
a JVM started with it maps the archive instead. On the 2-core VM this project
is measured on, a local session started in about 3.3 s with the archive
against 5.5 s without, and its first read of a Python data source took about
1 s less.

The archive belongs to one JDK build and one Spark installation (its jars), so
its name carries a fingerprint of both. ``python -m client.spark.cds build``
(run by ``make test``, ``make bench`` and ``make spark-cds``) makes it: a
training session in a process of its own reads the no-op data source
(``client.spark.noop``), and its JVM writes the classes it loaded when it
exits (``-XX:ArchiveClassesAtExit``). The archive is written under a
temporary name, a separate JVM must start with it (a cut archive makes a JVM
abort, not fall back), and only then is it renamed into place beside a
record of its size. ``spark_session`` adds ``-XX:SharedArchiveFile`` to the
driver's Java options when an archive for this JDK and Spark is in place and
still has the size recorded; otherwise sessions start as before.

- ``ROCKETMQ_SPARK_CDS=off`` (or ``0``, ``false``, ``no``) turns it off.
- ``ROCKETMQ_SPARK_CDS_DIR`` is where archives go (default: ``var/spark-cds``
  in the virtual environment, else ``~/.cache/trio-rocketmq/spark-cds``).
- It only helps where ``spark_session`` starts the JVM; under ``spark-submit``
  the JVM is already running: pass ``--driver-java-options`` with what
  ``python -m client.spark.cds options`` prints (``deploy/spark/submit.sh`` does).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ENV_SWITCH = "ROCKETMQ_SPARK_CDS"
ENV_DIR = "ROCKETMQ_SPARK_CDS_DIR"
DYNAMIC_MAGIC = 0xF00BABA8  # a dynamic archive's first four bytes (little-endian)
OFF_VALUES = frozenset({"0", "off", "false", "no"})
# Spark splits extraJavaOptions like a shell; a path needing quotes is not used
UNSAFE_PATH_CHARS = frozenset(" \t\n\"'\\$`")
# the JVM is told not to log CDS to its standard output: a session whose class
# path differs from the archive's (spark.driver.extraClassPath) starts without it
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
JDK_ARCHIVES = frozenset({"classes.jsa", "classes_nocoops.jsa"})  # the JDK's default ones


@dataclass(frozen=True)
class Archive:
    """Where the archive for one JDK build and Spark installation lives."""

    path: Path  # the archive (.jsa)
    record: Path  # its size and fingerprint's inputs (.json), written after it
    key: str
    java_home: Path
    spark_home: Path


def enabled(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    return environ.get(ENV_SWITCH, "on").strip().lower() not in OFF_VALUES


def default_dir(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """The archive directory: ROCKETMQ_SPARK_CDS_DIR, else the virtual
    environment's var/spark-cds, else the user's cache."""
    given = environ.get(ENV_DIR)
    if given:
        return Path(given)
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "var" / "spark-cds"
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "trio-rocketmq" / "spark-cds"


def find_java_home(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path | None:
    """JAVA_HOME, else the JDK the ``java`` on PATH belongs to."""
    home = environ.get("JAVA_HOME")
    if home:
        return Path(home)
    java = shutil.which("java")
    if java is None:
        return None
    return Path(os.path.realpath(java)).parent.parent


def find_spark_home() -> Path | None:
    """The installed pyspark package (its jars are Spark's class path)."""
    try:
        import pyspark
    except ImportError:
        return None
    return Path(pyspark.__file__).parent


def fingerprint(java_home: Path, spark_home: Path) -> str:
    """What an archive depends on: the JDK build (its ``release`` file, else its
    ``java``'s size and time) and Spark's jars (names, sizes, times)."""
    h = hashlib.sha256()
    h.update(os.fsencode(os.path.realpath(java_home)) + b"\0")
    release = java_home / "release"
    try:
        h.update(release.read_bytes())
    except OSError:
        java = java_home / "bin" / "java"
        with contextlib.suppress(OSError):
            st = java.stat()
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(b"\0" + os.fsencode(os.path.realpath(spark_home)) + b"\0")
    jars = spark_home / "jars"
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir(jars), key=lambda e: e.name):
            if entry.name.endswith(".jar"):
                st = entry.stat()
                h.update(f"{entry.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def locate(directory: Path | None = None, java_home: Path | None = None,
           spark_home: Path | None = None) -> Archive | None:
    """The archive's place for this JDK and Spark, or None without either."""
    java_home = java_home or find_java_home()
    spark_home = spark_home or find_spark_home()
    if java_home is None or spark_home is None:
        return None
    directory = directory or default_dir()
    key = fingerprint(java_home, spark_home)
    return Archive(directory / f"spark-{key}.jsa", directory / f"spark-{key}.json", key,
                   java_home, spark_home)


def usable(archive: Archive) -> bool:
    """The archive is in place, has the size recorded when it was checked, and
    starts as a dynamic archive does. (A JVM given a cut archive aborts.)"""
    try:
        record = json.loads(archive.record.read_text())
        size = archive.path.stat().st_size
        with archive.path.open("rb") as f:
            head = f.read(4)
    except (OSError, ValueError):
        return False
    return (isinstance(record, dict) and record.get("key") == archive.key
            and record.get("size") == size and len(head) == 4
            and int.from_bytes(head, "little") == DYNAMIC_MAGIC)


def java_options(archive: Archive | None = None,
                 environ: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """The driver's Java options that use the archive, or None (turned off, no
    archive for this JDK and Spark, or a path Spark could not pass whole)."""
    if not enabled(environ):
        return None
    archive = archive or locate()
    if archive is None or not usable(archive):
        return None
    if UNSAFE_PATH_CHARS.intersection(str(archive.path)):
        return None
    return f"-XX:SharedArchiveFile={archive.path} -Xshare:auto {QUIET}"


def with_archive(conf: dict[str, str], options: str | None) -> dict[str, str]:
    """``conf`` with ``options`` added to spark.driver.extraJavaOptions, unless
    there are none or the caller's options already choose an archive."""
    if not options:
        return conf
    key = "spark.driver.extraJavaOptions"
    given = conf.get(key, "")
    if "SharedArchiveFile" in given or "ArchiveClassesAtExit" in given or "-Xshare" in given:
        return conf
    return {**conf, key: f"{given} {options}".strip()}


def mapped_archive(session: object) -> str | None:
    """The class-sharing archive a running session's JVM has mapped, other than
    the JDK's own (``lib/server/classes.jsa``, or ``classes_nocoops.jsa`` for
    heaps past 32 GiB), or None (also off Linux)."""
    try:
        pid = session._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[attr-defined]
        maps = Path(f"/proc/{pid}/maps").read_text()
    except Exception:  # no JVM handle, or no /proc: not known
        return None
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)
        path = parts[5] if len(parts) == 6 else ""
        if path.endswith(".jsa") and os.path.basename(path) not in JDK_ARCHIVES:
            return path
    return None


def java_starts_with(java_home: Path, archive_path: Path, timeout: float = 60.0) -> bool:
    """A JVM starts with the archive (and exits 0). A cut or corrupt archive
    makes it abort; one written for another class path makes it start without."""
    java = java_home / "bin" / "java"
    try:
        done = subprocess.run([str(java), f"-XX:SharedArchiveFile={archive_path}",
                               "-Xshare:auto", f"-XX:ErrorFile={os.devnull}",
                               "-XX:-CreateCoredumpOnCrash", "-version"],
                              capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One builder at a time per directory (flock: released if the builder dies)."""
    fd = os.open(directory / ".build.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def train_command(target: Path) -> list[str]:
    """The training session: this module's ``train`` in a process of its own."""
    return [sys.executable, "-m", "client.spark.cds", "train", str(target)]


def build(archive: Archive, *, force: bool = False, timeout: float = 600.0,
          command: Callable[[Path], list[str]] = train_command,
          log: Callable[[str], None] = print) -> bool:
    """Make ``archive`` unless a usable one is in place; True when one is.

    The training process writes the archive under a temporary name; it is
    renamed into place only after a JVM started with it, and the record of its
    size is written last. Archives this directory holds for other fingerprints
    of the same Spark installation are removed once the new one is in place."""
    directory = archive.path.parent
    directory.mkdir(parents=True, exist_ok=True)
    with _locked(directory):
        if usable(archive) and not force:
            return True
        for stale in directory.glob(".spark-*.tmp"):  # a builder that died
            stale.unlink(missing_ok=True)
        tmp = directory / f".spark-{archive.key}.{os.getpid()}.tmp"
        env = dict(os.environ, **{ENV_SWITCH: "off"})  # the training JVM uses no top archive
        started = time.monotonic()
        try:
            done = subprocess.run(command(tmp), env=env, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            log(f"spark-cds: the training session took over {timeout:.0f} s; no archive")
            tmp.unlink(missing_ok=True)
            return False
        if done.returncode != 0 or not tmp.exists():
            tail = (done.stderr or done.stdout or "").strip().splitlines()[-3:]
            log(f"spark-cds: the training session failed (exit {done.returncode}); "
                f"no archive: {' | '.join(tail)}")
            tmp.unlink(missing_ok=True)
            return False
        if not java_starts_with(archive.java_home, tmp):
            log("spark-cds: a JVM would not start with the archive written; not used")
            tmp.unlink(missing_ok=True)
            return False
        size = tmp.stat().st_size
        archive.record.unlink(missing_ok=True)  # no record while the archive changes
        os.replace(tmp, archive.path)
        record = {"key": archive.key, "size": size, "java_home": str(archive.java_home),
                  "spark_home": str(archive.spark_home), "made": int(time.time())}
        part = archive.record.with_suffix(".json.part")
        part.write_text(json.dumps(record))
        os.replace(part, archive.record)
        _remove_others(archive, log)
        log(f"spark-cds: {archive.path} ({size / 2**20:.0f} MiB) made in "
            f"{time.monotonic() - started:.0f} s")
        return True


def _remove_others(archive: Archive, log: Callable[[str], None]) -> None:
    """Archives in the same directory for the same Spark installation but
    another fingerprint (an upgraded JDK or Spark): never used again."""
    for other in archive.path.parent.glob("spark-*.json"):
        if other == archive.record:
            continue
        try:
            record = json.loads(other.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("spark_home") == str(archive.spark_home):
            other.unlink(missing_ok=True)
            other.with_suffix(".jsa").unlink(missing_ok=True)
            log(f"spark-cds: removed {other.with_suffix('.jsa')} (another JDK or Spark)")


def train(target: Path, rows: int = 200_000) -> None:
    """The training session: a local Spark session whose JVM writes the
    classes it loaded to ``target`` when it exits; it reads the no-op source,
    as the rocketmq source is read (count, sum of body lengths), and collects
    rows back to Python. Waits for the JVM to exit."""
    from pyspark import SparkContext
    from pyspark.sql import functions as F

    from client.spark import spark_session
    from client.spark.noop import NOOP_NAME, noop_source

    options = f"-XX:ArchiveClassesAtExit={target} {QUIET}"
    session = spark_session("rocketmq-spark-cds", "local[2]",
                            **{"spark.ui.enabled": "false",
                               "spark.driver.extraJavaOptions": options})
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(noop_source())
    for n in (0, rows):
        df = session.read.format(NOOP_NAME).option("rows", str(n)).load()
        df.agg(F.count("*"), F.sum(F.length("body"))).collect()
    session.read.format(NOOP_NAME).option("rows", "100").load().limit(10).collect()
    gateway = SparkContext._gateway
    session.stop()
    proc = getattr(gateway, "proc", None)
    if proc is None:
        raise RuntimeError("no handle on the Spark JVM to wait for")
    # the JVM exits when its standard input closes, writing the archive first
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:  # no archive then, and no JVM left behind
        proc.kill()
        proc.wait()
        raise


def main(argv: list[str]) -> int:
    usage = "usage: python -m client.spark.cds build [--force] | path | options | train TARGET"
    if not argv:
        print(usage, file=sys.stderr)
        return 2
    if argv[0] == "train" and len(argv) == 2:
        train(Path(argv[1]))
        return 0
    from client.spark import prepare_environment

    prepare_environment()  # the JDK spark_session would start
    archive = locate()
    if argv[0] == "options":  # for spark-submit's --driver-java-options (deploy/spark/submit.sh)
        print((java_options(archive) if archive is not None else None) or "")
        return 0
    if argv[0] == "path":
        if archive is None or not usable(archive):
            print("no usable archive for this JDK and Spark", file=sys.stderr)
            return 1
        print(archive.path)
        return 0
    if argv[0] == "build" and set(argv[1:]) <= {"--force"}:
        if not enabled():
            print(f"spark-cds: off ({ENV_SWITCH})")
            return 0
        if archive is None:
            print("spark-cds: no Java or no pyspark here; nothing to do")
            return 0
        build(archive, force="--force" in argv[1:])
        return 0  # never fails the make target: sessions start without an archive
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
