"""Run by RocketMQ's official Python client 5.x in its own venv (.venv-rmq5, make rmq5),
never imported by the tests: sends over gRPC to the endpoint given and prints one JSON
object: each SEND_OK message's id, body, tag, keys, group and offset, the failures, and the
seconds the normal sends took. With ``--retry-for S`` a failed send is tried again (a new
message id each time) for up to S seconds, each failed try counted in ``retried``. With
``--fifo-groups N`` the FIFO messages go round N message groups (``<fifo-group><i % N>``).

    .venv-rmq5/bin/python tests/integration/rmq5_producer.py 127.0.0.1:8081 TopicA 100 \\
        --fifo-group g1 --fifo-count 10
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    parser.add_argument("count", type=int)
    parser.add_argument("--fifo-group", default="")
    parser.add_argument("--fifo-count", type=int, default=0)
    parser.add_argument("--fifo-groups", type=int, default=1)
    parser.add_argument("--body-size", type=int, default=0)
    parser.add_argument("--retry-for", type=float, default=0.0)
    # timer messages: delivery_timestamp this many seconds ahead (the client puts
    # the value in the Timestamp's seconds), and recall every Nth one by its handle
    parser.add_argument("--deliver-in", type=int, default=0)
    parser.add_argument("--recall-every", type=int, default=0)
    args = parser.parse_args()
    producer = Producer(ClientConfiguration(args.endpoint, Credentials()), (args.topic,))
    producer.startup()
    sent: list[dict[str, object]] = []
    failed: list[str] = []
    retried = 0
    recalled: list[str] = []
    latencies: list[float] = []  # seconds, each normal send that got SEND_OK
    try:
        def one(i: int, group: str | None) -> None:
            nonlocal retried
            msg = Message()
            msg.topic = args.topic
            body = f"rmq5-{group or 'n'}-{i}".encode()
            msg.body = body + b"x" * max(0, args.body_size - len(body))
            msg.tag = "TagA"
            msg.keys = f"key-{i}"
            msg.add_property("seq", str(i))
            if group:
                msg.message_group = group
            if args.deliver_in:
                msg.delivery_timestamp = int(time.time()) + args.deliver_in
            give_up = time.monotonic() + args.retry_for
            while True:
                try:
                    t0 = time.perf_counter()
                    receipt = producer.send(msg)
                    if not group:
                        latencies.append(time.perf_counter() - t0)
                    break
                except Exception as exc:  # the test reports what failed
                    if time.monotonic() < give_up:
                        retried += 1
                        time.sleep(0.1)
                        continue
                    failed.append(f"{i}: {exc!r}")
                    return
            sent.append({"id": receipt.message_id, "body": msg.body.decode()[:64],
                         "offset": receipt.offset, "group": group or "",
                         "recall_handle": receipt.recall_handle or ""})
            if args.recall_every and i % args.recall_every == 0 and receipt.recall_handle:
                producer.recall_message(args.topic, receipt.recall_handle)
                recalled.append(receipt.message_id)

        started = time.perf_counter()
        for i in range(args.count):
            one(i, None)
        seconds = time.perf_counter() - started
        fifo_started = time.perf_counter()
        for i in range(args.fifo_count):
            one(i, args.fifo_group + (str(i % args.fifo_groups) if args.fifo_groups > 1 else ""))
    finally:
        producer.shutdown()
    json.dump({"sent": sent, "failed": failed, "retried": retried, "seconds": seconds,
               "fifo_seconds": time.perf_counter() - fifo_started,
               "latencies": latencies, "recalled": recalled}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
