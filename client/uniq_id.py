"""The client's ``UNIQ_KEY`` ids: one generator for the process (protocol/message_id.py lays
the ids out), prefixed with this host's address, looked up once, at import."""

from __future__ import annotations

import socket

from protocol.message_id import UniqIdGenerator


def local_ip() -> str:
    """This host's IPv4 address as its name resolves (a look-up: may block), else
    127.0.0.1."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


_default = UniqIdGenerator(local_ip())


def create_uniq_id() -> str:
    return _default.next_id()


def create_uniq_ids(n: int) -> list[str]:
    """``n`` ids, as ``n`` calls of ``create_uniq_id`` would give (a batch's)."""
    return _default.next_ids(n)


__all__ = ["create_uniq_id", "create_uniq_ids", "local_ip"]
