"""What access control costs in CPU per request, the client's and the broker's apart.

    .venv/bin/python -m bench.acl_cost [--single N] [--batched N] [--repeat R]
                                        [--baseline PATH] [--json PATH]

Wall-clock latency on a shared machine moves with whatever else runs; the CPU time a
process spends per request moves much less. So this starts bench.security's "off" and
"acl" pairs (ASYNC_FLUSH, free 127.0.0.1 ports, temporary stores; ``acl``: one
PUB|SUB account, every request signed and bound) and, REPEAT times, for each pair in
turn, runs a producer in a child process that measures:

    single   N sends of 1 KiB, one at a time (as ``mqbench producer -b 1 -w 1``)
    batched  N messages of 1 KiB in batches of 32, 16 batches in flight (as
             ``mqbench producer -b 32 -w 16``), per batch request

    client   the child's CPU time (user + system) over those sends, per request
    broker   the broker process's CPU time over the same sends (/proc), per request

Each figure is the median of the repeats (the smallest is in the JSON). The ACL rows
are "acl" less "off". ``--baseline PATH`` also starts the pairs and runs the client
from another checkout (e.g. a worktree of main) and interleaves its runs with this
one's, so a change is compared under the same load. The load average before and
after is printed: read the figures against it.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import structlog

from bench.all import Pair, checkout_env, parse_json_lines
from bench.security import ACCESS_KEY, SECRET_KEY, SETUPS, secured_pair
from protocol.trio.logs import configure_logging

log = structlog.get_logger("acl_cost")

SIZE = 1024
BATCH = 32
IN_FLIGHT = 16
WARM_SENDS = 300
CHILD_TIMEOUT = 900.0
FIGURES = ("single_client", "single_broker", "batched_client", "batched_broker")
Samples = dict[str, dict[str, dict[str, list[float]]]]  # checkout -> setup -> figure -> runs

# The producer run in a child process (python -c), so that it can come from another
# checkout: the SDK's public API and /proc only. argv: namesrv, broker pid, access key ("" for
# none), secret key, single sends, batched messages, message size, batch, in flight,
# warm-up sends. Prints one JSON line of CPU µs per request.
_CLIENT = r"""
import json, logging, os, sys, time
import structlog
import trio
from client import Message, Producer
from client.credentials import AclCredentials

(namesrv, pid, access_key, secret_key, single, batched, size, batch, in_flight,
 warm) = sys.argv[1:11]
pid, single, batched, size, batch, in_flight, warm = (
    int(pid), int(single), int(batched), int(size), int(batch), int(in_flight), int(warm))
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


body = b"x" * size


