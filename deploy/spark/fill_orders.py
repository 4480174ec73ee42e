"""Fill a topic with sample JSON order events for deploy/spark/order_job.py.

    .venv/bin/python -m deploy.spark.fill_orders --namesrv 127.0.0.1:9876 --topic Orders -n 10000

``--tags new,paid,shipped`` tags the orders in turn with those tags (the
default tags every order ``order``). deploy/spark/user_counts.py counts them
per user and minute.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Iterator
from typing import Any


def orders(count: int, users: int, seed: int, first_id: int = 0,
           now_ms: int | None = None) -> Iterator[dict[str, Any]]:
    """The orders the filler sends, in order: the same for the same seed."""
    rng = random.Random(seed)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    for i in range(first_id, first_id + count):
        yield {"order_id": f"o{i}", "user": f"u{rng.randrange(users)}",
               "amount": round(rng.uniform(1, 500), 2), "ts": now - rng.randrange(600_000)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--namesrv", default="127.0.0.1:9876")
    p.add_argument("--topic", default="Orders")
    p.add_argument("-n", "--count", type=int, default=10_000)
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--first-id", type=int, default=0, help="order ids start here")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tags", default="order", help="comma list: order i gets tag i mod n")
    args = p.parse_args(argv)
    tags = [t.strip() for t in args.tags.split(",") if t.strip()]
    if not tags:
        p.error("--tags needs at least one tag")
    from client.blocking import Message, Producer

    with Producer("order-filler", args.namesrv) as producer:
        batch = []
        for i, order in enumerate(orders(args.count, args.users, args.seed, args.first_id),
                                  args.first_id):
            batch.append(Message(args.topic, json.dumps(order).encode(), tags=tags[i % len(tags)],
                                 keys=order["order_id"]))
            if len(batch) == 100:
                producer.send_batch(batch)
                batch = []
        if batch:
            producer.send_batch(batch)
    print(f"sent {args.count} orders to {args.topic}")


if __name__ == "__main__":
    main()
