"""deploy/spark/order_job.py run with spark-submit against real brokers."""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from deploy.spark import fill_orders
from tests.spark.conftest import Pair

ROOT = Path(__file__).resolve().parents[2]
SUBMIT = ROOT / "deploy" / "spark" / "submit.sh"
JOB = ROOT / "deploy" / "spark" / "order_job.py"


def expected(count: int, users: int, seed: int, first_id: int = 0) -> dict[str, tuple[float, int]]:
    totals: dict[str, list[float]] = defaultdict(list)
    for order in fill_orders.orders(count, users, seed, first_id):
        totals[order["user"]].append(order["amount"])
    return {u: (round(sum(a), 2), len(a)) for u, a in totals.items()}


def submit(*args: str) -> None:
    env = dict(os.environ, VENV=str(Path(os.sys.executable).parent.parent))
    proc = subprocess.run([str(SUBMIT), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                           str(JOB), *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def table(path: Path) -> list[dict[str, object]]:
    return pq.read_table(str(path)).to_pylist()


def test_order_job_batch_and_stream(pair: Pair, tmp_path: Path) -> None:
    topic = "Orders"
    pair.create_topic(topic)
    fill_orders.main(["--namesrv", pair.ns.addr, "--topic", topic, "-n", "500", "--users", "7"])
    want = expected(500, 7, 7)

    out = tmp_path / "batch"
    submit("--namesrv", pair.ns.addr, "--topic", topic, "--mode", "batch", "--output", str(out))
    got = {r["user"]: (r["total_amount"], r["orders"]) for r in table(out / "user_totals")}
    assert got.keys() == want.keys()
    for user, (total, n) in want.items():
        assert got[user][1] == n and abs(float(got[user][0]) - total) < 0.01, user  # type: ignore[arg-type]
    assert sum(r["orders"] for r in table(out / "per_minute")) == 500  # type: ignore[misc]

    stream, ck = tmp_path / "stream", tmp_path / "ck"
    args = ("--namesrv", pair.ns.addr, "--topic", topic, "--mode", "stream", "--group", "orders-stream",
            "--output", str(stream), "--checkpoint", str(ck), "--max-offsets-per-trigger", "200")
    submit(*args)
    orders = table(stream / "orders")
    ids = [r["order_id"] for r in orders]
    assert len(ids) == 500 and len(set(ids)) == 500
    totals = {r["user"]: r["orders"] for r in table(stream / "user_totals")}
    assert sum(totals.values()) == 500  # type: ignore[arg-type]
    # a restart from the checkpoint (and a driver killed mid-batch):
    # tests/spark/test_user_counts_job.py
