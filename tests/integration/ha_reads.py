"""Reading a master's and a slave's state from outside for the HA tests:
commit-log bytes straight from the store files (mapped, so a running broker's
writes are visible), queue offsets and messages over the wire by address."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import trio

from broker.pull_processor import FLAG_SUBSCRIPTION
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    GetMaxOffsetRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from protocol.record import decode_records
from protocol.trio.client import RemotingClient

READER_GROUP = "ha-reader"


def commit_log_files(store: Path) -> list[Path]:
    """The commit-log files of a store, oldest first."""
    return sorted(p for p in (store / "commitlog").iterdir() if p.name.isdigit())


def commit_log_bytes(store: Path, file_size: int) -> bytes:
    """The whole commit log, trailing zeros cut; its files must be contiguous."""
    files = commit_log_files(store)
    starts = [int(p.name) for p in files]
    assert starts == [i * file_size for i in range(len(files))], f"commit-log files {starts}"
    return b"".join(p.read_bytes() for p in files).rstrip(b"\x00")


def log_end(store: Path) -> int:
    """Roughly where a store's commit log ends: the end of the non-zero bytes
    of its newest non-empty file (0 for none)."""
    for p in reversed(commit_log_files(store)):
        data = p.read_bytes().rstrip(b"\x00")
        if data:
            return int(p.name) + len(data)
    return 0


def record_at(store: Path, offset: int, file_size: int) -> bytes:
    """The record at commit-log ``offset`` as the store's file holds it
    (as many bytes as its size field says; b"" where nothing is written)."""
    path = store / "commitlog" / str(offset - offset % file_size).zfill(20)
    if not path.exists():
        return b""
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = offset % file_size
        (size,) = struct.unpack(">i", os.pread(fd, 4, pos))
        if size <= 0:
            return b""
        return os.pread(fd, size, pos)
    finally:
        os.close(fd)


async def queue_max_offset(rc: RemotingClient, addr: str, topic: str, queue_id: int) -> int:
    """GET_MAX_OFFSET of one queue from the broker at ``addr``."""
    h = GetMaxOffsetRequestHeader(topic, queue_id)
    r = await rc.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                                      h.to_fields()), 5)
    assert r.code == ResponseCode.SUCCESS, r
    return OffsetResponseHeader.from_fields(r.ext_fields).offset


async def max_offsets(rc: RemotingClient, addr: str, topic: str, queues: int) -> list[int]:
    return [await queue_max_offset(rc, addr, topic, q) for q in range(queues)]


async def topic_readable(rc: RemotingClient, addr: str, topic: str) -> bool:
    """The broker at ``addr`` knows ``topic`` (a slave: copied from its master)."""
    h = PullMessageRequestHeader(READER_GROUP, topic, 0, 0, 1, sys_flag=FLAG_SUBSCRIPTION)
    r = await rc.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE,
                                                      h.to_fields()), 5)
    return r.code != ResponseCode.TOPIC_NOT_EXIST


async def drain_queue(rc: RemotingClient, addr: str, topic: str, queue_id: int, end: int,
                      batch: int = 32, timeout: float = 30) -> list[bytes]:
    """Every body of queue ``queue_id`` from offset 0 up to ``end`` (its max
    offset), read straight from the broker at ``addr``."""
    bodies: list[bytes] = []
    offset = 0
    with trio.fail_after(timeout):
        while offset < end:
            h = PullMessageRequestHeader(READER_GROUP, topic, queue_id, offset, batch,
                                         sys_flag=FLAG_SUBSCRIPTION)
            r = await rc.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE,
                                                              h.to_fields()), 5)
            if r.code == ResponseCode.SUCCESS:
                assert r.body is not None
                bodies += [m.body for m in decode_records(r.body)]
                offset = PullMessageResponseHeader.from_fields(r.ext_fields).next_begin_offset
            else:
                await trio.sleep(0.05)
    return bodies
