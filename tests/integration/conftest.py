from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster
from tests.integration.log_scan import LogWatch, report

TRACEBACK_OK = "daemon_traceback_ok"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{TRACEBACK_OK}(reason): this test's daemons may log a traceback (the reason says why "
        "it is not a bug); without it a logged traceback fails the test",
    )


def _traceback_allowed(node: pytest.Item | pytest.Collector) -> bool:
    marker = node.get_closest_marker(TRACEBACK_OK)
    if marker is None:
        return False
    reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
    if not isinstance(reason, str) or not reason.strip():
        pytest.fail(f"@pytest.mark.{TRACEBACK_OK} needs a reason", pytrace=False)
    return True


def _log_names(c: Cluster) -> dict[Path, str]:
    return {d.log_path: d.name for d in c.daemons}


def check_no_tracebacks(node: pytest.Item | pytest.Collector, c: Cluster, watch: LogWatch) -> None:
    """Fail (naming the daemon, showing the traceback) if a daemon log holds a
    traceback written since ``watch`` last read it."""
    names = _log_names(c)
    found = watch.new_tracebacks(names)
    if found and not _traceback_allowed(node):
        pytest.fail(report(found, names), pytrace=False)


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """Daemons for one test; at teardown (after an orderly stop) no daemon log
    may hold a traceback."""
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()
    check_no_tracebacks(request.node, c, LogWatch())


@pytest.fixture(scope="module")
def module_log_watch() -> LogWatch:
    """How far the module cluster's logs have been checked."""
    return LogWatch()


@pytest.fixture(scope="module")
def module_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                   module_log_watch: LogWatch) -> Iterator[Cluster]:
    """Daemons shared by a module's tests. Each test is charged with what the
    daemons logged since the previous test's check (``_module_cluster_tracebacks``);
    what they log at the module's end (their orderly stop) is checked here."""
    c = Cluster(tmp_path_factory.mktemp("module-cluster"))
    try:
        yield c
    finally:
        c.close()
    check_no_tracebacks(request.node, c, module_log_watch)


@pytest.fixture(autouse=True)
def _module_cluster_tracebacks(request: pytest.FixtureRequest) -> Iterator[None]:
    """For a test on ``module_cluster``: no traceback logged since the last check."""
    if "module_cluster" not in request.fixturenames:
        yield
        return
    c: Cluster = request.getfixturevalue("module_cluster")
    watch: LogWatch = request.getfixturevalue("module_log_watch")
    yield
    check_no_tracebacks(request.node, c, watch)
