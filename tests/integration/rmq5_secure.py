"""Run by RocketMQ's official Python client 5.x in its own venv (.venv-rmq5), never imported
by the tests: TLS, credentials and a namespace against a broker's gRPC port. Prints one
JSON object.

``roundtrip``: a SimpleConsumer (group, topic) receives once (the group starts at the
queues' end), a Producer sends ``count`` messages, the consumer receives and acks until it
has them all or ``--for`` seconds pass; prints what was sent, received (body, topic) and
the first error (a refused start-up among them).

``raw``: one QueryRoute over plain grpcio with the metadata built here: ``--date-time``
(x-mq-date-time) signed with the secret; prints the response's status code and message.

TLS (``--tls``) trusts the CA named by GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, as the client's
``grpc.ssl_channel_credentials()`` does.

    .venv-rmq5/bin/python tests/integration/rmq5_secure.py roundtrip 127.0.0.1:8081 T G 5 \\
        --ak AK --sk SK --namespace app1 --tls
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def roundtrip(args: argparse.Namespace) -> dict[str, Any]:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
    )

    def config() -> Any:
        return ClientConfiguration(args.endpoint, Credentials(args.ak, args.sk),
                                   args.namespace, request_timeout=5)

    result: dict[str, Any] = {"sent": [], "received": [], "error": None}
    consumer = producer = None
    try:
        consumer = SimpleConsumer(config(), args.group, {args.topic: FilterExpression("*")},
                                  await_duration=1, tls_enable=args.tls)
        consumer.startup()
        consumer.receive(16, 10)
        producer = Producer(config(), (args.topic,), tls_enable=args.tls)
        producer.startup()
        for i in range(args.count):
            msg = Message()
            msg.topic = args.topic
            msg.body = f"{args.label}-{i}".encode()
            msg.tag = "TagA"
            producer.send(msg)
            result["sent"].append(msg.body.decode())
        give_up = time.monotonic() + args.wait_for
        while len(result["received"]) < args.count and time.monotonic() < give_up:
            for m in consumer.receive(16, 10) or []:
                result["received"].append({"body": m.body.decode(), "topic": m.topic})
                consumer.ack(m)
    except Exception as exc:  # the test reads the failure
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        for client in (producer, consumer):
            if client is not None:
                try:
                    client.shutdown()
                except Exception:  # noqa: BLE001 - a client that never started
                    pass
    return result


def raw(args: argparse.Namespace) -> dict[str, Any]:
    import hashlib
    import hmac

    import grpc
    from rocketmq.grpc_protocol import QueryRouteRequest, Resource, service_pb2_grpc

    signature = hmac.new(args.sk.encode(), args.date_time.encode(), hashlib.sha1).hexdigest()
    metadata = [("x-mq-date-time", args.date_time), ("x-mq-client-id", "raw-client"),
                ("authorization", f"MQv2-HMAC-SHA1 Credential={args.ak}, "
                                  f"SignedHeaders=x-mq-date-time, Signature={signature}")]
    channel = (grpc.secure_channel(args.endpoint, grpc.ssl_channel_credentials()) if args.tls
               else grpc.insecure_channel(args.endpoint))
    with channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        try:
            answer = stub.QueryRoute(QueryRouteRequest(topic=Resource(name=args.topic)),
                                     metadata=metadata, timeout=10)
        except grpc.RpcError as exc:
            return {"grpc_error": str(exc.code()), "details": exc.details()}
    return {"code": answer.status.code, "message": answer.status.message,
            "queues": len(answer.message_queues)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("roundtrip", "raw"))
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("count", type=int)
    parser.add_argument("--ak", default="")
    parser.add_argument("--sk", default="")
    parser.add_argument("--namespace", default="")
    parser.add_argument("--label", default="m")
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--for", dest="wait_for", type=float, default=20.0)
    parser.add_argument("--date-time", default="")
    args = parser.parse_args()
    result = roundtrip(args) if args.mode == "roundtrip" else raw(args)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
