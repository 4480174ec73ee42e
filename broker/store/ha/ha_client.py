"""HAClient, the slave's side of replication (RocketMQ's HAService.HAClient).

Pure: transfers in, reports out, time passed in. The broker's HA service
owns the socket to the master: it feeds decoded transfers
(``TransferDecoder``) to ``on_transfer`` and sends the offsets
``report_due`` returns (``encode_report``). One HAClient per connection:
a new one reports at once, so the master learns where to start.

A transfer must start exactly at the slave's own end, with one exception: a
slave whose log is empty at offset 0 (it reports 0, and its master then starts
at its oldest file) takes ``first_offset`` instead, and only it: where the
master said, in its answer to the hello (signed when the slave has
brokerAccessKey), that its log starts. A first transfer anywhere else, say far
past the master's end, would leave the slave with a log no master continues. Its bytes
go to ``store.append_replica`` unchanged, which dispatches them through the
store's reput cursor. Anything else raises a HAProtocolError and nothing is
appended: the connection closes and a new one resumes from the slave's end.

Batches cut records anywhere. Given ``max_record_size`` (the broker passes
its commit-log file size: no record is larger), the bytes of a record a
transfer cuts short are held here until the rest arrives, so the slave's
files only ever end with whole records. Recovery cannot tell a record cut
inside its topic or properties from a whole one (the body CRC covers only the
body): a slave killed with such a record at its end would recover past bytes
it never received, report that offset, and never be byte-identical again.
The held bytes die with the connection; the next one resumes from the
store's end, a record boundary.

``master_epochs`` is the master's epoch history as this connection knows it:
its answer's, extended by every epoch frame (``on_epoch``) the master sends
when it begins an epoch. ``before_append`` reads it, so the slave's own
history takes an epoch before the bytes it covers are written.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Protocol

from broker.store.ha.epochs import Epoch, extended
from broker.store.ha.ha_connection import DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_HOUSEKEEPING_INTERVAL
from broker.store.ha.transfer import HAProtocolError
from broker.store.status import PutMessageResult, PutMessageStatus, StoreError

_TOTAL_SIZE = struct.Struct(">i")  # every record, a BLANK too, starts with its size
_MIN_RECORD = 8  # a BLANK's header: total size and magic code


class TransferOffsetError(HAProtocolError):
    """A transfer does not start at the slave's end."""


class ReplicaAppendError(HAProtocolError):
    """The slave could not append a transfer (refused bytes, disk full):
    close, and resume from the slave's end once it can."""

    def __init__(self, message: str, status: PutMessageStatus | None = None) -> None:
        super().__init__(message)
        self.status = status


class SlaveStore(Protocol):
    def get_max_phy_offset(self) -> int: ...
    def get_min_phy_offset(self) -> int: ...
    def append_replica(self, start_offset: int,
                       data: bytes | bytearray | memoryview) -> PutMessageResult: ...


