"""The I/O edge of the protocol: symmetric RPC endpoints on trio streams."""

from protocol.trio.client import RemotingClient, split_addr
from protocol.trio.connection import HandlerTable, RemotingConnection
from protocol.trio.errors import (
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from protocol.trio.server import RemotingServer

__all__ = [
    "HandlerTable",
    "RemotingClient",
    "RemotingConnectError",
    "RemotingConnection",
    "RemotingError",
    "RemotingSendRequestError",
    "RemotingServer",
    "RemotingTimeoutError",
    "split_addr",
]
