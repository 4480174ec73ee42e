"""Durable file replacement shared by the daemons: ``write_atomically`` (a temporary
file in the same directory, fsync'd, renamed over the target, the directory fsync'd)
and ``fsync_dir``. Blocking: call from a worker thread."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """fsync a directory, so a rename or a new file in it survives a crash."""
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_atomically(path: Path, data: bytes | str, new_mode: int = 0o644) -> float:
    """Replace ``path`` with ``data`` (text is written as UTF-8): a reader sees the old
    file or the new one, and after a crash the new one once this returned. The file
    keeps its mode; a new one gets ``new_mode``. The parent directory is made when
    missing. Returns the new file's mtime. OSError when it cannot be written (the
    temporary file is removed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = new_mode
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path.stat().st_mtime
