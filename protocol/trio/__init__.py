"""The I/O edge of the protocol: symmetric RPC endpoints on trio streams, and what every
daemon runs on (logs.py: log files; daemon.py: config files, signals, start-up; metrics_http.py:
/metrics; tls.py, memory.py, busy_poll.py, worker_thread.py)."""

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
