"""Run by RocketMQ's official Python client 5.x in its own venv (.venv-rmq5, make rmq5),
never imported by the tests: a PushConsumer over gRPC at the endpoint given. Every line it
prints is one JSON object.

It prints ``{"ready": true}`` once started, then one line per call of its listener
(``body``, ``id``, ``attempt``, ``result``) until its stdin closes. The listener answers
FAILURE for a body starting ``fail-``, sleeps ``--slow-s`` seconds before answering SUCCESS
for one starting ``slow-``, and answers SUCCESS at once for any other. At the end it prints
whether the broker's settings made it a FIFO consumer (``fifo``).

    .venv-rmq5/bin/python tests/integration/rmq5_push_consumer.py 127.0.0.1:8081 T g --slow-s 5
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

lock = threading.Lock()


def out(obj: dict[str, Any]) -> None:
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--slow-s", type=float, default=5.0)
    args = parser.parse_args()

    from rocketmq import ClientConfiguration, Credentials, FilterExpression
    from rocketmq.v5.consumer.push import ConsumeResult, MessageListener, PushConsumer

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            body = message.body.decode(errors="replace")
            result = ConsumeResult.SUCCESS
            if body.startswith("fail-"):
                result = ConsumeResult.FAILURE
            elif body.startswith("slow-"):
                time.sleep(args.slow_s)
            out({"body": body, "id": message.message_id, "attempt": message.delivery_attempt,
                 "result": result.name})
            return result

    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    config = ClientConfiguration(args.endpoint, Credentials(), request_timeout=5)
    consumer = PushConsumer(config, args.group, Listener(),
                            {args.topic: FilterExpression("*")}, consumption_thread_count=8)
    consumer.startup()
    out({"ready": True})
    try:
        stop.wait()
    finally:
        out({"fifo": consumer.fifo})
        consumer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
