"""Class-data-sharing archives for Spark's driver JVM (client.spark.cds).

The fingerprint, the checks and the options are pure; the builder is driven
with a stand-in training command that makes a small real archive with this
machine's JDK (``java -XX:ArchiveClassesAtExit=... -version``), so its
renaming, checking and clean-up run against the JVM's own behaviour."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from client.spark import cds


def fake_homes(tmp_path: Path) -> tuple[Path, Path]:
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    (java_home / "release").write_text('JAVA_VERSION="17.0.15"\n')
    spark_home = tmp_path / "pyspark"
    (spark_home / "jars").mkdir(parents=True)
    (spark_home / "jars" / "spark-core.jar").write_bytes(b"x" * 10)
    return java_home, spark_home


def test_fingerprint_follows_the_jdk_build_and_the_jars(tmp_path: Path) -> None:
    java_home, spark_home = fake_homes(tmp_path)
    first = cds.fingerprint(java_home, spark_home)
    assert cds.fingerprint(java_home, spark_home) == first
    (java_home / "release").write_text('JAVA_VERSION="17.0.16"\n')
    second = cds.fingerprint(java_home, spark_home)
    assert second != first
    (spark_home / "jars" / "extra.jar").write_bytes(b"y")
    third = cds.fingerprint(java_home, spark_home)
    assert third != second
    (spark_home / "jars" / "notes.txt").write_text("not a jar")
    assert cds.fingerprint(java_home, spark_home) == third


def place(archive: cds.Archive, body: bytes, size: int | None = None,
          key: str | None = None) -> None:
    archive.path.parent.mkdir(parents=True, exist_ok=True)
    archive.path.write_bytes(body)
    archive.record.write_text(json.dumps({"key": key or archive.key,
                                          "size": len(body) if size is None else size}))


MAGIC = cds.DYNAMIC_MAGIC.to_bytes(4, "little")


def test_an_archive_is_usable_only_whole_recorded_and_dynamic(tmp_path: Path) -> None:
    java_home, spark_home = fake_homes(tmp_path)
    archive = cds.locate(tmp_path / "cds", java_home, spark_home)
    assert archive is not None
    assert archive.path.name == f"spark-{archive.key}.jsa"
    assert not cds.usable(archive)  # nothing there
    place(archive, MAGIC + bytes(100))
    assert cds.usable(archive)
    place(archive, MAGIC + bytes(100), size=200)  # cut or grown since it was checked
    assert not cds.usable(archive)
    place(archive, b"\x00\x00\x00\x00" + bytes(100))  # not a dynamic archive
    assert not cds.usable(archive)
    place(archive, MAGIC + bytes(100), key="another")
    assert not cds.usable(archive)
    place(archive, MAGIC + bytes(100))
    archive.record.unlink()  # the archive without its record: a rename was cut short
    assert not cds.usable(archive)
    archive.record.write_text("{not json")
    assert not cds.usable(archive)


def test_java_options_name_a_usable_archive_unless_turned_off(tmp_path: Path) -> None:
    java_home, spark_home = fake_homes(tmp_path)
    archive = cds.locate(tmp_path / "cds", java_home, spark_home)
    assert archive is not None
    assert cds.java_options(archive, environ={}) is None  # not made yet
    place(archive, MAGIC + bytes(8))
    options = cds.java_options(archive, environ={})
    assert options is not None
    assert f"-XX:SharedArchiveFile={archive.path}" in options.split()
    assert "-Xshare:auto" in options.split()
    for off in ("off", "0", "false", "NO"):
        assert cds.java_options(archive, environ={cds.ENV_SWITCH: off}) is None
    assert cds.java_options(archive, environ={cds.ENV_SWITCH: "on"}) == options
    spaced = cds.locate(tmp_path / "with space", java_home, spark_home)
    assert spaced is not None
    place(spaced, MAGIC + bytes(8))
    assert cds.usable(spaced)
    assert cds.java_options(spaced, environ={}) is None  # Spark would split the path


def test_with_archive_keeps_the_callers_java_options() -> None:
    opts = "-XX:SharedArchiveFile=/a.jsa -Xshare:auto"
    assert cds.with_archive({"a": "b"}, None) == {"a": "b"}
    assert cds.with_archive({}, opts) == {"spark.driver.extraJavaOptions": opts}
    merged = cds.with_archive({"spark.driver.extraJavaOptions": "-Dx=1"}, opts)
    assert merged == {"spark.driver.extraJavaOptions": f"-Dx=1 {opts}"}
    for theirs in ("-XX:SharedArchiveFile=/mine.jsa", "-Xshare:off",
                   "-XX:ArchiveClassesAtExit=/out.jsa"):
        given = {"spark.driver.extraJavaOptions": theirs}
        assert cds.with_archive(given, opts) == given


def test_default_dir_follows_the_environment(tmp_path: Path) -> None:
    assert cds.default_dir({cds.ENV_DIR: str(tmp_path)}) == tmp_path
    assert cds.default_dir({}).name == "spark-cds"


# --- the builder, with a small real archive from this machine's JDK ------------

def real_java_home() -> Path:
    from client.spark import prepare_environment

    prepare_environment()
    home = cds.find_java_home()
    if home is None or not (home / "bin" / "java").exists():
        pytest.skip("no JDK on this machine (Spark's tests need Java 17)")
    return home


def small_archive(tmp: Path) -> list[str]:
    """A stand-in training process: a JVM that only prints its version and
    writes the classes it loaded (about 100 KiB) when it exits."""
    java = real_java_home() / "bin" / "java"
    return [str(java), f"-XX:ArchiveClassesAtExit={tmp}", "-Xlog:cds=off",
            "-Xlog:cds+dynamic=off", "-version"]


def cut_archive(tmp: Path) -> list[str]:
    """Writes an archive, then cuts its last page off: what a JVM killed while
    writing could leave."""
    made = " ".join(small_archive(tmp))
    return ["sh", "-c", f"{made} 2>/dev/null && truncate -s -4096 {tmp}"]


def builder(tmp_path: Path) -> cds.Archive:
    java_home = real_java_home()
    _, spark_home = fake_homes(tmp_path)
    archive = cds.locate(tmp_path / "cds", java_home, spark_home)
    assert archive is not None
    return archive


def test_build_puts_a_checked_archive_in_place_once(tmp_path: Path) -> None:
    archive = builder(tmp_path)
    runs: list[Path] = []
    lines: list[str] = []

    def command(tmp: Path) -> list[str]:
        runs.append(tmp)
        assert tmp.parent == archive.path.parent and tmp.name.startswith(".spark-")
        return small_archive(tmp)

    assert cds.build(archive, command=command, log=lines.append)
    assert cds.usable(archive)
    assert len(runs) == 1 and not runs[0].exists()  # renamed into place
    record = json.loads(archive.record.read_text())
    assert record["size"] == archive.path.stat().st_size
    # the JVM maps it (-Xshare:on fails where it cannot)
    java = archive.java_home / "bin" / "java"
    done = subprocess.run([str(java), f"-XX:SharedArchiveFile={archive.path}", "-Xshare:on",
                           "-version"], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # in place: not made again, unless forced
    assert cds.build(archive, command=command, log=lines.append)
    assert len(runs) == 1
    assert cds.build(archive, command=command, log=lines.append, force=True)
    assert len(runs) == 2 and cds.usable(archive)
    assert any("made in" in line for line in lines)


def test_build_refuses_a_cut_archive_and_leaves_nothing(tmp_path: Path) -> None:
    archive = builder(tmp_path)
    java = archive.java_home / "bin" / "java"
    lines: list[str] = []
    assert not cds.build(archive, command=cut_archive, log=lines.append)
    assert not archive.path.exists() and not archive.record.exists()
    assert not list(archive.path.parent.glob(".spark-*"))
    assert any("would not start" in line for line in lines)
    # what the check guards against: a JVM given the cut archive aborts
    tmp = tmp_path / "cut.jsa"
    subprocess.run(cut_archive(tmp), check=True, timeout=60)
    done = subprocess.run([str(java), f"-XX:SharedArchiveFile={tmp}", "-Xshare:auto",
                           "-version"], capture_output=True, timeout=60, check=False,
                          cwd=tmp_path)
    assert done.returncode != 0
    assert not cds.java_starts_with(archive.java_home, tmp)


def test_build_reports_a_failed_training_and_keeps_the_old_archive(tmp_path: Path) -> None:
    archive = builder(tmp_path)
    assert cds.build(archive, command=small_archive, log=lambda _: None)
    before = archive.path.read_bytes()
    lines: list[str] = []
    assert not cds.build(archive, command=lambda tmp: ["sh", "-c", "echo boom >&2; exit 3"],
                         log=lines.append, force=True)
    assert any("exit 3" in line and "boom" in line for line in lines)
    assert cds.usable(archive) and archive.path.read_bytes() == before
    assert not cds.build(archive, command=lambda tmp: ["sleep", "30"], log=lines.append,
                         force=True, timeout=0.5)
    assert any("took over" in line for line in lines)
    assert cds.usable(archive)


def test_build_removes_a_dead_builders_file_and_older_archives(tmp_path: Path) -> None:
    archive = builder(tmp_path)
    directory = archive.path.parent
    directory.mkdir(parents=True)
    leftover = directory / ".spark-abc.123.tmp"
    leftover.write_bytes(b"half")
    old = directory / "spark-0000.jsa"
    old.write_bytes(MAGIC)
    old.with_suffix(".json").write_text(json.dumps(
        {"key": "0000", "size": 4, "spark_home": str(archive.spark_home)}))
    elsewhere = directory / "spark-1111.jsa"  # another Spark installation's: kept
    elsewhere.write_bytes(MAGIC)
    elsewhere.with_suffix(".json").write_text(json.dumps(
        {"key": "1111", "size": 4, "spark_home": "/some/other/pyspark"}))
    assert cds.build(archive, command=small_archive, log=lambda _: None)
    assert not leftover.exists()
    assert not old.exists() and not old.with_suffix(".json").exists()
    assert elsewhere.exists() and elsewhere.with_suffix(".json").exists()


def test_main_path_and_usage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(cds.ENV_DIR, str(tmp_path / "empty"))
    assert cds.main([]) == 2
    assert cds.main(["bogus"]) == 2
    assert cds.main(["path"]) == 1
    assert "no usable archive" in capsys.readouterr().err
    monkeypatch.setenv(cds.ENV_SWITCH, "off")
    assert cds.main(["build"]) == 0
    assert "off" in capsys.readouterr().out
    assert not (tmp_path / "empty").exists()


def test_environment_switch_is_read_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cds.ENV_SWITCH, "off")
    assert not cds.enabled()
    monkeypatch.delenv(cds.ENV_SWITCH)
    assert cds.enabled()
    assert cds.enabled({}) and not cds.enabled({cds.ENV_SWITCH: " Off "})



def fake_session(pid: int) -> SimpleNamespace:
    """What mapped_archive reads of a session: its JVM's pid."""
    current = SimpleNamespace(current=lambda: SimpleNamespace(pid=lambda: pid))
    return SimpleNamespace(_jvm=SimpleNamespace(
        java=SimpleNamespace(lang=SimpleNamespace(ProcessHandle=current))))


MAPS_FILES = """
import mmap, sys
maps = []
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
print("mapped", flush=True)
sys.stdin.read()
"""


def test_mapped_archive_names_a_top_archive_not_the_jdks(tmp_path: Path) -> None:
    jdk = [tmp_path / "classes.jsa", tmp_path / "classes_nocoops.jsa"]
    top = tmp_path / "spark-abc.jsa"
    for path in (*jdk, top):
        path.write_bytes(MAGIC + bytes(4092))

    def mapped_by(*paths: Path) -> str | None:
        proc = subprocess.Popen([sys.executable, "-c", MAPS_FILES, *map(str, paths)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "mapped"
            return cds.mapped_archive(fake_session(proc.pid))
        finally:
            proc.communicate(timeout=30)

    assert mapped_by(*jdk) is None  # only the JDK's own archives
    assert mapped_by(*jdk, top) == str(top)
    assert cds.mapped_archive(object()) is None  # no JVM handle
