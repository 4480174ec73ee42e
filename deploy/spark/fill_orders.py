"""Fill a topic with sample JSON order events for deploy/spark/order_job.py.

    .venv/bin/python -m deploy.spark.fill_orders --namesrv 127.0.0.1:9876 --topic Orders -n 10000

``--tags new,paid,shipped`` tags the orders in turn with those tags (for
deploy/spark/tag_counts.py; the default tags every order ``order``).
"""

from __future__ import annotations

import argparse
import json
import random
import time


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

    rng = random.Random(args.seed)
    now = int(time.time() * 1000)
    with Producer("order-filler", args.namesrv) as producer:
        batch = []
        for i in range(args.first_id, args.first_id + args.count):
            order = {"order_id": f"o{i}", "user": f"u{rng.randrange(args.users)}",
                     "amount": round(rng.uniform(1, 500), 2), "ts": now - rng.randrange(600_000)}
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
