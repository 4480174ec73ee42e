"""Controller mode's dispatch limit: records past the confirm offset stay in
the commit log (no consume-queue entry, no index, no long-poll wake-up) until
it passes them; the limit survives a restart and a kill -9 of the process
holding the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.store import DefaultMessageStore
from broker.store.ha.confirm import CONFIRM_FILE, ConfirmFile
from broker.store.status import StoreError
from protocol.record import decode_record
from tests.broker.store.helpers import inner, make_config, open_store


def controller_config(root: Path) -> BrokerConfig:
    config = make_config(root, cl_size=1 << 16, cq_entries=100)
    config.enable_controller_mode = True
    return config


def put(store: DefaultMessageStore, i: int) -> int:
    """Store message ``i`` (queue 0 of T); its end offset."""
    r = store.put_message(inner("T", 0, f"m{i}".encode() * 10, keys=f"k{i}"))
    assert r.ok and r.append_result is not None, r
    return r.append_result.wrote_offset + r.append_result.wrote_bytes


def visible(store: DefaultMessageStore) -> int:
    return store.get_max_offset_in_queue("T", 0)


def test_records_wait_for_the_confirm_offset_and_puts_go_on(tmp_path: Path) -> None:
    store = open_store(controller_config(tmp_path))
    woken: list[tuple[str, int, int]] = []
    store.dispatch_listeners.append(lambda t, q, n: woken.append((t, q, n)))
    ends = [put(store, i) for i in range(6)]
    assert visible(store) == 0 and not woken
    assert not store.dispatch_behind  # waiting by design is not a failure
    # a limit inside record 3: records 0..2 only
    assert store.set_dispatch_limit(ends[2] + 5) == 3
    assert visible(store) == 3 and woken == [("T", 0, 3)]
    assert store.reput_offset == ends[2]
    assert store.set_dispatch_limit(ends[1]) == 0  # it never goes back
    assert store.dispatch_limit == ends[2] + 5
    assert store.set_dispatch_limit(ends[-1]) == 3 and visible(store) == 6
    assert store.query_message("T", "k5", 10, 0, 2**62)  # indexed too
    store.shutdown()


def test_outside_controller_mode_nothing_changes(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path, cl_size=1 << 16, cq_entries=100))
    assert store.dispatch_limit is None
    put(store, 0)
    assert visible(store) == 1
    with pytest.raises(StoreError):
        store.set_dispatch_limit(10)
    store.shutdown()
    assert not (tmp_path / CONFIRM_FILE).exists()


def test_a_restart_keeps_what_the_confirm_offset_did_not_cover(tmp_path: Path) -> None:
    config = controller_config(tmp_path)
    store = open_store(config)
    ends = [put(store, i) for i in range(5)]
    store.set_dispatch_limit(ends[1])
    store.shutdown()
    assert ConfirmFile(tmp_path).load() == (ends[1], None)
    store = open_store(config)
    assert store.dispatch_limit == ends[1] and visible(store) == 2
    assert store.reput_offset == ends[1]
    # queue offsets continue past the records that wait
    assert put(store, 5) > ends[-1]
    assert store.set_dispatch_limit(store.get_max_phy_offset()) == 4
    assert pulled(store) == [f"m{i}".encode() * 10 for i in range(6)]
    store.shutdown()


def pulled(store: DefaultMessageStore) -> list[bytes]:
    r = store.get_message("g", "T", 0, 0, 100, None)
    return [decode_record(b, 0).body for b in r.buffers]


def test_a_damaged_confirm_file_holds_everything_past_the_queues(tmp_path: Path) -> None:
    config = controller_config(tmp_path)
    store = open_store(config)
    ends = [put(store, i) for i in range(3)]
    store.set_dispatch_limit(ends[0])
    store.shutdown()
    (tmp_path / CONFIRM_FILE).write_bytes(b"\x00" * 12)
    store = open_store(config)
    assert store.dispatch_limit == 0 and visible(store) == 1
    store.set_dispatch_limit(ends[-1])
    assert visible(store) == 3
    store.shutdown()


CHILD = """
import sys, time
from pathlib import Path
from typing import Any
from broker.store import DefaultMessageStore, StoreConfig
from tests.broker.store.test_confirm_dispatch import controller_config, put
store = DefaultMessageStore(StoreConfig.from_broker(controller_config(Path(sys.argv[1]))))
assert store.load()
store.start()
ends = [put(store, i) for i in range(20)]
store.set_dispatch_limit(ends[4])
store.flush_consume_queues()  # the confirm offset on disk: ends[4]
store.set_dispatch_limit(ends[9])  # dispatched, not yet on disk
print("READY", ends[4], ends[9], ends[-1], flush=True)
time.sleep(60)
"""


def test_kill_9_leaves_no_unconfirmed_record_dispatched(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout is not None
        line = ""
        for _ in range(100):  # the store's own log lines come first
            line = proc.stdout.readline()
            if not line or line.startswith("READY"):
                break
        persisted, dispatched, end = map(int, line.split()[1:])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    store = open_store(controller_config(tmp_path))
    assert store.get_max_phy_offset() == end
    assert store.dispatch_limit == persisted
    # what was confirmed before the kill may be visible; nothing past it is
    assert 5 <= visible(store) <= 10
    assert store.reput_offset <= dispatched
    store.set_dispatch_limit(end)
    assert visible(store) == 20
    assert pulled(store) == [f"m{i}".encode() * 10 for i in range(20)]
    store.shutdown()


def test_the_scan_reads_no_record_past_the_confirm_offset(tmp_path: Path) -> None:
    """Records waiting past the limit are not read at each move of it: the
    scan is bounded by the limit (a record it cuts is the walk's last step)."""
    store = open_store(controller_config(tmp_path))
    scanned: list[int] = []
    real = store._scan_records

    def counting(buf: Any, pos: int, limit: int, *rest: Any) -> Any:
        groups, stop = real(buf, pos, limit, *rest)
        scanned.append(sum(len(g) for g, _after in groups))
        return groups, stop
    store._scan_records = counting
    ends = [put(store, i) for i in range(50)]
    for k in range(10):  # the limit moves one record at a time, inside the next one
        assert store.set_dispatch_limit(ends[k] + 3) == 1
        assert store.reput_offset == ends[k]
    assert sum(scanned) == 10 and visible(store) == 10
    assert store.set_dispatch_limit(ends[-1]) == 40 and visible(store) == 50
    assert sum(scanned) == 50
    store.shutdown()


def test_a_limit_inside_a_record_the_slaves_log_cuts(tmp_path: Path) -> None:
    """A slave's confirm offset may fall inside the record its log's end cuts
    (the master sends bytes in batches that split records): the records
    before it are dispatched, that one once it is whole and covered."""
    master = open_store(controller_config(tmp_path / "m"))
    ends = [put(master, i) for i in range(4)]
    data = master.get_raw(0, ends[-1])
    assert data is not None and len(data) == ends[-1]
    slave = open_store(controller_config(tmp_path / "s"))
    cut = ends[2] + 7  # record 3 cut by the slave's end
    assert slave.append_replica(0, data[:cut]).ok
    assert visible(slave) == 0
    assert slave.set_dispatch_limit(ends[2] + 3) == 3  # inside record 3, which is cut
    assert slave.reput_offset == ends[2] and visible(slave) == 3
    assert slave.append_replica(cut, data[cut:]).ok
    assert visible(slave) == 3  # whole now, not yet covered
    assert slave.set_dispatch_limit(ends[3]) == 1 and visible(slave) == 4
    master.shutdown()
    slave.shutdown()


def test_a_limit_inside_the_padding_at_a_files_end(tmp_path: Path) -> None:
    """The confirm offset inside the padding that ends a commit-log file: the
    records before it are dispatched, the padding and the next file's records
    once the offset passes them."""
    store = open_store(controller_config(tmp_path))  # 64 KiB commit-log files
    ends: list[int] = []
    while not ends or ends[-1] < 1 << 16:
        ends.append(put(store, len(ends)))
    first_next = next(i for i, e in enumerate(ends) if e > 1 << 16)
    last_in_file = ends[first_next - 1]
    assert last_in_file < 1 << 16  # padding from there to the file's end
    assert store.set_dispatch_limit(last_in_file + 5) == first_next
    assert store.reput_offset == last_in_file
    assert store.set_dispatch_limit((1 << 16) - 1) == 0
    assert store.reput_offset == last_in_file
    assert store.set_dispatch_limit(ends[-1]) == len(ends) - first_next
    assert visible(store) == len(ends) and store.reput_offset == ends[-1]
    store.shutdown()
