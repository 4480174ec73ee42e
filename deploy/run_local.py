"""``make run``: one name server and one broker in the foreground on loopback.

Ctrl-C shuts the broker down cleanly (unregister, flush, close the store),
then the name server.

Prometheus metrics are on (``/metrics``): the name server's on 9877, the
broker's on 10913 (its HA port is 10912); ``--namesrv-metrics-port 0`` /
``--broker-metrics-port 0`` turn them off.
"""

from __future__ import annotations

from typing import Any

import click
import trio

from broker.config_load import load_broker_config
from broker.controller import BrokerController
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from protocol.trio.daemon import require_extras, run_until_signal
from protocol.trio.logs import configure_logging


class LocalPair:
    def __init__(self, namesrv_port: int, broker_port: int, store: str,
                 namesrv_metrics_port: int = 0, broker_metrics_port: int = 0) -> None:
        self.namesrv = NamesrvController(NamesrvConfig(listen_port=namesrv_port,
                                                       metrics_port=namesrv_metrics_port))
        # loaded as mqbroker loads it: what UPDATE_BROKER_CONFIG kept in the store applies
        self.broker = BrokerController(load_broker_config(options={
            "listenPort": str(broker_port),
            "storePathRootDir": store,
            "namesrvAddr": f"127.0.0.1:{namesrv_port}",
            "metricsPort": str(broker_metrics_port),
            # RocketMQ 5's clients (gRPC) on grpcListenPort 8081 (docs/grpc.md)
            "enableGrpc": "true",
        }))

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.namesrv.run)
            await self.broker.run()
            self.namesrv.request_shutdown()

    def request_shutdown(self) -> None:
        self.broker.request_shutdown()


@click.command()
@click.option("--store", default="./.data", show_default=True, help="storePathRootDir")
@click.option("--namesrv-port", default=9876, show_default=True)
@click.option("--broker-port", default=10911, show_default=True)
@click.option("--namesrv-metrics-port", default=9877, show_default=True,
              help="The name server's /metrics (0: off).")
@click.option("--broker-metrics-port", default=10913, show_default=True,
              help="The broker's /metrics (0: off).")
def main(store: str, namesrv_port: int, broker_port: int, namesrv_metrics_port: int,
         broker_metrics_port: int) -> None:
    require_extras(max(namesrv_metrics_port, broker_metrics_port))
    configure_logging("INFO")
    for name, port in (("name server", namesrv_metrics_port), ("broker", broker_metrics_port)):
        click.echo(f"{name} metrics: " + (f"http://127.0.0.1:{port}/metrics" if port else "off"))
    trio.run(run_until_signal, LocalPair(namesrv_port, broker_port, store,
                                         namesrv_metrics_port, broker_metrics_port))


if __name__ == "__main__":
    main()
