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


class FrameTooLargeError(RemoteProtocolError):
    """A frame declared a length above the configured maximum."""


class CorruptRecordError(ProtocolError):
    """A commit-log record failed its magic, size or CRC check."""
