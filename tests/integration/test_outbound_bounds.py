"""A producer that never reads its socket, against a real broker (issue 48):
the transaction checks it is owed stay bounded (dropped, asked again later),
the check passes write nothing again, other producers are answered, and a
group's pending transactions are bounded (SYSTEM_BUSY)."""

from __future__ import annotations

import socket
from typing import Any

import trio

from client import LocalTransactionState, Message, TransactionProducer
from protocol.body import pack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from protocol.headers import EndTransactionRequestHeader, SendMessageRequestHeader
from protocol.message import properties_to_string
from protocol.record import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, decode_msg_id
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster
from tests.integration.test_transactions import TOPIC, Listener, delivered, runtime, setup
from tests.waits import wait_until

KiB = 1024
HIGH_WATER = 256 * KiB
BODY = 16 * KiB
SILENT = "tx-silent"


def prepared(group: str, i: int, body: bytes) -> RemotingCommand:
    props = {"TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": f"{group}-{i}"}
    h = SendMessageRequestHeader(group, TOPIC, 0, sys_flag=TRANSACTION_PREPARED_TYPE,
                                 properties=properties_to_string(props))
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, h.to_fields(), body)


async def send_all(s: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[s.send(view):]
        except BlockingIOError:
            await trio.sleep(0.005)


async def test_a_producer_that_never_reads_its_checks(cluster: Cluster) -> None:
    ns, broker = await setup(cluster, transactionCheckInterval=300, transactionTimeOut=1000,
                             transactionCheckMax=1000, writeBufferHighWaterMark=HIGH_WATER,
                             writeBufferLowWaterMark=64 * KiB)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * KiB)
    s.connect(("127.0.0.1", broker.port))
    s.setblocking(False)
    heartbeat = pack_body({"clientID": "127.0.0.1@silent", "consumerDataSet": [],
                           "producerDataSet": [{"groupName": SILENT}]})
    frames = [RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat)]
    n = 200  # 3.2 MiB of half messages, each checked at every pass
    frames += [prepared(SILENT, i, b"s" * BODY) for i in range(n)]
    for opaque, cmd in enumerate(frames, 1):
        cmd.opaque = opaque
    await send_all(s, b"".join(encode_frame(cmd.encode()) for cmd in frames))

    async def status() -> dict[str, Any]:
        return await runtime(ns.addr, broker.addr)

    async def all_pending() -> bool:
        return (await status())["transactionPending"] >= n

    await wait_until(all_pending, 30, "the silent producer's half messages stored")

    async def passes_after(st: dict[str, Any], passes: int) -> dict[str, Any]:
        async def done() -> dict[str, Any] | None:
            now = await status()
            return now if now["transactionCheckPasses"] >= st["transactionCheckPasses"] + passes \
                else None

        return dict(await wait_until(done, 30, f"{passes} more check passes"))

    async def asked_twice() -> dict[str, Any] | None:
        st = await status()
        return st if st["transactionChecks"] + st["transactionChecksDropped"] >= 2 * n else None

    # every half message was due twice: 6.4 MiB of checks asked for
    first = dict(await wait_until(asked_twice, 30, "two rounds of checks"))
    assert first["connectionOwedMaxBytes"] <= HIGH_WATER + BODY + 2 * KiB
    assert first["transactionChecksDropped"] > 0
    # another producer's transactions are checked and end meanwhile
    listener = Listener({b"other": LocalTransactionState.UNKNOW},
                        {b"other": LocalTransactionState.COMMIT_MESSAGE})
    async with TransactionProducer("tx-other", ns.addr, listener) as p:
        r = await p.send_message_in_transaction(Message(TOPIC, b"other"))
        assert r.local_transaction_state is LocalTransactionState.UNKNOW

        async def committed() -> bool:
            return b"other" in await delivered(broker.addr)

        await wait_until(committed, 30, "the other producer's transaction committed by a check")
    assert listener.checked[b"other"] == 1
    start = await status()
    later = await passes_after(start, 3)
    # what the broker holds for the silent producer stays under the high-water
    # mark (plus the one check that crossed it); the checks beyond are dropped
    # and asked again, pass after pass, none lost
    for st in (first, start, later):
        assert st["connectionOwedMaxBytes"] <= HIGH_WATER + BODY + 2 * KiB
    assert later["transactionChecksDropped"] > start["transactionChecksDropped"]
    assert later["transactionPending"] == n
    # the passes write nothing again (no copy of an unchanged half message)
    assert later["commitLogMaxOffset"] == start["commitLogMaxOffset"]
    assert later["transactionHalfCopies"] == 0
    s.close()


async def test_prepared_sends_past_the_pending_bound_are_answered_busy(
        cluster: Cluster) -> None:
    ns, broker = await setup(cluster, transactionMaxPendingPerGroup=5)
    async with RemotingClient() as rc:
        async def send(group: str, i: int) -> RemotingCommand:
            return await rc.invoke(broker.addr, prepared(group, i, b"p"), 5)

        answers = [await send("tx-bounded", i) for i in range(5)]
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 5
        busy = await send("tx-bounded", 5)
        assert busy.code == ResponseCode.SYSTEM_BUSY
        assert "transactionMaxPendingPerGroup=5" in str(busy.remark)
        assert "tx-bounded" in str(busy.remark)
        assert (await send("tx-another", 0)).code == ResponseCode.SUCCESS
        # one ends: room for one more
        first = answers[0]
        h = EndTransactionRequestHeader("tx-bounded", int(first.ext_fields["queueOffset"]),
                                        _commit_log_offset(first), TRANSACTION_ROLLBACK_TYPE)
        end = await rc.invoke(broker.addr, RemotingCommand.request(
            RequestCode.END_TRANSACTION, h.to_fields()), 5)
        assert end.code == ResponseCode.SUCCESS, end.remark
        assert (await send("tx-bounded", 6)).code == ResponseCode.SUCCESS
        assert (await send("tx-bounded", 7)).code == ResponseCode.SYSTEM_BUSY
    st = await runtime(ns.addr, broker.addr)
    assert st["transactionPrepareRefused"] == 2 and st["transactionPending"] == 6


def _commit_log_offset(answer: RemotingCommand) -> int:
    return decode_msg_id(str(answer.ext_fields["msgId"]))[1]
