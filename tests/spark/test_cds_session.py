"""The test session's JVM (started by ``spark_session``) maps the class-sharing
archive that ``make test`` builds, and reads with it (every Spark test runs on
that JVM)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from client.spark import cds

SUBMIT = Path(__file__).resolve().parents[2] / "deploy" / "spark" / "submit.sh"


def test_the_session_jvm_maps_the_archive_in_place(spark: Any) -> None:
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    maps = Path(f"/proc/{pid}/maps").read_text()
    args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                .getInputArguments())
    archive = cds.locate()
    options = cds.java_options(archive)
    if options is None:  # turned off or not built (pytest run without make test)
        assert not any(a.startswith("-XX:SharedArchiveFile=") for a in args)
        return
    assert archive is not None
    assert f"-XX:SharedArchiveFile={archive.path}" in args
    assert str(archive.path) in maps  # mapped, not silently passed over
    assert cds.mapped_archive(spark) == str(archive.path)


def test_mapped_archive_is_none_without_a_jvm() -> None:
    assert cds.mapped_archive(object()) is None


def launch_command(*args: str) -> str:
    """The JVM command deploy/spark/submit.sh has spark-submit start."""
    env = dict(os.environ, SPARK_PRINT_LAUNCH_COMMAND="1",
               VENV=str(Path(sys.executable).parent.parent))
    done = subprocess.run([str(SUBMIT), *args, "--version"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [ln for ln in (done.stdout + done.stderr).splitlines()
             if ln.startswith("Spark Command:")]
    assert lines, done.stderr[-2000:]
    return lines[-1]


def test_submit_script_passes_the_archive_unless_driver_options_are_given() -> None:
    options = cds.java_options()
    command = launch_command()
    if options is None:
        assert "-XX:SharedArchiveFile=" not in command
    else:
        assert all(part in command.split() for part in options.split())
    mine = launch_command("--driver-java-options", "-Dmine=1")
    assert "-Dmine=1" in mine.split() and "-XX:SharedArchiveFile=" not in mine
