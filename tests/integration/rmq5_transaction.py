"""Run by RocketMQ's official Python client 5.x in its own venv (.venv-rmq5, make rmq5),
never imported by the tests: a transactional Producer over gRPC at the endpoint given.
Every line it prints is one JSON object.

``end BODY...``: a transaction per body, committed when the body starts with ``commit``,
rolled back otherwise; prints each one's receipt (message and transaction ids) and the
status code of its end (or the error).

``orphan BODY...``: sends each body as a half message, ends none, and exits (its
transactions are left for the broker to check; a check that reaches it before it exits is
answered "unknown").

``check``: a producer of the topic with a checker that answers each check by the body
(``commit...``: COMMIT, else ROLLBACK); prints ``{"ready": true}`` once started and a line
per check it answered, until its stdin closes.

    .venv-rmq5/bin/python tests/integration/rmq5_transaction.py 127.0.0.1:8081 T end commit-1
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        Message,
        Producer,
        TransactionChecker,
        TransactionResolution,
    )

    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    parser.add_argument("mode", choices=("end", "orphan", "check"))
    parser.add_argument("bodies", nargs="*")
    args = parser.parse_args()

    def decide(body: bytes) -> Any:
        if args.mode == "orphan":  # a check before it exits leaves the transaction pending
            return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
        return TransactionResolution.COMMIT if body.startswith(b"commit") \
            else TransactionResolution.ROLLBACK

    class Checker(TransactionChecker):
        def check(self, message: Any) -> Any:
            resolution = decide(message.body)
            out({"checked": message.body.decode(), "id": message.message_id,
                 "topic": message.topic, "commit": resolution == TransactionResolution.COMMIT})
            return resolution

    producer = Producer(ClientConfiguration(args.endpoint, Credentials()), (args.topic,),
                        Checker())
    producer.startup()
    try:
        if args.mode == "check":
            out({"ready": True})
            sys.stdin.read()  # until the test closes it
            return 0
        for body in args.bodies:
            msg = Message()
            msg.topic = args.topic
            msg.body = body.encode()
            msg.tag = "TxTag"
            transaction = producer.begin_transaction()
            receipt = producer.send(msg, transaction)
            sent: dict[str, Any] = {"body": body, "id": receipt.message_id,
                                    "transaction_id": receipt.transaction_id}
            if args.mode == "end":
                try:
                    res = transaction.commit() if body.startswith("commit") \
                        else transaction.rollback()
                    sent["end"] = res.status.code
                except Exception as exc:  # the test reports what failed
                    sent["error"] = repr(exc)
            out(sent)
    finally:
        producer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
