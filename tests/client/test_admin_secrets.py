"""mqadmin and MQAdmin never show a broker's secret, even when the broker answers
one (an older broker did), and never send a secret key to change."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from client.admin import MQAdmin, MQAdminError
from client.admin_cli import cli
from protocol.config import SECRET_MASK
from tests.client.fakes import FakeCluster, ThreadedCluster
from tests.client.test_admin_ops import install_ops

SECRET = "s3cr3t-admin-key"


def leaky(state: dict[str, Any], addr: str) -> None:
    """The fake broker at ``addr`` answers its secret in the clear."""
    state["config"][addr].update({"brokerAccessKey": "brokeradmin", "brokerSecretKey": SECRET})


async def test_get_broker_config_masks_what_the_broker_shows(cluster: FakeCluster) -> None:
    state = install_ops(cluster)
    a = cluster.brokers[0]
    leaky(state, a.addr)
    async with MQAdmin(cluster.namesrv_addr) as admin:
        config = await admin.get_broker_config(a.addr)
        assert config["brokerSecretKey"] == SECRET_MASK
        assert config["brokerAccessKey"] == "brokeradmin"
        with pytest.raises(MQAdminError, match="brokerSecretKey holds a secret"):
            await admin.update_broker_config(a.addr, {"brokerSecretKey": "stolen1"})
    assert state["config"][a.addr]["brokerSecretKey"] == SECRET  # never sent


def test_mqadmin_get_broker_config_masks() -> None:
    with ThreadedCluster() as tc:
        state = tc.call(install_ops, tc.cluster)
        a = tc.cluster.brokers[0]
        tc.call(leaky, state, a.addr)
        ns = tc.cluster.namesrv_addr
        for args in (["-b", a.addr], ["-b", a.addr, "--json"], ["-c", "DefaultCluster"]):
            result = CliRunner().invoke(cli, ["getBrokerConfig", "-n", ns, *args])
            assert result.exit_code == 0, result.output
            assert SECRET not in result.output and SECRET_MASK in result.output, args
        bad = CliRunner().invoke(cli, ["updateBrokerConfig", "-n", ns, "-b", a.addr,
                                       "-k", "brokerSecretKey", "-v", "stolen1"])
        assert bad.exit_code != 0 and "holds a secret" in bad.output
        assert tc.call(lambda: state["config"][a.addr]["brokerSecretKey"]) == SECRET
