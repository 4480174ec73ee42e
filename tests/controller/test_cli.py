"""mqcontroller's command line (in process: only what returns before serving)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from controller.cli import main


def test_print_config(tmp_path: Path) -> None:
    conf = tmp_path / "controller.properties"
    conf.write_text("brokerHeartbeatTimeout=1500\nenableElectUncleanMaster=true\n")
    result = CliRunner().invoke(main, ["-c", str(conf), "-p", "--listen-port", "19878",
                                       "--store-path", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = set(result.output.splitlines())
    assert {"brokerHeartbeatTimeout=1500", "enableElectUncleanMaster=true",
            "listenPort=19878", f"controllerStorePath={tmp_path}",
            "controllerType=file", "notifyBrokerRoleChanged=true"} <= lines


def test_bad_settings_are_refused_in_one_line(tmp_path: Path) -> None:
    for text, words in (("controllerType=raft\n", "controllerType must be one of"),
                        ("controllerType=etcd\netcdLeaseTtlSeconds=0\n", "etcdLeaseTtlSeconds"),
                        ("brokerHeartbeatTimeout=0\n", "must be positive"),
                        ("nope=1\n", "unknown config key")):
        conf = tmp_path / "c.properties"
        conf.write_text(text)
        result = CliRunner().invoke(main, ["-c", str(conf)])
        assert result.exit_code == 2 and words in result.output, result.output


def test_unreachable_etcd_stops_the_start_in_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "c.properties"
    conf.write_text("controllerType=etcd\netcdEndpoints=http://127.0.0.1:1\n"
                    "etcdRequestTimeoutMs=500\nlistenPort=0\n")
    result = CliRunner().invoke(main, ["-c", str(conf), "--log-dir", str(tmp_path / "logs"),
                                       "--no-log-console"])
    assert result.exit_code == 1
    log = (tmp_path / "logs" / "controller.log").read_text()
    assert "controller cannot start" in log and "Traceback" not in log


def test_the_overlay_applies_without_a_config_file(tmp_path: Path) -> None:
    (tmp_path / "controller.conf.runtime").write_text("brokerHeartbeatTimeout=2500\n")
    result = CliRunner().invoke(main, ["-p", "--store-path", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "brokerHeartbeatTimeout=2500" in result.output.splitlines()
    conf = tmp_path / "c.properties"  # with -c the file is where changes go: no overlay
    conf.write_text("listenPort=19878\n")
    result = CliRunner().invoke(main, ["-c", str(conf), "-p", "--store-path", str(tmp_path)])
    assert "brokerHeartbeatTimeout=10000" in result.output.splitlines(), result.output
    (tmp_path / "controller.conf.runtime").write_text("listenPort=1\n")
    result = CliRunner().invoke(main, ["-p", "--store-path", str(tmp_path)])
    assert result.exit_code == 2 and "cannot change at run time" in result.output


def test_tls_and_acl_keys_are_checked(tmp_path: Path) -> None:
    for text, words in (("tlsMode=enforcing\n", "tls.server.certPath"),
                        ("tlsMode=sometimes\n", "tlsMode"),
                        ("controllerAccessKey=ctrl0001\n", "go together"),
                        ("aclPreAuthReadBudgetBytes=0\n", "aclPreAuthReadBudgetBytes")):
        conf = tmp_path / "c.properties"
        conf.write_text(text)
        result = CliRunner().invoke(main, ["-c", str(conf), "-p"])
        assert result.exit_code == 2 and words in result.output, result.output
