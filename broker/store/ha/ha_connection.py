"""HAConnection, the master's side of one slave (RocketMQ's HAConnection).

Pure: reports in, transfers out, time passed in. The broker's HA service owns
the socket: it feeds the slave's reports (``ReportDecoder``) to
``on_report`` and sends what ``next_transfer`` returns (``encode_transfer``).

- The first report says where the slave's log ends, so where the transfer
  starts. A slave with an empty log (report 0) gets everything the master
  still holds, from its oldest file (RocketMQ starts such a slave at the
  master's last file; a full copy keeps the slave byte-identical).
- Every report is the slave's acknowledged offset (``acked_offset``), which
  releases SYNC_MASTER sends (``OffsetWaiters.advance``).
- A report past the master's end ("slave log longer than master"), or below
  the oldest offset the master still holds, makes the slave invalid: it can
  never append at the right place, so ``on_report`` raises
  SlaveInvalidError and the connection must close. (The handshake before it,
  epochs.judge, has already checked that the slave's log is a prefix of the
  master's.)
- Epochs the master begins while the slave is connected (epochs.py: a
  restarted master begins its epoch when it takes writes, often after its
  slaves said hello) reach the slave before any byte they cover
  (``epochs_due``, before every ``next_transfer``): a slave that takes epoch
  frames gets them in the stream; one that does not is closed, and its next
  hello's answer holds them. Without this the slave would store the new
  epoch's bytes under the old history, and at its next hello the master
  would find the histories apart and refuse it for good.
- A slave that has bytes sent to it and does not acknowledge any of them for
  ``haSlaveSilentMs`` is silent (``silent``): SYNC_MASTER sends stop waiting
  for it (SLAVE_NOT_AVAILABLE) until it acknowledges again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from broker.store.ha.epochs import Epoch, begun_since
from broker.store.ha.transfer import HAProtocolError

DEFAULT_HEARTBEAT_INTERVAL = 5.0  # haSendHeartbeatInterval, 5 s
DEFAULT_TRANSFER_BATCH_SIZE = 32 * 1024  # haTransferBatchSize, 32 KiB
DEFAULT_HOUSEKEEPING_INTERVAL = 20.0  # haHousekeepingInterval, 20 s
DEFAULT_SLAVE_FALLBEHIND_MAX = 256 * 1024 * 1024  # haSlaveFallbehindMax, 256 MiB


class SlaveInvalidError(HAProtocolError):
    """The slave's log cannot continue the master's: refuse it."""


class MasterStore(Protocol):
    def get_max_phy_offset(self) -> int: ...
    def get_min_phy_offset(self) -> int: ...
    def get_raw(self, offset: int, max_bytes: int) -> bytes | None: ...


class HAConnection:
    def __init__(self, store: MasterStore, batch_size: int = DEFAULT_TRANSFER_BATCH_SIZE,
                 heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
                 housekeeping_interval: float = DEFAULT_HOUSEKEEPING_INTERVAL) -> None:
        if batch_size <= 0:
            raise ValueError("haTransferBatchSize must be positive")
        self.store = store
        self.batch_size = batch_size
        self.heartbeat_interval = heartbeat_interval
        self.housekeeping_interval = housekeeping_interval
        self.request_offset: int | None = None  # the first report: where the slave's log ended
        self.acked_offset = 0  # the slave's latest report
        self.next_offset: int | None = None  # next byte to send (nextTransferFromWhere)
        self.invalid: str | None = None  # why the slave is refused
        self.last_sent: float | None = None  # when a transfer or heartbeat last went out
        self.last_heard: float | None = None  # when a report last came in
        # since when bytes sent wait for an acknowledgement with no progress (None:
        # everything sent is acknowledged)
        self.unacked_since: float | None = None
        # set by the HA service once it saw ``silent`` hold after letting the
        # reports already received in; cleared by any acknowledgement progress
        self.silent_confirmed = False
        # the slave's brokerId from its hello (controller mode counts acknowledgements
        # by SyncStateSet member); None for a connection that is no slave's
        self.broker_id: int | None = None
        # controller mode: the slave takes confirm offsets; the last one sent it
        self.wants_confirm = False
        self.confirm_sent = -1
        # the master's epochs as the slave knows them (its answer's, then every
        # epoch frame sent); None: not tracked (a connection no slave's)
        self.epochs_known: list[Epoch] | None = None
        self.wants_epochs = False  # the slave takes epoch frames (its hello said so)

    # ---- reports in ------------------------------------------------------------------

    def on_report(self, offset: int, now: float | None = None) -> None:
        """The slave reports its max commit-log offset. Raises SlaveInvalidError
        for a slave that cannot follow this master, HAProtocolError for a
        report no slave sends (going back, or past what was sent)."""
        if now is not None:
            self.last_heard = now
        if self.invalid is not None:
            raise SlaveInvalidError(self.invalid)
        master_max = self.store.get_max_phy_offset()
        if offset > master_max:
            raise self._refuse(
                f"slave log longer than master: the slave reports offset {offset}, "
                f"the master's log ends at {master_max}"
            )
        if self.next_offset is None:
            master_min = self.store.get_min_phy_offset()
            if offset == 0:
                start = master_min
            elif offset < master_min:
                raise self._refuse(
                    f"slave too far behind: it reports offset {offset}, the master's oldest "
                    f"file starts at {master_min}"
                )
            else:
                start = offset
            self.request_offset = offset
            self.next_offset = start
        else:
            if offset < self.acked_offset:
                raise HAProtocolError(
                    f"slave went back from offset {self.acked_offset} to {offset}")
            if offset > self.next_offset:
                raise HAProtocolError(
                    f"slave reports offset {offset} past what was sent ({self.next_offset})")
        if self.next_offset is not None and offset >= self.next_offset:
            self.unacked_since = None
            self.silent_confirmed = False
        elif offset > self.acked_offset and now is not None:
            self.unacked_since = now  # progress: the silence clock starts again
            self.silent_confirmed = False
        self.acked_offset = offset

    def _refuse(self, reason: str) -> SlaveInvalidError:
        self.invalid = reason
        return SlaveInvalidError(reason)

    # ---- transfers out ---------------------------------------------------------------

    def epochs_due(self, current: list[Epoch]) -> list[Epoch]:
        """The epochs of the master's history ``current`` the slave does not
        know yet, counted as known: send them (epoch frames) before the next
        transfer. Raises HAProtocolError when the slave must say hello again
        instead: it takes no epoch frames, or ``current`` no longer continues
        what it knows."""
        known = self.epochs_known
        if known is None or (known and current[-1:] == known[-1:]):
            return []
        new = begun_since(current, known)
        if new is None:
            raise HAProtocolError(
                "the master's epoch history no longer continues the one this slave was "
                "told: the slave says hello again")
        if new and not self.wants_epochs:
            raise HAProtocolError(
                f"the master began {new[-1]} and this slave takes no epoch frames (an "
                "older slave): it says hello again to learn it")
        self.epochs_known = list(current)  # what the slave knows once it took them
        return new

    def next_transfer(self, now: float) -> tuple[int, bytes] | None:
        """What to send now: (offset, up to batch_size bytes within one
        commit-log file), a heartbeat (offset, b"") when nothing went out for
        ``heartbeat_interval``, or None (nothing yet: before the first report,
        or idle). Raises SlaveInvalidError once the bytes to send are cleaned
        from the master (the slave fell behind its oldest file)."""
        nxt = self.next_offset
        if nxt is None or self.invalid is not None:
            return None
        if nxt < self.store.get_max_phy_offset():
            data = self.store.get_raw(nxt, self.batch_size)
            if data is None:
                raise self._refuse(
                    f"slave too far behind: offset {nxt} is no longer on the master "
                    f"(oldest {self.store.get_min_phy_offset()})"
                )
            if data:
                self.next_offset = nxt + len(data)
                self.last_sent = now
                if self.unacked_since is None:
                    self.unacked_since = now
                return nxt, data
        if self.last_sent is None or now - self.last_sent >= self.heartbeat_interval:
            self.last_sent = now
            return nxt, b""
        return None

    def next_heartbeat_at(self) -> float | None:
        """When an idle connection sends its next heartbeat (None: at once,
        or not before the first report)."""
        if self.next_offset is None or self.last_sent is None:
            return None
        return self.last_sent + self.heartbeat_interval

    # ---- figures ---------------------------------------------------------------------

    def lag(self, master_max: int) -> int:
        """Bytes the slave has not acknowledged."""
        return max(0, master_max - self.acked_offset)

    def silent(self, now: float, silent_s: float) -> bool:
        """Whether bytes sent have waited ``silent_s`` with no acknowledgement
        progress (a frozen or stuck slave)."""
        return (silent_s > 0 and self.unacked_since is not None
                and now - self.unacked_since >= silent_s)

    def idle_too_long(self, now: float) -> bool:
        """Whether the slave has been silent for ``housekeeping_interval``
        since its last report (or since ``connected``): close the connection."""
        return self.last_heard is not None and now - self.last_heard >= self.housekeeping_interval

    def connected(self, now: float) -> None:
        """Start the silence clock of a new connection."""
        self.last_heard = now


def push_to_slave_max_offset(connections: Iterable[HAConnection]) -> int:
    """The highest offset any valid slave acknowledged (push2SlaveMaxOffset)."""
    return max((c.acked_offset for c in connections if c.invalid is None), default=0)


def is_slave_ok(connections: Iterable[HAConnection], master_put_where: int,
                fallbehind_max: int = DEFAULT_SLAVE_FALLBEHIND_MAX) -> bool:
    """RocketMQ's HAService.isSlaveOK: a slave is connected and the best one is
    less than ``fallbehind_max`` bytes behind ``master_put_where`` (the end
    of the message a SYNC_MASTER send waits for); a slave confirmed silent
    (``silent_confirmed``) does not count. False: SLAVE_NOT_AVAILABLE."""
    valid = [c for c in connections if c.invalid is None and c.next_offset is not None
             and not c.silent_confirmed]
    if not valid:
        return False
    return master_put_where - push_to_slave_max_offset(valid) < fallbehind_max
