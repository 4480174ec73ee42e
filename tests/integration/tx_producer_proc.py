"""A transaction producer process for the crash test: it sends one half
message per body given, and its local transaction never finishes (it prints
``HALF <body>`` and waits), so it can be killed between half message and end.

    python -m tests.integration.tx_producer_proc NAMESRV TOPIC GROUP BODY...
"""

from __future__ import annotations

import sys
from typing import Any

import trio

from client import LocalTransactionState, Message, TransactionProducer
from protocol.message import MessageExt


class Stuck:
    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        print(f"HALF {msg.body.decode()}", flush=True)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW


async def main(namesrv: str, topic: str, group: str, bodies: list[str]) -> None:
    async with TransactionProducer(group, namesrv, Stuck()) as p, trio.open_nursery() as n:
        for body in bodies:
            n.start_soon(p.send_message_in_transaction, Message(topic, body.encode()))


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
