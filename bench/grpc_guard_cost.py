"""What the gRPC port's ACL check and namespaces cost per call, in process (no sockets):

    .venv/bin/python -m bench.grpc_guard_cost [--count N]

    acl        a SendMessage of 1 KiB parsed and checked (broker/grpc/access.py decide:
               the authorization header, HMAC-SHA1, freshness, the account's PUB)
    wrap       a SendMessage of 1 KiB parsed, its names namespaced, serialized again
    unwrap     a ReceiveMessageResponse with one 1 KiB message parsed, its names
               unwrapped, serialized again (once per message received)

Each line is the median of 5 runs of N calls, in microseconds per call. A call with no
namespace on a broker without ACL pays none of it (broker/grpc/guard.py).
"""

from __future__ import annotations

import statistics
import time
import timeit
from collections.abc import Callable

import click

from acl.plain import parse_plain_acl
from broker.grpc import access
from broker.grpc.guard import unwrap_resources, wrap_resources
from broker.grpc.pb import definition_pb2 as pb
from broker.grpc.pb import service_pb2 as spb

ACL = """
accounts:
  - accessKey: appAccess1
    secretKey: appSecret1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def cases() -> dict[str, Callable[[], None]]:
    config = parse_plain_acl(ACL)
    now = int(time.time() * 1000)
    when = access.date_time_text(now)
    metadata = {"x-mq-date-time": when,
                "authorization": "MQv2-HMAC-SHA1 Credential=appAccess1, SignedHeaders="
                                 f"x-mq-date-time, Signature={access.sign('appSecret1', when)}"}
    body = b"x" * 1024
    send = spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="TopicA"),
                                                       body=body)]).SerializeToString()
    received = spb.ReceiveMessageResponse(message=pb.Message(
        topic=pb.Resource(name="app1%TopicA"), body=body)).SerializeToString()

    def acl() -> None:
        request = spb.SendMessageRequest.FromString(send)
        if not access.decide(config, "SendMessage", request, metadata, "127.0.0.1", now).allowed:
            raise AssertionError("the bench's call was refused")

    def wrap() -> None:
        request = spb.SendMessageRequest.FromString(send)
        wrap_resources(request, "app1")
        request.SerializeToString()

    def unwrap() -> None:
        response = spb.ReceiveMessageResponse.FromString(received)
        unwrap_resources(response, "app1")
        response.SerializeToString()

    return {"acl": acl, "wrap": wrap, "unwrap": unwrap}


@click.command()
@click.option("--count", default=20_000, show_default=True, help="calls per run")
def main(count: int) -> None:
    for name, fn in cases().items():
        runs = [timeit.timeit(fn, number=count) / count * 1e6 for _ in range(5)]
        print(f"{name:8} {statistics.median(runs):7.1f} us/call")


if __name__ == "__main__":
    main()
