"""Errors raised by the sans-IO protocol layer.

One base, ``ProtocolError``, split the way h11 does it: ``LocalProtocolError``
when our own code misuses the protocol (e.g. encoding an oversize frame),
``RemoteProtocolError`` when the peer sent something we cannot accept.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base of every error raised by :mod:`protocol`."""


class LocalProtocolError(ProtocolError):
    """We tried to do something the protocol does not allow."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that violate the protocol."""


class MalformedRequestError(RemoteProtocolError):
    """A request whose code and opaque were read, and whose rest the codec
    refused: it can be answered (SYSTEM_ERROR) instead of closing the
    connection. Raised only for requests that expect an answer (not for
    responses or oneway requests)."""

    def __init__(self, message: str, code: int, opaque: int) -> None:
        super().__init__(message)
        self.code = code
        self.opaque = opaque


class FrameTooLargeError(RemoteProtocolError):
    """A frame declared a length above the configured maximum."""


class CorruptRecordError(ProtocolError):
    """A commit-log record failed its magic, size or CRC check."""