async def main():
    cred = AclCredentials(access_key, secret_key) if access_key else None
    p = Producer("ACL_COST", namesrv_addr=namesrv, credentials=cred)
    await p.start()
    out = {}
    try:
        for _ in range(warm):
            await p.send(Message("AclCostSingle", body))
        for _ in range(max(1, warm // batch)):
            await p.send_batch([Message("AclCostBatch", body) for _ in range(batch)])
        c0, b0 = time.process_time(), cpu_seconds(pid)
        for _ in range(single):
            await p.send(Message("AclCostSingle", body))
        c1, b1 = time.process_time(), cpu_seconds(pid)
        out["single_client"] = (c1 - c0) / single * 1e6
        out["single_broker"] = (b1 - b0) / single * 1e6
        requests = max(1, batched // batch)
        left = [requests]

        async def worker():
            while left[0] > 0:
                left[0] -= 1
                await p.send_batch([Message("AclCostBatch", body) for _ in range(batch)])

        c0, b0 = time.process_time(), cpu_seconds(pid)
        async with trio.open_nursery() as nursery:
            for _ in range(in_flight):
                nursery.start_soon(worker)
        c1, b1 = time.process_time(), cpu_seconds(pid)
        out["batched_client"] = (c1 - c0) / requests * 1e6
        out["batched_broker"] = (b1 - b0) / requests * 1e6
    finally:
        await p.shutdown()
    print(json.dumps(out), flush=True)


trio.run(main)
"""


# the checkout this module belongs to
HERE = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Checkout:
    name: str
    path: Path  # its modules run the daemons and the producer


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def measure(pair: Pair, acl: bool, checkout: Checkout, single: int, batched: int
            ) -> dict[str, float]:
    """One child's run against ``pair``: CPU µs per request (FIGURES)."""
    argv = [sys.executable, "-c", _CLIENT, pair.namesrv, str(pair.broker_pid),
            ACCESS_KEY if acl else "", SECRET_KEY if acl else "", str(single), str(batched),
            str(SIZE), str(BATCH), str(IN_FLIGHT), str(WARM_SENDS)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT,
                          **checkout_env(checkout.path))
    results = parse_json_lines(proc.stdout)
    if proc.returncode != 0 or not results:
        raise click.ClickException(f"the producer ({checkout.name}, acl={acl}) failed, exit "
                                   f"{proc.returncode}: {proc.stderr[-1500:]}\n"
                                   f"{pair.log_tail()}")
    return {k: float(results[-1][k]) for k in FIGURES}


def run(checkouts: Sequence[Checkout], single: int, batched: int, repeat: int,
        tmp_dir: str | None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="acl-cost-", dir=tmp_dir))
    setups = [s for s in SETUPS if not s.tls]  # off, acl
    pairs: dict[tuple[str, str], Pair] = {}
    samples: Samples = {
        c.name: {s.name: {k: [] for k in FIGURES} for s in setups} for c in checkouts}
    out: dict[str, Any] = {"load_before": load_average(), "single": single,
                           "batched": batched, "repeat": repeat,
                           "checkouts": {c.name: str(c.path) for c in checkouts}}
    try:
        for c in checkouts:
            for s in setups:
                pair = secured_pair(root / f"{c.name}-{s.name}", s, None)
                pair.checkout = c.path
                pair.start()
                pairs[(c.name, s.name)] = pair
        order = [(c, s) for c in checkouts for s in setups]
        for rep in range(repeat):
            turn = order[rep % len(order):] + order[:rep % len(order)]  # rotate: no fixed slot
            for c, s in turn:
                got = measure(pairs[(c.name, s.name)], s.acl, c, single, batched)
                for k, v in got.items():
                    samples[c.name][s.name][k].append(v)
                log.info("measured", checkout=c.name, setup=s.name, repeat=rep,
                         **{k: round(v, 1) for k, v in got.items()})
    finally:
        for pair in pairs.values():
            pair.stop()
        shutil.rmtree(root, ignore_errors=True)
    out["load_after"] = load_average()
    return summarize(out, samples)



def summarize(out: dict[str, Any], samples: Samples) -> dict[str, Any]:
    """``out`` with the samples, their medians and their minima."""
    def each(fn: Any) -> dict[str, Any]:
        return {c: {s: {k: fn(v) for k, v in figs.items()} for s, figs in by_setup.items()}
                for c, by_setup in samples.items()}
    return {**out, "samples": samples, "median": each(statistics.median), "min": each(min)}


def render(result: dict[str, Any]) -> str:
    lines = ["| checkout | setup | single send: client | broker | batch of 32: client | broker |",
             "|---|---|---|---|---|---|"]
    for c, by_setup in result["median"].items():
        for s, figs in by_setup.items():
            lines.append(f"| {c} | {s} | " + " | ".join(f"{figs[k]:.0f}" for k in FIGURES) + " |")
        off, acl = by_setup.get("off"), by_setup.get("acl")
        if off and acl:
            lines.append(f"| {c} | ACL cost | "
                         + " | ".join(f"{acl[k] - off[k]:+.0f}" for k in FIGURES) + " |")
    return "\n".join([
        *lines, "",
        f"CPU µs per request, median of {result['repeat']} runs of {result['single']:,} single "
        f"sends and {result['batched']:,} batched messages each; load average "
        f"{result['load_before']} before, {result['load_after']} after."])


@click.command()
@click.option("--single", default=5000, show_default=True, help="Single sends per run.")
@click.option("--batched", default=64_000, show_default=True,
              help="Messages sent in batches of 32 per run.")
@click.option("--repeat", default=5, show_default=True, help="Runs per setup.")
@click.option("--baseline", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, help="Another checkout to measure in the same run (e.g. main).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write every sample to this file.")
@click.option("--tmp-dir", default=None, help="Where the temporary stores go.")
@click.option("--log-level", default="INFO", show_default=True)
def main(single: int, batched: int, repeat: int, baseline: Path | None,
         json_path: Path | None, tmp_dir: str | None, log_level: str) -> None:
    """CPU µs per request of the client and the broker, ACL off and on."""
    configure_logging(log_level)
    if single < 1 or batched < BATCH or repeat < 1:
        raise click.BadParameter(f"--single and --repeat at least 1, --batched at least {BATCH}")
    checkouts = [Checkout("this", HERE)]
    if baseline is not None:
        checkouts.insert(0, Checkout("baseline", baseline.resolve()))
    result = run(checkouts, single, batched, repeat, tmp_dir)
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    click.echo(render(result))


if __name__ == "__main__":
    main()
