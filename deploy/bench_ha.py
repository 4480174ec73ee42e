"""HA figures: produce msg/s per role, replication lag under load, catch-up MB/s,
single sync-send latency. Run from the repository root:

    .venv/bin/python -m deploy.bench_ha

A name server, a master and (optionally) a slave run as separate processes on
loopback (tests/integration/cluster.py), each with a temporary store; mqbench
sends 200,000 1 KiB messages in batches of 32.
"""
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

from client.admin import MQAdmin
from tests.integration.cluster import Cluster

BIN = Path(sys.executable).parent
PROPS = {"mapedFileSizeCommitLog": 256 * 1024 * 1024}


def bench(ns: str, topic: str, *args: str) -> str:
    out = subprocess.run([str(BIN / "mqbench"), "producer", "-n", ns, "-t", topic, *args],
                         capture_output=True, text=True, timeout=600).stdout
    return out.strip().splitlines()[-1]


def status(ns: str, addr: str) -> dict:
    async def go():
        async with MQAdmin(ns) as a:
            return await a.broker_runtime_info(addr)
    return trio.run(go)


def run(role: str, flush: str, slave: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        c = Cluster(Path(d))
        try:
            ns = c.namesrv()
            m = c.broker("broker-a", ns.addr, brokerRole=role, flushDiskType=flush, **PROPS)
            if slave:
                s = c.broker("broker-a-s", ns.addr, brokerName="broker-a", brokerId=1,
                             brokerRole="SLAVE", **PROPS)
                deadline = time.time() + 20
                while not status(ns.addr, m.addr)["ha"].get("slaves") and time.time() < deadline:
                    time.sleep(0.2)
            lags: list[int] = []
            stop = threading.Event()

            def sample() -> None:
                while not stop.wait(0.5):
                    try:
                        sl = status(ns.addr, m.addr)["ha"].get("slaves") or []
                        if sl:
                            lags.append(sl[0]["behind"])
                    except Exception:
                        pass
            t = threading.Thread(target=sample)
            if slave:
                t.start()
            line = bench(ns.addr, "B", "-s", "1024", "-b", "32", "-c", "200000")
            stop.set()
            if slave:
                t.join()
            print(f"{role:13} {flush:11} slave={slave}: {line}")
            if lags:
                print(f"    lag under load: max {max(lags)} bytes, median {sorted(lags)[len(lags)//2]}")
            if role == "SYNC_MASTER":
                line = bench(ns.addr, "S", "-s", "1024", "-b", "1", "-w", "1", "-c", "5000")
                print(f"    single sync sends: {line}")
            if slave and role == "ASYNC_MASTER" and flush == "ASYNC_FLUSH":
                # catch-up: a second, empty slave against everything stored so far
                s.stop()
                import shutil
                shutil.rmtree(Path(d) / "store-broker-a-s")
                total = status(ns.addr, m.addr)["commitLogMaxOffset"]
                t0 = time.time()
                s.start()
                while True:
                    st = status(ns.addr, s.addr)
                    if st["commitLogMaxOffset"] >= total:
                        break
                    time.sleep(0.05)
                dt = time.time() - t0
                print(f"    catch-up of an empty slave: {total/1e6:.0f} MB in {dt:.2f} s = {total/1e6/dt:.1f} MB/s (includes slave start)")
        finally:
            c.close()


if __name__ == "__main__":
    for role, flush, slave in [("ASYNC_MASTER", "ASYNC_FLUSH", False),
                               ("ASYNC_MASTER", "SYNC_FLUSH", False),
                               ("ASYNC_MASTER", "ASYNC_FLUSH", True),
                               ("ASYNC_MASTER", "SYNC_FLUSH", True),
                               ("SYNC_MASTER", "ASYNC_FLUSH", True),
                               ("SYNC_MASTER", "SYNC_FLUSH", True)]:
        run(role, flush, slave)
