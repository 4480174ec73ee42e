"""What one ``/metrics`` scrape costs the broker's event loop with many consumer offsets.

    .venv/bin/python -m bench.scrape [--offsets N] [--queues Q] [--runs R]

A broker controller (no server, temporary store) with one topic of Q read
queues and N committed offsets of fresh groups on it (what N
UPDATE_CONSUMER_OFFSET requests with fresh groups leave), as an attacker
without a credential makes them; then R scrapes, each timed in its parts:

    loop      what a scrape holds the event loop for: ``frozen_registry``
              (the copies, broker/metrics.py); on a tree without it, the whole
              ``generate_latest(broker_registry(...))``, which ran on the loop
    thread    ``generate_latest`` of the copies, in the scrape's worker thread
    whole     ``generate_latest(broker_registry(...))``: copy and render at once

Prints each figure's median over the runs (ms) and the text's size: figures to
read, asserted nowhere.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import click
from prometheus_client.exposition import generate_latest

import broker.metrics as metrics
from broker.config import BrokerConfig
from broker.controller import BrokerController
from protocol.route import TopicConfig


@click.command()
@click.option("--offsets", default=200_000, show_default=True,
              help="Committed offsets, one fresh group each.")
@click.option("--queues", default=4, show_default=True, help="Read queues of the topic.")
@click.option("--runs", default=5, show_default=True, help="Renders timed.")
def main(offsets: int, queues: int, runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as tmp:
        config = BrokerConfig(store_path_root_dir=str(Path(tmp) / "store"),
                              maped_file_size_commit_log=1 << 20,
                              maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64,
                              max_index_num=256)
        c = BrokerController(config)
        c._load()
        try:
            c.topic_config_manager.put(TopicConfig("ScrapeTopic", queues, queues))
            for i in range(offsets):
                c.consumer_offset_manager.commit_offset(f"fresh-{i:07d}", "ScrapeTopic", 0, 0)
            registry = metrics.broker_registry(c)
            frozen_registry = getattr(metrics, "frozen_registry", None)
            loop, thread, whole = [], [], []
            size = 0
            for _ in range(runs):
                start = time.perf_counter()
                size = len(generate_latest(registry))
                whole.append(time.perf_counter() - start)
                if frozen_registry is None:  # before: the whole render on the loop
                    loop.append(whole[-1])
                    continue
                start = time.perf_counter()
                frozen = frozen_registry(metrics.BrokerCollector(c))
                loop.append(time.perf_counter() - start)
                start = time.perf_counter()
                generate_latest(frozen)
                thread.append(time.perf_counter() - start)

            def ms(times: list[float]) -> str:
                return f"{statistics.median(times) * 1000:.1f}" if times else "-"

            click.echo(f"offsets={offsets} queues={queues} runs={runs}: median ms: "
                       f"loop {ms(loop)}, thread {ms(thread)}, whole {ms(whole)}; "
                       f"{size} bytes of text")
        finally:
            c._persist_and_close()


if __name__ == "__main__":
    main()
