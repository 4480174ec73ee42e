"""mqadmin/mqbench credentials (--access-key/--secret-key, ROCKETMQ_* env vars), the ACL
admin commands' options and MQAdmin's parsing of clusterAclConfigVersion, without
sockets (the live ones: tests/integration/test_acl_admin.py)."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from bench.mqbench import cli as bench_cli
from client.admin import AclConfigVersion, MQAdmin, MQAdminError
from client.admin_cli import check_credentials, cli, tool_credentials
from client.credentials import AclCredentials


@click.command()
def _probe() -> None:
    cred = tool_credentials()
    click.echo("none" if cred is None else f"{cred.access_key}/{cred.secret_key}")


@pytest.fixture(autouse=True)
def probe() -> Any:
    cli.add_command(_probe, "probeCredentials")
    bench_cli.add_command(_probe, "probeCredentials")
    yield
    cli.commands.pop("probeCredentials")
    bench_cli.commands.pop("probeCredentials")


@pytest.mark.parametrize("group", [cli, bench_cli])
def test_credentials_from_options_and_env(group: click.Group) -> None:
    runner = CliRunner()
    out = runner.invoke(group, ["probeCredentials"], env={"ROCKETMQ_ACCESS_KEY": None,
                                                          "ROCKETMQ_SECRET_KEY": None})
    assert out.exit_code == 0 and out.output.strip() == "none"
    out = runner.invoke(group, ["--access-key", "rocketmq2", "--secret-key", "12345678",
                                "probeCredentials"])
    assert out.exit_code == 0 and out.output.strip() == "rocketmq2/12345678"
    out = runner.invoke(group, ["probeCredentials"],
                        env={"ROCKETMQ_ACCESS_KEY": "envkey01", "ROCKETMQ_SECRET_KEY": "envsecret"})
    assert out.exit_code == 0 and out.output.strip() == "envkey01/envsecret"
    # an option beats the environment
    out = runner.invoke(group, ["--access-key", "optkey01", "probeCredentials"],
                        env={"ROCKETMQ_ACCESS_KEY": "envkey01", "ROCKETMQ_SECRET_KEY": "envsecret"})
    assert out.output.strip() == "optkey01/envsecret"
    out = runner.invoke(group, ["--access-key", "rocketmq2", "probeCredentials"],
                        env={"ROCKETMQ_SECRET_KEY": None})
    assert out.exit_code == 2 and "go together" in out.output


def test_check_credentials() -> None:
    assert check_credentials(None, None) is None
    assert check_credentials("ak", "sk") == AclCredentials("ak", "sk")
    with pytest.raises(click.UsageError):
        check_credentials("ak", "")


def test_acl_commands_exist_with_rocketmq_letters() -> None:
    runner = CliRunner()
    for name, letters in (("updateAclConfig", ["-a", "-b", "-c", "-s", "-w", "-i", "-u", "-t",
                                               "-g", "-m"]),
                          ("deleteAccessConfig", ["-a", "-b", "-c"]),
                          ("deleteAclConfig", ["-a", "-b", "-c"]),
                          ("updateGlobalWhiteAddr", ["-g", "-b", "-c"]),
                          ("clusterAclConfigVersion", ["-b", "-c"])):
        out = runner.invoke(cli, [name, "--help"])
        assert out.exit_code == 0, out.output
        for letter in letters:
            assert f"{letter}, --" in out.output, (name, letter)
    out = runner.invoke(cli, ["updateAclConfig", "-n", "127.0.0.1:1", "-a", "newuser1",
                              "-b", "127.0.0.1:2", "-m", "maybe"])
    assert out.exit_code == 2 and "true or false" in out.output


def test_acl_config_version_fields() -> None:
    v = AclConfigVersion.from_fields({
        "version": '{"counter":3,"stateVersion":0,"timestamp":1700000000000}',
        "brokerName": "broker-a", "clusterName": "DefaultCluster",
        "brokerAddr": "127.0.0.1:10911"}, "127.0.0.1:10911")
    assert (v.counter, v.timestamp, v.broker_name) == (3, 1700000000000, "broker-a")
    with pytest.raises(MQAdminError, match="unreadable"):
        AclConfigVersion.from_fields({"version": "[1"}, "x")


async def test_acl_targets_need_a_broker_or_cluster() -> None:
    async with MQAdmin("127.0.0.1:1") as admin:
        assert await admin.acl_targets("127.0.0.1:2", None) == ["127.0.0.1:2"]
        with pytest.raises(MQAdminError, match="-c"):
            await admin.acl_targets(None, None)


def test_spark_source_credentials_options() -> None:
    from client.spark.offsets import OptionError, parse_options

    opts = parse_options({"namesrv": "h:1", "topic": "T", "accessKey": "rocketmq2",
                          "secretKey": "12345678"}, streaming=False)
    assert (opts.access_key, opts.secret_key) == ("rocketmq2", "12345678")
    assert "12345678" not in repr(opts)
    plain = parse_options({"namesrv": "h:1", "topic": "T"}, streaming=True)
    assert plain.access_key is None and plain.secret_key is None
    with pytest.raises(OptionError, match="go together"):
        parse_options({"namesrv": "h:1", "topic": "T", "accesskey": "rocketmq2"},
                      streaming=False)
