"""What a producer that never reads its socket costs the broker.

    .venv/bin/python -m tests.integration.outbound_cost N WINDOW_S

A producer connection of group G (receive buffer 4 KiB, never read) leaves N
prepared 16 KiB transactional messages pending, with checks every second;
then a probe producer sends one message every 20 ms for WINDOW_S seconds.
Prints the check passes run, the broker's peak RSS growth, the commit log's
growth, the probe's p99, the checks dropped and the most owed to one
connection.
"""

import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import trio

from client import Message, Producer
from client.admin import MQAdmin
from protocol.body import pack_body
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from protocol.headers import SendMessageRequestHeader
from protocol.message import properties_to_string
from protocol.record import TRANSACTION_PREPARED_TYPE
from protocol.trio.memory import rss_bytes
from tests.integration.cluster import Cluster
from tests.waits import routed, wait_until

TOPIC = "M"


async def main(N: int, WINDOW: float) -> None:  # noqa: N803
    root = Path(tempfile.mkdtemp(prefix="outbound-cost-"))
    c = Cluster(root)
    try:
        ns = c.namesrv()
        b = c.broker(
            "broker-a",
            ns.addr,
            True,
            transactionCheckInterval=1000,
            transactionTimeOut=1000,
            transactionCheckMax=1000,
        )
        async with MQAdmin(ns.addr) as admin:
            await admin.create_topic(
                TOPIC, broker_addr=b.addr, read_queue_nums=1, write_queue_nums=1
            )
            await wait_until(routed(admin, TOPIC), 10, "routed")
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", b.port))
            s.setblocking(False)
            hb = pack_body(
                {
                    "clientID": "127.0.0.1@silent",
                    "consumerDataSet": [],
                    "producerDataSet": [{"groupName": "G"}],
                }
            )
            frames = [
                encode_frame(RemotingCommand.request(RequestCode.HEART_BEAT, body=hb).encode())
            ]
            for i in range(N):
                props = {"TRAN_MSG": "true", "PGROUP": "G", "UNIQ_KEY": f"G-{i}"}
                h = SendMessageRequestHeader(
                    "G",
                    TOPIC,
                    0,
                    sys_flag=TRANSACTION_PREPARED_TYPE,
                    properties=properties_to_string(props),
                )
                frames.append(
                    encode_frame(
                        RemotingCommand.request(
                            RequestCode.SEND_MESSAGE, h.to_fields(), b"s" * 16384
                        ).encode()
                    )
                )
            view = memoryview(b"".join(frames))
            while view:
                try:
                    view = view[s.send(view) :]
                except BlockingIOError:
                    await trio.sleep(0.002)

            async def pending() -> bool:
                return (await admin.broker_runtime_info(b.addr))["transactionPending"] >= N

            await wait_until(pending, 120, "pending")
            st0 = await admin.broker_runtime_info(b.addr)
            rss0 = rss_bytes(b.proc.pid)
            lat = []
            peak = rss0
            t_end = trio.current_time() + WINDOW
            async with Producer("probe", ns.addr, send_msg_timeout=10) as p:
                while trio.current_time() < t_end:
                    t = time.perf_counter()
                    await p.send(Message(TOPIC, b"probe"))
                    lat.append(time.perf_counter() - t)
                    peak = max(peak, rss_bytes(b.proc.pid) or 0)
                    await trio.sleep(0.02)
            st1 = await admin.broker_runtime_info(b.addr)
            lat.sort()
            p99 = lat[int(len(lat) * 0.99) - 1] * 1000
            print(
                f"N={N} window={WINDOW}s passes={int(st1['transactionCheckPasses']) - int(st0['transactionCheckPasses'])} "
                f"rss_growth={(peak - rss0) / 2**20:.0f}MiB commitlog_growth="
                f"{(int(st1['commitLogMaxOffset']) - int(st0['commitLogMaxOffset'])) / 2**20:.1f}MiB "
                f"probe_p99={p99:.1f}ms probes={len(lat)} dropped={st1.get('transactionChecksDropped')} owed_max={st1.get('connectionOwedMaxBytes')}"
            )
            s.close()
    finally:
        c.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]), float(sys.argv[2]))
