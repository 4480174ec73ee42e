"""The test session's JVM (started by ``spark_session``) maps the class-sharing
archive that ``make test`` builds, and reads with it (every Spark test runs on
that JVM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from client.spark import cds


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
