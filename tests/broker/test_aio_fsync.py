"""fdatasync through Linux AIO (broker/aio_fsync.py), on real files."""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker import aio_fsync
from broker.aio_fsync import AioFsync


@pytest.fixture
def aio() -> Iterator[AioFsync]:
    a = AioFsync.open(depth=4)
    if a is None:
        pytest.skip("Linux AIO is not available on this machine")
    yield a
    a.close()


def wait_results(a: AioFsync, n: int) -> list[tuple[int, int]]:
    """Reap until ``n`` results came, waiting on the eventfd (10 s at most)."""
    got: list[tuple[int, int]] = []
    poll = select.poll()
    poll.register(a.eventfd, select.POLLIN)
    while len(got) < n:
        assert poll.poll(10_000), "no fsync result within 10 s"
        got += a.reap()
    return got


def test_an_fsync_of_written_bytes_is_reported_on_the_eventfd(aio: AioFsync, tmp_path: Path) -> None:
    fd = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"x" * 4096, 0)
        token = aio.submit(fd)
        assert aio.in_flight == 1
        assert wait_results(aio, 1) == [(token, 0)]
        assert aio.in_flight == 0 and aio.reap() == []
    finally:
        os.close(fd)


def test_several_in_flight_and_the_depth_bound(aio: AioFsync, tmp_path: Path) -> None:
    fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT, 0o644) for i in range(5)]
    try:
        for fd in fds:
            os.pwrite(fd, b"y" * 100, 0)
        tokens = [aio.submit(fd) for fd in fds[:4]]
        assert len(set(tokens)) == 4
        with pytest.raises(OSError) as full:
            aio.submit(fds[4])
        assert full.value.errno == errno.EAGAIN
        assert sorted(wait_results(aio, 4)) == sorted((t, 0) for t in tokens)
        again = aio.submit(fds[4])  # room again once reaped
        assert wait_results(aio, 1) == [(again, 0)]
    finally:
        for fd in fds:
            os.close(fd)


def test_a_refused_submission_leaves_nothing_in_flight(aio: AioFsync, tmp_path: Path) -> None:
    fd = os.open(tmp_path / "gone", os.O_RDWR | os.O_CREAT, 0o644)
    os.close(fd)
    with pytest.raises(OSError) as exc:
        aio.submit(fd)
    assert exc.value.errno == errno.EBADF
    assert aio.in_flight == 0


def test_close_is_final_and_idempotent(tmp_path: Path) -> None:
    a = AioFsync.open()
    if a is None:
        pytest.skip("Linux AIO is not available on this machine")
    fd = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        a.submit(fd)
        a.close()  # waits for the fsync in flight
        a.close()
        with pytest.raises(OSError):
            a.submit(fd)
    finally:
        os.close(fd)


def test_no_context_where_the_syscall_numbers_are_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio_fsync.platform, "machine", lambda: "sparc64")
    assert AioFsync.open() is None
