"""Errors raised by the RPC endpoints, as RocketMQ's remoting exceptions."""

from __future__ import annotations


class RemotingError(Exception):
    """Base of every error raised by :mod:`protocol.trio`."""


class RemotingConnectError(RemotingError):
    """Could not connect to the address, or the connection was lost."""


class RemotingTimeoutError(RemotingError):
    """No response arrived within the request's timeout."""


class RemotingSendRequestError(RemotingError):
    """The request could not be written (connection closed while sending)."""
