"""``make run``: one name server and one broker in the foreground on loopback.

Ctrl-C shuts the broker down cleanly (unregister, flush, close the store),
then the name server.
"""

from __future__ import annotations

from typing import Any

import click
import trio

from broker.config import BrokerConfig
from broker.controller import BrokerController
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from protocol.logs import configure_logging
from protocol.trio.daemon import run_until_signal


class LocalPair:
    def __init__(self, namesrv_port: int, broker_port: int, store: str) -> None:
        self.namesrv = NamesrvController(NamesrvConfig(listen_port=namesrv_port))
        self.broker = BrokerController(
            BrokerConfig(
                listen_port=broker_port,
                store_path_root_dir=store,
                namesrv_addr=f"127.0.0.1:{namesrv_port}",
            )
        )

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
def main(store: str, namesrv_port: int, broker_port: int) -> None:
    configure_logging("INFO")
    trio.run(run_until_signal, LocalPair(namesrv_port, broker_port, store))


if __name__ == "__main__":
    main()
