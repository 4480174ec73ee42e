"""What one ``/metrics`` scrape costs the broker's event loop with many consumer offsets.

    .venv/bin/python -m deploy.bench_scrape [--offsets N] [--queues Q] [--runs R]

A broker controller (no server, temporary store) with one topic of Q read
queues and N committed offsets of fresh groups on it (what N
UPDATE_CONSUMER_OFFSET requests with fresh groups leave), as an attacker
without a credential makes them; then R renders of the metrics
(``generate_latest(broker_registry(...))``, what a scrape runs on the loop).
Prints the time of each render, their median and the size of the text: a
figure to read, asserted nowhere.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import click
from prometheus_client.exposition import generate_latest

from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.metrics import broker_registry
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
            registry = broker_registry(c)
            times = []
            size = 0
            for _ in range(runs):
                start = time.perf_counter()
                size = len(generate_latest(registry))
                times.append(time.perf_counter() - start)
            click.echo(f"offsets={offsets} queues={queues} renders="
                       + " ".join(f"{t * 1000:.1f}" for t in times)
                       + f" ms; median {statistics.median(times) * 1000:.1f} ms; "
                       f"{size} bytes of text")
        finally:
            c._persist_and_close()


if __name__ == "__main__":
    main()