class HAClient:
    def __init__(self, store: SlaveStore,
                 heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
                 housekeeping_interval: float = DEFAULT_HOUSEKEEPING_INTERVAL,
                 max_record_size: int | None = None,
                 before_append: Callable[[int], object] | None = None,
                 first_offset: int | None = None,
                 master_epochs: list[Epoch] | None = None) -> None:
        self.store = store
        # the master's epochs as this connection knows them (its answer's, then
        # its epoch frames'): what ``before_append`` makes the slave's history follow
        self.master_epochs: list[Epoch] = list(master_epochs or ())
        # the only offset past its end an empty log takes (the master's min offset)
        self.first_offset = first_offset
        # called with the end of the bytes about to be appended, before they are
        # (the slave's epoch history follows its master's: epochs.EpochHistory.follow)
        self.before_append = before_append
        self.max_record_size = max_record_size  # None: cut records go to the store as they come
        self.held = bytearray()  # the start of a record a transfer cut short
        self.held_at = 0  # its commit-log offset (meaningful while ``held``)
        self.heartbeat_interval = heartbeat_interval
        self.housekeeping_interval = housekeeping_interval
        self.reported: int | None = None  # the offset last reported
        self.last_report: float | None = None
        self.last_heard: float | None = None  # when the master last sent anything
        self.master_offset = 0  # how far the master has sent (its nextTransferFromWhere)
        self.last_result: PutMessageResult | None = None  # of the latest append

    def on_transfer(self, offset: int, data: bytes | bytearray | memoryview,
                    now: float | None = None) -> None:
        """Apply one transfer from the master. A heartbeat (``data`` empty)
        appends nothing. While our log is empty at offset 0, frames start at
        ``first_offset`` (when given) instead of our end. Raises
        TransferOffsetError (nothing appended) when the frame does not start
        there, ReplicaAppendError when the store refuses
        or cannot take all of it. With ``max_record_size`` only whole records
        reach the store; the rest is held for the next transfer."""
        if now is not None:
            self.last_heard = now
        if self.held:
            end, empty = self.held_at + len(self.held), False
        else:
            end = self.store.get_max_phy_offset()
            empty = end == self.store.get_min_phy_offset()
        if empty and end == 0 and self.first_offset is not None:
            expected, where = self.first_offset, "is empty: its master's log starts at"
        else:
            expected, where = end, "ends at"
        if offset != expected:
            kind = "heartbeat" if not data else f"transfer of {len(data)} bytes"
            raise TransferOffsetError(
                f"master {kind} at offset {offset}, but the slave's log {where} {expected}")
        self.master_offset = max(self.master_offset, offset + len(data))
        if not data:
            return
        if self.max_record_size is not None:
            buf: bytes | bytearray | memoryview = data
            if self.held:  # the cut record goes first
                self.held += data
                buf, offset = self.held, self.held_at
            whole = whole_records(buf, self.max_record_size)
            if whole == 0:  # still no whole record: hold it all
                if buf is data:
                    self.held, self.held_at = bytearray(data), offset
                return
            # the whole records go on as a view (no copy); the rest is held
            rest = bytearray(memoryview(buf)[whole:])
            data = buf if whole == len(buf) else memoryview(buf)[:whole]
            self.held, self.held_at = rest, offset + whole
        if self.before_append is not None:
            self.before_append(offset + len(data))
        try:
            result = self.store.append_replica(offset, data)
        except StoreError as exc:
            raise ReplicaAppendError(f"replica bytes at offset {offset} refused: {exc}") from exc
        self.last_result = result
        reached = self.store.get_max_phy_offset()
        if reached != offset + len(data):
            status = result.put_message_status
            raise ReplicaAppendError(
                f"replica append at offset {offset} stopped at {reached} of "
                f"{offset + len(data)}: {status.value} {result.detail}".rstrip(), status)

    def on_epoch(self, epoch: Epoch) -> None:
        """The master began ``epoch`` (an epoch frame, before any byte it
        covers): the bytes from its start on are appended under it. Raises
        HAProtocolError when it does not follow the epochs known."""
        try:
            self.master_epochs = extended(self.master_epochs, epoch)
        except ValueError as exc:
            raise HAProtocolError(f"master epoch frame refused: {exc}") from None

    def report_due(self, now: float) -> int | None:
        """The offset to report now (and counted as reported): at once on a
        new connection, after every append, and every ``heartbeat_interval``
        otherwise; None when no report is due."""
        current = self.store.get_max_phy_offset()
        if (self.reported is None or current != self.reported or self.last_report is None
                or now - self.last_report >= self.heartbeat_interval):
            self.reported = current
            self.last_report = now
            return current
        return None

    def next_report_at(self) -> float | None:
        """When the next heartbeat report is due (None: at once)."""
        if self.last_report is None:
            return None
        return self.last_report + self.heartbeat_interval

    def connected(self, now: float) -> None:
        """Start the silence clock of a new connection."""
        self.last_heard = now

    def idle_too_long(self, now: float) -> bool:
        """Whether the master has been silent for ``housekeeping_interval``
        (it heartbeats every ``haSendHeartbeatInterval``): close and reconnect."""
        return self.last_heard is not None and now - self.last_heard >= self.housekeeping_interval


def whole_records(data: bytes | bytearray | memoryview, max_record_size: int) -> int:
    """How many bytes at the start of ``data`` (which starts at a record) are
    whole records. A size no record can have (below a BLANK's header, over
    ``max_record_size``) counts everything as whole: the store refuses it."""
    pos, n = 0, len(data)
    while pos + _TOTAL_SIZE.size <= n:
        (total,) = _TOTAL_SIZE.unpack_from(data, pos)
        if total < _MIN_RECORD or total > max_record_size:
            return n
        if pos + total > n:
            break
        pos += total
    return pos
