"""The web extra (protocol/extras.py): what is missing without it, and the daemons' and
mqdashboard's one-line refusal to serve HTTP then. "Missing" is simulated by ``None`` in
``sys.modules`` (an import of the name then raises ImportError), in this process only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from broker import cli as broker_cli
from dashboard import cli as dashboard_cli
from namesrv import cli as namesrv_cli
from protocol.extras import (
    DASHBOARD_MODULES,
    METRICS_HTTP_MODULES,
    MissingExtraError,
    missing_modules,
    require,
    require_etcd,
    require_grpc,
    require_metrics_http,
)
from protocol.trio.metrics_http import MetricsServer


def without(monkeypatch: pytest.MonkeyPatch, *tops: str) -> None:
    """Make ``tops`` and every submodule of theirs unimportable for this test."""
    for name in [n for n in sys.modules if n.split(".", 1)[0] in tops]:
        monkeypatch.setitem(sys.modules, name, None)
    for top in tops:
        monkeypatch.setitem(sys.modules, top, None)


def test_everything_the_extra_holds_is_installed_here() -> None:
    # make test installs the web extra: its modules import
    assert missing_modules(DASHBOARD_MODULES) == []
    require_metrics_http()
    require("mqdashboard", "web", DASHBOARD_MODULES)
    require_etcd()  # and the controller extra (h11)


def test_etcd_backend_without_the_controller_extra_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "h11")
    with pytest.raises(MissingExtraError) as info:
        require_etcd()
    assert info.value.missing == ("h11",) and info.value.extra == "controller"
    assert "controllerType=etcd" in str(info.value)
    assert "pip install 'trio-rocketmq[controller]'" in str(info.value)


def test_missing_modules_named_once_each_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "hypercorn", "jinja2")
    assert missing_modules(DASHBOARD_MODULES) == ["hypercorn", "jinja2"]
    assert missing_modules(("starlette",)) == []


def test_the_error_says_what_is_missing_and_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "hypercorn")
    with pytest.raises(MissingExtraError) as info:
        require_metrics_http()
    assert info.value.missing == ("hypercorn",) and info.value.extra == "web"
    text = str(info.value)
    assert text.startswith("Prometheus metrics over HTTP (metricsPort) needs hypercorn, "
                           "from the 'web' extra")
    assert "pip install 'trio-rocketmq[web]'" in text


def test_metrics_server_refuses_to_be_made_without_hypercorn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    MetricsServer(CollectorRegistry(), "127.0.0.1", 0)  # with it: made
    without(monkeypatch, *{m.split(".")[0] for m in METRICS_HTTP_MODULES})
    with pytest.raises(MissingExtraError, match="needs hypercorn"):
        MetricsServer(CollectorRegistry(), "127.0.0.1", 0)


@pytest.mark.parametrize("main", [broker_cli.main, namesrv_cli.main],
                         ids=["mqbroker", "mqnamesrv"])
def test_daemon_with_metrics_port_and_no_extra_stops_in_one_line(
        main: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "hypercorn")
    logs = tmp_path / "logs"
    args = ["--metrics-port", "19999", "--log-dir", str(logs)]
    result = CliRunner().invoke(main, args)  # type: ignore[arg-type]
    assert result.exit_code == 1, result.output
    # one line
    assert result.output.startswith(
        "Error: Prometheus metrics over HTTP (metricsPort) needs hypercorn, from the 'web' "
        "extra")
    assert result.output.count("\n") == 1
    assert not logs.exists()  # stopped before it started anything, logging included
    # printing the config starts nothing: no extra needed
    printed = CliRunner().invoke(main, [*args, "-p"])  # type: ignore[arg-type]
    assert printed.exit_code == 0 and "metricsPort=19999" in printed.output


def test_dashboard_without_the_extra_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "starlette", "jinja2")
    served = CliRunner().invoke(dashboard_cli.main, ["-n", "127.0.0.1:9876", "--no-login"])
    assert served.exit_code == 1
    assert served.output.startswith("Error: mqdashboard needs starlette, jinja2, from the 'web' "
                                    "extra")
    assert served.output.count("\n") == 1
    # adding a user needs no web server
    users = tmp_path / "users"
    added = CliRunner().invoke(dashboard_cli.main, [
        "--add-user", "ops", "--users-file", str(users), "--password-stdin"],
        input="a long enough password\n")
    assert added.exit_code == 0, added.output
    assert users.read_text().startswith("ops:")


def test_grpc_endpoint_without_its_extras_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    require_grpc()  # make test installs the grpc and web extras
    with monkeypatch.context() as m:
        without(m, "google")
        with pytest.raises(MissingExtraError) as info:
            require_grpc()
        assert info.value.extra == "grpc" and info.value.missing == ("protobuf",)
        assert "enableGrpc" in str(info.value)
        assert "pip install 'trio-rocketmq[grpc]'" in str(info.value)
    without(monkeypatch, "h2")
    with pytest.raises(MissingExtraError) as info:
        require_grpc()
    assert info.value.extra == "grpc" and info.value.missing == ("h2",)
