"""Run by RocketMQ's official Python client 5.x in its own venv (.venv-rmq5, make rmq5),
never imported by the tests: a SimpleConsumer over gRPC at the endpoint given. Every
line it prints is one JSON object.

``scenario``: a first receive (on empty queues: the group's start is fixed), then the official
Producer sends ``--count`` messages (tag TagA, key key-<i>, property seq=<i>); the consumer
receives them all and prints each message's fields; acks all but two: ``change`` (its
invisibility changed to 1 s; the old handle's ack printed; received again and acked) and
``never`` (received again and again, never acked, until ``--never-for`` seconds pass).

``consume``: prints ``{"ready": true}`` after its first receive, then receives and acks
until its stdin closes, one line per message received (``acked``: whether the ack
succeeded; ``batch``: which receive got it, counted from 1); a failed receive or ack is
printed and the loop goes on.

    .venv-rmq5/bin/python tests/integration/rmq5_consumer.py scenario 127.0.0.1:8081 T g \\
        --count 5
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def fields(m: Any) -> dict[str, Any]:
    return {"id": m.message_id, "body": m.body.decode(errors="replace"), "tag": m.tag,
            "keys": list(m.keys or []), "properties": dict(m.properties or {}),
            "born_host": m.born_host, "born_timestamp": m.born_timestamp,
            "attempt": m.delivery_attempt, "corrupted": m.corrupted, "topic": m.topic}


def scenario(args: argparse.Namespace) -> None:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
    )

    config = ClientConfiguration(args.endpoint, Credentials())
    consumer = SimpleConsumer(config, args.group, {args.topic: FilterExpression("TagA")},
                              await_duration=1)
    consumer.startup()
    producer = Producer(ClientConfiguration(args.endpoint, Credentials()), (args.topic,))
    producer.startup()
    try:
        consumer.receive(16, 30)  # the group's first pop, on empty queues: it starts at 0
        sent: list[str] = []
        for i in range(args.count):
            msg = Message()
            msg.topic = args.topic
            msg.body = f"body-{i}".encode()
            msg.tag = "TagA"
            msg.keys = f"key-{i}"
            msg.add_property("seq", str(i))
            sent.append(producer.send(msg).message_id)
        out({"sent": sent})
        got: dict[str, Any] = {}
        deadline = time.monotonic() + 30
        while len(got) < args.count and time.monotonic() < deadline:
            for m in consumer.receive(16, 30):
                got[m.body.decode()] = m
                out({"received": fields(m)})
        change, never = got["body-0"], got["body-1"]
        for m in got.values():
            if m not in (change, never):
                consumer.ack(m)
        old = change.receipt_handle
        consumer.change_invisible_duration(change, 1)
        new = change.receipt_handle
        change.receipt_handle = old
        try:
            consumer.ack(change)
            out({"stale_ack": "OK"})
        except Exception as exc:
            out({"stale_ack": getattr(exc, "code", None), "error": str(exc)})
        change.receipt_handle = new
        out({"handle_changed": new != old})
        consumer.change_invisible_duration(never, 1)
        again: list[dict[str, Any]] = []
        changed_back = False
        deadline = time.monotonic() + args.never_for
        while time.monotonic() < deadline:
            for m in consumer.receive(16, 1):
                again.append(fields(m))
                out({"again": fields(m)})
                if m.body == b"body-0" and not changed_back:
                    consumer.ack(m)
                    changed_back = True
        out({"done": True})
    finally:
        producer.shutdown()
        consumer.shutdown()


def consume(args: argparse.Namespace) -> None:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    config = ClientConfiguration(args.endpoint, Credentials())
    consumer = SimpleConsumer(config, args.group, {args.topic: FilterExpression("*")},
                              await_duration=args.await_s)
    consumer.startup()
    first = True
    batch = 0
    try:
        while not stop.is_set():
            try:
                got = consumer.receive(args.batch, args.invisible)
            except Exception as exc:  # the broker may be down for a while: go on
                out({"receive_error": str(exc)[:300]})
                time.sleep(0.2)
                continue
            finally:
                if first:
                    out({"ready": True})
                    first = False
            batch += 1
            for m in got:
                try:
                    consumer.ack(m)
                    acked = True
                except Exception as exc:
                    out({"ack_error": str(exc)[:300]})
                    acked = False
                out({"id": m.message_id, "body": m.body.decode(errors="replace"),
                     "attempt": m.delivery_attempt, "acked": acked, "batch": batch})
    finally:
        consumer.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["scenario", "consume"])
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--count", type=int, default=5)
    parser.add_argument("--never-for", type=float, default=15.0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--invisible", type=int, default=30)
    parser.add_argument("--await-s", type=int, default=1)
    args = parser.parse_args()
    if args.mode == "scenario":
        scenario(args)
    else:
        consume(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
