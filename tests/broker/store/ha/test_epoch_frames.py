"""Epochs a master begins while a slave is connected: the epoch frame on the
wire, the master's choice of what to send (``HAConnection.epochs_due``), the
slave's check (``HAClient.on_epoch``), and two stores joined in plain Python
where the master begins its epoch after the slave's answer."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from broker.store.ha.epochs import (
    Epoch,
    EpochHistory,
    Verdict,
    begun_since,
    extended,
    judge,
)
from broker.store.ha.ha_client import HAClient
from broker.store.ha.ha_connection import HAConnection
from broker.store.ha.transfer import (
    EPOCH_FRAMES_FIELD,
    EPOCH_LENGTH,
    EPOCH_SIZE,
    TRANSFER_HEADER,
    HAProtocolError,
    TransferDecoder,
    encode_confirm,
    encode_epoch,
    encode_report,
    encode_transfer,
    make_hello,
)
from tests.broker.store.ha.test_replication import Link, put_some
from tests.broker.store.helpers import make_config, open_store

W = "a" * 32
E1 = Epoch(1, 0, "t1", W)
E2 = Epoch(2, 700, "t2", W)
E3 = Epoch(3, 900, "t3", W)


# ---- the frame --------------------------------------------------------------------------


def test_an_epoch_frame_between_data_frames_split_anywhere() -> None:
    wire = (encode_transfer(600, b"x" * 100) + encode_epoch(E2) + encode_transfer(700, b"yz")
            + encode_confirm(650) + encode_epoch(E3))
    for cut in range(len(wire) + 1):
        d = TransferDecoder(confirm=True, epochs=True)
        first = d.feed_joined(wire[:cut])
        early = d.take_epochs()
        got = first + d.feed_joined(wire[cut:])
        assert early + d.take_epochs() == [E2, E3], cut
        assert b"".join(b for _, b in got) == b"x" * 100 + b"yz"
        assert got[0][0] == 600
        assert d.confirm_offset == 650
        # an entry is handed over no later than the frames that follow it
        if cut >= len(encode_transfer(600, b"x" * 100)) + len(encode_epoch(E2)):
            assert E2 in early


def test_a_decoder_that_did_not_ask_refuses_epoch_frames() -> None:
    with pytest.raises(HAProtocolError, match="negative size"):
        TransferDecoder().feed(encode_epoch(E2))
    with pytest.raises(HAProtocolError, match="negative size"):
        TransferDecoder(confirm=True).feed(encode_epoch(E2))


@pytest.mark.parametrize(("body", "offset", "error"), [
    (b'[2,700,"t2","' + W.encode() + b'"]', 701, "names start 700"),
    (b'[2,700,"t-2","' + W.encode() + b'"]', 700, "bad epoch token"),
    (b'{"epoch":2}', 700, "epoch is"),
    (b"\xff\xfe", 700, "bad epoch frame"),
    (b"[0,700,\"t\",\"w\"]", 700, "bad epoch number"),
])
def test_a_malformed_epoch_frame_breaks_the_stream(body: bytes, offset: int,
                                                    error: str) -> None:
    d = TransferDecoder(epochs=True)
    wire = TRANSFER_HEADER.pack(offset, EPOCH_SIZE) + EPOCH_LENGTH.pack(len(body)) + body
    with pytest.raises(HAProtocolError, match=error):
        d.feed(wire)
    with pytest.raises(HAProtocolError, match="already failed"):
        d.feed(encode_transfer(0, b""))


def test_an_oversized_epoch_frame_is_refused_before_its_body_arrives() -> None:
    d = TransferDecoder(epochs=True)
    with pytest.raises(HAProtocolError, match="exceeds"):
        d.feed(TRANSFER_HEADER.pack(700, EPOCH_SIZE) + EPOCH_LENGTH.pack(60_000))


def test_a_slave_says_it_takes_epoch_frames() -> None:
    assert make_hello("b", "c", 1, "n").fields[EPOCH_FRAMES_FIELD] == "true"
    assert EPOCH_FRAMES_FIELD not in make_hello("b", "c", 1, "n", epoch_frames=False).fields


# ---- what the master sends, what the slave takes ----------------------------------------


def test_extended_is_begin_on_the_history_a_slave_knows() -> None:
    assert extended([], E2) == [E2]
    assert extended([E1], E2) == [E1, E2]
    # entries from its start on held no bytes: they give way (as EpochHistory.begin)
    assert extended([E1, E2], Epoch(3, 700, "t9", W)) == [E1, Epoch(3, 700, "t9", W)]
    assert extended([E1, E3], Epoch(4, 700, "t9", W)) == [E1, Epoch(4, 700, "t9", W)]
    with pytest.raises(ValueError, match="not numbered above"):
        extended([E1, E2], Epoch(2, 900, "t9", W))
    with pytest.raises(ValueError, match="more than 2"):
        extended([E1, E2], E3, max_entries=2)


E3_AT_700 = Epoch(3, 700, "t3", W)


@pytest.mark.parametrize(("current", "known", "new"), [
    ([E1, E2], [E1], [E2]),
    ([E1, E2, E3], [E1], [E2, E3]),
    ([E1, E2, E3], [E2], [E3]),  # the answer left out entries below the log's oldest byte
    ([E2, E3], [E1, E2], [E3]),  # the master's history dropped them since
    ([E1, E2], [E1, E2], []),
    ([E1], [], [E1]),
    ([E2], [Epoch(1, 700, "t1", W)], [E2]),  # epoch 1 held no bytes: epoch 2 replaces it
    ([E1, E3_AT_700], [E1, E2], [E3_AT_700]),  # so did epoch 2
    ([E1, E3], [E1, E2], None),  # epoch 2 held bytes, yet it is gone
    ([E1, Epoch(2, 700, "other", W)], [E1, E2], None),
    ([E1, Epoch(2, 700, "other", W), E3], [E1, E2], None),
])
def test_begun_since(current: list[Epoch], known: list[Epoch],
                     new: list[Epoch] | None) -> None:
    assert begun_since(current, known) == new
    if new is not None:  # sent in order, the slave ends as the master
        told = known
        for e in new:
            told = extended(told, e)
        n = min(len(told), len(current))
        assert told[len(told) - n:] == current[len(current) - n:]


class _NoStore:
    def get_max_phy_offset(self) -> int:
        return 0

    def get_min_phy_offset(self) -> int:
        return 0

    def get_raw(self, offset: int, max_bytes: int) -> bytes | None:
        return b""


def test_the_master_sends_each_new_epoch_once() -> None:
    conn = HAConnection(_NoStore())
    assert conn.epochs_due([E1, E2]) == []  # not tracked: a connection no slave's
    conn.epochs_known, conn.wants_epochs = [E1], True
    assert conn.epochs_due([E1]) == []
    assert conn.epochs_due([E1, E2]) == [E2]
    assert conn.epochs_due([E1, E2]) == []
    assert conn.epochs_due([E1, E2, E3]) == [E3]
    assert conn.epochs_known == [E1, E2, E3]


def test_a_slave_without_epoch_frames_or_off_the_history_must_say_hello_again() -> None:
    older = HAConnection(_NoStore())
    older.epochs_known = [E1]
    assert older.epochs_due([E1]) == []
    with pytest.raises(HAProtocolError, match="takes no epoch frames"):
        older.epochs_due([E1, E2])
    conn = HAConnection(_NoStore())
    conn.epochs_known, conn.wants_epochs = [E1, E2], True
    with pytest.raises(HAProtocolError, match="no longer continues"):
        conn.epochs_due([E1, E3])


def test_the_slave_refuses_an_epoch_that_does_not_follow() -> None:
    client = HAClient(_NoStore(), master_epochs=[E1, E2])  # type: ignore[arg-type]
    with pytest.raises(HAProtocolError, match="epoch frame refused"):
        client.on_epoch(Epoch(2, 800, "t9", W))
    assert client.master_epochs == [E1, E2]
    client.on_epoch(E3)
    assert client.master_epochs == [E1, E2, E3]


# ---- two stores: the epoch begins after the slave's answer -------------------------------


class EpochLink(Link):
    """A Link as the HA service wires it after an accepting answer: the slave
    knows the master's epochs of the answer, the master sends those begun
    since as epoch frames before its transfers, and the slave's history
    follows what it knows before each append."""

    def __init__(self, *args: object, frames: bool = True) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        answer = list(self.master.log_view().epochs)
        self.conn.epochs_known, self.conn.wants_epochs = answer, frames
        self.client.master_epochs = answer
        self.transfers = TransferDecoder(epochs=True)
        slave, client = self.slave, self.client
        client.before_append = lambda end: slave.epochs.follow(client.master_epochs, end)

    def step(self) -> bool:
        for epoch in self.conn.epochs_due(self.master.epochs.entries):
            self.to_slave += encode_epoch(epoch)
        report = self.client.report_due(self.now)
        if report is not None:
            self.to_master += encode_report(report)
        for off in self.reports.feed(self._deliver(self.to_master)):
            self.conn.on_report(off, self.now)
        transfer = self.conn.next_transfer(self.now)
        if transfer is not None:
            self.to_slave += encode_transfer(*transfer)
        frames = self.transfers.feed_joined(self._deliver(self.to_slave))
        for epoch in self.transfers.take_epochs():
            self.client.on_epoch(epoch)
        for off, data in frames:
            self.client.on_transfer(off, data, self.now)
        return True


def test_a_slave_connected_before_the_masters_new_epoch_is_accepted_at_its_next_hello(
        tmp_path: Path) -> None:
    """The sequence the chaos checker found: the master restarts, its slave
    says hello (the answer holds epoch 1 only), then the master begins epoch 2
    and takes writes; the slave stores them; at its next hello the master must
    accept it (before epoch frames, its history lacked epoch 2: refused)."""
    rng = random.Random(7)
    master = open_store(make_config(tmp_path / "m", cl_size=4096))
    slave = open_store(make_config(tmp_path / "s", cl_size=4096))
    master.epochs.begin(0)
    put_some(master, rng, 40)
    EpochLink(master, slave, 512, rng).sync()
    # the master restarts: the slave's hello is answered before its new epoch
    link = EpochLink(master, slave, 512, rng)
    link.sync()
    master.epochs.begin(master.get_max_phy_offset())
    put_some(master, rng, 40)
    link.sync()
    assert slave.epochs.entries == master.epochs.entries
    on_disk = EpochHistory(tmp_path / "s")
    on_disk.load()
    assert on_disk.entries == master.epochs.entries  # durable before the bytes
    # the slave's next hello (after a kill of either, or a timeout)
    assert judge(master.log_view(), slave.log_view(), master.crc_range).verdict \
        is Verdict.ACCEPT
    put_some(master, rng, 10)
    EpochLink(master, slave, 512, rng).sync()
    end = master.get_max_phy_offset()
    assert slave.get_max_phy_offset() == end
    for start in range(0, end, 4096):  # file by file
        stop = min(start + 4096, end)
        assert slave.crc_range(start, stop) == master.crc_range(start, stop)
    master.shutdown()
    slave.shutdown()


def test_an_epoch_that_held_no_bytes_gives_way_on_the_slave_too(tmp_path: Path) -> None:
    """The master's epoch 1 held no bytes when it restarted: its epoch 2
    replaces it (same start) on the master, and on the slave told of epoch 1."""
    rng = random.Random(8)
    master = open_store(make_config(tmp_path / "m", cl_size=4096))
    slave = open_store(make_config(tmp_path / "s", cl_size=4096))
    master.epochs.begin(0)
    link = EpochLink(master, slave, 512, rng)  # answered [epoch 1]
    link.sync()
    master.epochs.begin(0)
    assert [e.epoch for e in master.epochs.entries] == [2]
    put_some(master, rng, 30)
    link.sync()
    assert slave.epochs.entries == master.epochs.entries
    assert judge(master.log_view(), slave.log_view(), master.crc_range).verdict \
        is Verdict.ACCEPT
    master.shutdown()
    slave.shutdown()
