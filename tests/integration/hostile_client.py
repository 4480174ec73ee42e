"""A real client facing a hostile route, in a process of its own with bounded memory.

    python -m tests.integration.hostile_client produce|subscribe NAMESRV TOPIC

Prints one JSON line: ``{"result": "sent", "broker": ...}`` /
``{"result": "queues", "brokers": [...], "count": n}`` on success,
``{"result": "error", "error": ...}`` for a clean client error, and exits 3 with
``{"result": "memory"}`` when the address space limit is hit (a client that
builds ``range(2**31 - 1)`` queues would otherwise take the machine's memory).
"""

from __future__ import annotations

import json
import resource
import sys

import trio

from client import Message, MQClientError, Producer, PullConsumer

ADDRESS_SPACE_LIMIT = 1536 * 1024 * 1024
TIMEOUT = 10.0


async def produce(namesrv: str, topic: str) -> dict[str, object]:
    async with Producer("RTHostileRouteProducer", namesrv, send_msg_timeout=TIMEOUT) as p:
        r = await p.send(Message(topic, b"through a legitimate broker"))
        return {"result": "sent", "broker": r.message_queue.broker_name,
                "status": r.send_status.name}


async def subscribe(namesrv: str, topic: str) -> dict[str, object]:
    async with PullConsumer("RTHostileRouteConsumer", namesrv) as c:
        queues = await c.fetch_subscribe_message_queues(topic)
        return {"result": "queues", "count": len(queues),
                "brokers": sorted({q.broker_name for q in queues})}


async def main(mode: str, namesrv: str, topic: str) -> dict[str, object]:
    fn = {"produce": produce, "subscribe": subscribe}[mode]
    try:
        with trio.fail_after(3 * TIMEOUT):
            return await fn(namesrv, topic)
    except MQClientError as exc:
        return {"result": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}
    except trio.TooSlowError:
        return {"result": "hung", "error": f"no answer within {3 * TIMEOUT}s"}


def out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(out_of_memory(e) for e in exc.exceptions)
    return exc.__cause__ is not None and out_of_memory(exc.__cause__)


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
    try:
        mode, namesrv, topic = sys.argv[1:4]
        out = trio.run(main, mode, namesrv, topic)
    except BaseException as exc:
        if not out_of_memory(exc):
            raise
        print(json.dumps({"result": "memory"}), flush=True)
        sys.exit(3)
    print(json.dumps(out), flush=True)
