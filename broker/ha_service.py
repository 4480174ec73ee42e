"""HAService: the trio edge of master/slave replication (RocketMQ's HAService).

The cores are pure (broker/store/ha/): ``HAConnection`` decides what a master
sends one slave, ``HAClient`` applies what a slave receives, ``transfer.py``
frames the bytes. This module owns the sockets and the time:

- Master: a listener on ``haListenPort``; per slave, a reader task (reports
  in, ``HAConnection.on_report``; every report advances the SYNC_MASTER
  waiters) and a writer task (``next_transfer`` out, woken by new commit-log
  data or its heartbeat time). A slave silent for ``haHousekeepingInterval``
  is closed, and so is one that does not take a send within it.
- What peers reaching the port can make a master hold is bounded: at most
  ``haMaxConnections`` connections (``Slots``: those still in their hello are
  dropped for newer ones, a flooding host's first), and SEND_BUDGET bytes of
  prepared sends across all of them. A hello answers a challenge the master
  sent on its connection (transfer.py): no replay, and nothing remembered.
- A slave with brokerAccessKey acts on its master's answer only once the
  answer's signature (the same account's secret, over the slave's own
  challenge and every byte of the answer) checks: a fake master cannot tell it
  where its log starts, what epochs it holds, or to discard or send its log.
- Slave: one task connecting to the master's HA address (``haMasterAddress``
  or the name server's answer), reporting its max offset at connect, after
  every append and every ``haSendHeartbeatInterval``, and appending what
  arrives. Any failure closes the connection, is logged, and the slave
  reconnects after a back-off, resuming from its own max offset.
- SYNC_MASTER: ``wait_slave(next_offset)`` returns a waiter (one
  ``OffsetWaiters`` for every send, released by the best slave's
  acknowledgement), or one finished SLAVE_NOT_AVAILABLE when no slave is
  within ``haSlaveFallbehindMax``.

Nothing here runs on a send's path but ``wait_slave`` and ``notify_new_data``:
a slow or frozen slave never slows sends to an ASYNC_MASTER.

A replica only ever extends the log it already has (broker/store/ha/epochs.py):

- The slave's hello describes its log (store id, epoch history, offsets, the
  checksum of its last bytes); the master judges it (``epochs.judge``) and
  answers before any transfer: accept (the slave's log is a prefix of its
  own), or refuse with the reason (diverged, too old), logged on both sides,
  shown in brokerStatus and counted (``refused``).
- A master whose own log is a prefix of a longer slave's (its disk was
  replaced, it came back from an old copy) is behind: it refuses writes (the
  store's write fence, naming the cause) until the slave's log is copied back
  (``recoverFromSlave=true``: over the same connection the slave sends and the
  master appends, then it serves) or the slave discards its log
  (``haDiscardLog=true`` on the slave).
- A master starting takes no writes until the slaves the name servers list
  have described their logs, or ``haMasterStartWaitMs`` passed
  (``start_writes``); then it begins a new epoch at its log's end.
- SYNC_MASTER: a slave with bytes unacknowledged for ``haSlaveSilentMs`` is
  unavailable: sends waiting on it end SLAVE_NOT_AVAILABLE at once.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog
import trio

from broker.config import BrokerConfig, BrokerRole
from broker.store import DefaultMessageStore
from broker.store.ha.epochs import (
    Epoch,
    LogView,
    Verdict,
    common_point,
    judge,
    lineage_problem,
)
from broker.store.ha.ha_client import HAClient
from broker.store.ha.ha_connection import HAConnection, is_slave_ok, push_to_slave_max_offset
from broker.store.ha.slots import Slot, Slots
from broker.store.ha.sync_state import (
    CatchUp,
    Proposal,
    SyncStateDecider,
    SyncStateHolder,
    SyncStateSet,
    members_acked,
    needed_acks,
    offset_held_by,
    replicas_short,
)
from broker.store.ha.transfer import (
    CONTROLLER_MODE_FIELD,
    EPOCH_FRAMES_FIELD,
    GREETING,
    RECOVER,
    Answer,
    AnswerDecoder,
    AnswerFrame,
    AnswerKey,
    ChallengeDecoder,
    GreetingDecoder,
    HandshakeVersionError,
    HAProtocolError,
    Hello,
    HelloCheck,
    HelloDecoder,
    ReportDecoder,
    TransferDecoder,
    answer_key,
    check_answer,
    check_hello,
    encode_answer,
    encode_challenge,
    encode_confirm,
    encode_epoch,
    encode_hello,
    encode_report,
    encode_transfer,
    hello_broker_id,
    hello_log_view,
    make_hello,
    new_challenge,
)
from broker.store.offset_waiters import Waiter
from broker.store.status import PutMessageStatus
from broker.waiting_sends import WaitingSends
from protocol.trio.client import split_addr
from protocol.trio.daemon import first_leaf
from protocol.trio.errors import RemotingConnectError
from protocol.trio.server import peer_name
from protocol.trio.service import Guard, describe
from protocol.trio.tls import accept, connect

if TYPE_CHECKING:
    from acl.plain import AclConfig

RECEIVE_CHUNK = 256 * 1024
HELLO_TIMEOUT = 10.0  # s a new slave connection has to send its hello
SEND_COALESCE = 2 * 1024 * 1024  # bytes of transfers gathered into one send
# controller mode: s a moved confirm offset with no transfer or heartbeat to ride
# waits for one before it goes out alone. Every slave report moves it, and each
# frame sent alone costs a send here and a receive, a dispatch and a report check
# on each slave: under load it rides the next transfer instead; idle, the slaves'
# consumers see it this much later (safe: a lagging confirm offset only holds
# records back).
CONFIRM_LINGER = 0.005
# bytes of transfers all HA connections together hold prepared (read from the log,
# framed, not yet taken by the kernel): 8 slaves catching up at full speed. A
# connection past it sends one transfer (haTransferBatchSize) at a time, so the
# most held is this plus haMaxConnections transfers, whatever the peers read.
SEND_BUDGET = 16 * 1024 * 1024
RECONNECT_BACKOFF = 1.0
REFUSED_BACKOFF = 2.0  # s before a slave whose log was refused says hello again
ANSWER_TIMEOUT = 10.0  # s a slave waits for the master's answer to its hello
STARTING = ("the master is starting: it takes writes once its slaves have described "
            "their logs (at most haMasterStartWaitMs)")
MAX_REFUSALS_SHOWN = 8
MAX_PENDING_HELLOS = 32  # HA connections still in their hello (each may buffer 64 KiB)
SLAVE_TABLES_TIMEOUT = 10.0  # s for a master to take a slave's offsets or tables
# what a network or a peer can do to an HA connection: logged without a traceback
EXPECTED_FAILURES = (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                     trio.TooSlowError, HAProtocolError, ValueError)


class LogRefused(HAProtocolError):
    """The master refused this slave's log (or the slave its master's)."""

    def __init__(self, reason: str, verdict: str) -> None:
        super().__init__(reason)
        self.verdict = verdict


class LogTruncated(HAProtocolError):
    """Controller mode: this replica cut its log to the point it shares with
    its master; the next hello follows from there."""


class MasterUnproven(HAProtocolError):
    """The master's answer does not prove it holds this slave's account secret."""


class HAService:
    def __init__(self, config: BrokerConfig, store: DefaultMessageStore) -> None:
        self.config = config
        self.store = store
        self.log = structlog.get_logger("broker.ha").bind(broker=config.broker_name)
        self.connections: set[HAConnection] = set()
        self.sends = WaitingSends(PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                                  config.sync_flush_timeout / 1000,
                                  Guard(self.log, "slave acks"), "flush slave timeout")
        self.waiters = self.sends.waiters
        self.heartbeat = config.ha_send_heartbeat_interval / 1000
        self.housekeeping = config.ha_housekeeping_interval / 1000
        self._data = trio.Event()
        self._master_changed = trio.Event()
        # TLS on the HA link: the master's listener as the remoting port's, the
        # slave's connection with tls.enable
        self._tls = config.server_tls()
        self._tls_server = self._tls.context()
        client_tls = config.client_tls()
        self._tls_client = client_tls.context() if client_tls is not None else None
        # a slave's master HA address: the role's (take_role), else haMasterAddress,
        # else the name server's answer
        self.pinned_master_ha_addr: str | None = None
        self.master_ha_addr: str | None = config.ha_master_address or None
        self.client: HAClient | None = None  # a slave's current connection
        self._appended = trio.Event()  # set by a slave's reader after an append
        self.port: int | None = None
        # a master with aclEnable: the accounts in force (set by the controller); a
        # slave's hello must then be signed by an admin account
        self.acl_config: Callable[[], AclConfig | None] | None = None
        # the HA listener's connections (haMaxConnections; see broker/store/ha/slots.py)
        self.slots = Slots(config.ha_max_connections, MAX_PENDING_HELLOS)
        self._send_budget = SEND_BUDGET  # bytes prepared for sends still allowed
        self._refusals = Guard(self.log, "HA accept")
        self._silence_check = trio.Event()
        # ---- a master's write gate (see the module's docstring)
        self.probing = False  # start_writes waits for the slaves' hellos
        # False once this broker stops being a master (broker/role.py): the write
        # gate never opens again until take_role makes it a master anew
        self.master_role = not config.is_slave
        self.opened = False  # this master's write epoch has begun
        self._opening = False  # its epoch is being written
        self.heard: dict[int, str] = {}  # slave brokerId -> verdict of its latest hello
        self._heard_event = trio.Event()
        self.behind: dict[int, str] = {}  # slaves whose log is longer: why writes stop
        self.recovering: str | None = None  # the slave the log is being copied from
        self.recovered_from: str | None = None  # its remoting address, once copied
        self.refused: Counter[str] = Counter()  # slaves' logs refused, by verdict
        self.refusals: deque[dict[str, Any]] = deque(maxlen=MAX_REFUSALS_SHOWN)
        # called with a slave's remoting address once this master copied its log
        self.on_recovered: Callable[[str], Awaitable[None]] | None = None
        # called with a slave's remoting address when a master not yet taking
        # writes accepts it (the master takes the slave's newer consumer offsets)
        self.on_slave_heard: Callable[[str], Awaitable[None]] | None = None
        # ---- a slave's link to its master
        self.link = "connecting"  # accepted | refused | recovering-master | connecting
        self.link_reason = ""
        # the master's log continues ours, on a live connection (metadata may sync)
        self.master_accepted = False
        # called once this slave discarded its log (to set haDiscardLog back to false)
        self.on_discarded: Callable[[], Awaitable[None]] | None = None
        # ---- controller mode (enableControllerMode; docs/replication.md)
        self.controller_mode = config.enable_controller_mode
        # this master's SyncStateSet, as the controller answered it (set_sync_state_set)
        self.sync_state = SyncStateHolder()
        self.sync_state.observe(self._sync_state_changed)
        # whether this broker is a SYNC_MASTER now (the live role replaces it)
        self.sync_master: Callable[[], bool] = \
            lambda: config.broker_role == BrokerRole.SYNC_MASTER
        if self.controller_mode:  # an extra check on every put: only in controller mode
            store.replicas_check = self.replicas_short
        # slaves by brokerId: when each last held the master's end (shrink, expand)
        self.catch_up: dict[int, CatchUp] = {}
        # the master's SyncStateSet proposals go to ``on_sync_state_proposal`` (the
        # controller's ALTER_SYNC_STATE_SET, once the broker speaks to it)
        self.on_sync_state_proposal: Callable[[Proposal], None] | None = None
        self.decider = SyncStateDecider(self._propose,
                                        config.ha_max_time_slave_not_catchup / 1000)
        # a master elected by the controller begins its write epoch above the
        # controller's masterEpoch - 1 (set before it takes the role; 0: no floor)
        self.epoch_floor = 0

    @property
    def silent_s(self) -> float:
        """haSlaveSilentMs in seconds (read at each use: it changes at run time)."""
        return self.config.ha_slave_silent_ms / 1000

    # ---- used by the send path and the controller -------------------------------------

    def notify_new_data(self, *_: Any) -> None:
        """The commit log grew: wake the writers (an append listener)."""
        ev, self._data = self._data, trio.Event()
        ev.set()

    def wait_slave(self, next_offset: int) -> Waiter:
        """A SYNC_MASTER send ending at ``next_offset``: done once a slave
        acknowledged it, FLUSH_SLAVE_TIMEOUT after syncFlushTimeout, or at once
        SLAVE_NOT_AVAILABLE when no slave is close enough.

        In controller mode: done once enough SyncStateSet members hold it
        (``acked_offset``), or at once IN_SYNC_REPLICAS_NOT_ENOUGH when the
        set has fewer than minInSyncReplicas (it shrank since the put)."""
        if self.controller_mode:
            short = self.replicas_short(check_role=False)
            if short is not None:
                return Waiter.finished(PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, next_offset)
            self.waiters.advance(self.acked_offset())
            return self.sends.add(next_offset)
        if not is_slave_ok(self.connections, next_offset, self.config.ha_slave_fallbehind_max):
            return Waiter.finished(PutMessageStatus.SLAVE_NOT_AVAILABLE, next_offset)
        ev, self._silence_check = self._silence_check, trio.Event()
        ev.set()
        return self.sends.add(next_offset)

    # ---- controller mode: the SyncStateSet ----------------------------------------------

    def set_sync_state_set(self, sss: SyncStateSet) -> bool:
        """The controller's SyncStateSet for this master (its answer to a
        heart-beat or to ALTER_SYNC_STATE_SET). True when it changed;
        SyncStateError when it is older than the one in force."""
        return self.sync_state.set(sss)

    def replicas_short(self, check_role: bool = True) -> str | None:
        """Controller mode, a SYNC_MASTER: why a put is refused
        IN_SYNC_REPLICAS_NOT_ENOUGH (the store asks before each put)."""
        if not self.controller_mode or (check_role and not (self.master_role
                                                            and self.sync_master())):
            return None
        return replicas_short(self.sync_state.current, self.config.min_in_sync_replicas)

    def acked_offset(self) -> int:
        """The offset SYNC_MASTER sends are released up to: the best slave's
        acknowledgement; in controller mode the highest offset enough
        SyncStateSet members hold (all with allAckInSyncStateSet, else
        minInSyncReplicas, the master counting)."""
        if not self.controller_mode:
            return push_to_slave_max_offset(self.connections)
        sss = self.sync_state.current
        if sss is None:
            return 0
        acked = members_acked((c.broker_id, c.acked_offset) for c in self.connections
                              if c.invalid is None)
        need = needed_acks(sss, self.config.min_in_sync_replicas,
                           self.config.all_ack_in_sync_state_set)
        return offset_held_by(sss, self.store.get_max_phy_offset(), acked, need)

    def reported(self, conn: HAConnection, now: float) -> None:
        """A slave's reports were taken (``conn.on_report``): release the
        SYNC_MASTER sends they cover; date its catch-up (controller mode)."""
        if self.controller_mode and conn.broker_id is not None:
            c = self.catch_up.get(conn.broker_id)
            if c is not None:
                c.on_report(conn.acked_offset, self.store.get_max_phy_offset(), now)
        self.waiters.advance(self.acked_offset())

    def confirm_offset(self) -> int:
        """Controller mode, a master: the offset every SyncStateSet member
        holds (0 with no set)."""
        sss = self.sync_state.current
        if sss is None:
            return 0
        acked = members_acked((c.broker_id, c.acked_offset) for c in self.connections
                              if c.invalid is None)
        return offset_held_by(sss, self.store.get_max_phy_offset(), acked, len(sss.members))

    def check_sync_state(self, now: float) -> Proposal | None:
        """Controller mode, a master: propose a shrink or expand when one is
        due (``SyncStateDecider``). A member never heard since this master
        began gets haMaxTimeSlaveNotCatchup from now to connect."""
        sss = self.sync_state.current
        if not self.controller_mode or not self.master_role or sss is None:
            return None
        for member in sss.slaves:
            if member not in self.catch_up:
                self.catch_up[member] = CatchUp(now, connected=False)
        entries = self.store.epochs.entries
        epoch_start = entries[-1].start if entries else 0
        self.decider.max_not_catchup_s = self.config.ha_max_time_slave_not_catchup / 1000
        return self.decider.tick(now, sss, self.catch_up, self.confirm_offset(), epoch_start)

    def _propose(self, proposal: Proposal) -> None:
        self.log.info("SyncStateSet change proposed", members=sorted(proposal.members),
                      removed=sorted(proposal.removed), added=sorted(proposal.added),
                      from_epoch=proposal.epoch)
        if self.on_sync_state_proposal is not None:
            self.sends.guard.call(self.on_sync_state_proposal, proposal)

    def advance_confirm(self) -> int:
        """Controller mode, a master: dispatch up to the confirm offset
        (store.set_dispatch_limit). Returns the records dispatched."""
        if self.store.dispatch_limit is None or not self.master_role \
                or self.sync_state.current is None:
            return 0
        return self.store.set_dispatch_limit(self.confirm_offset())

    async def run_confirm(self) -> None:
        """Controller mode, a master: ``advance_confirm`` after every append,
        report and SyncStateSet change, until cancelled."""
        while True:
            ev = self._data
            self.advance_confirm()
            await ev.wait()

    async def run_sync_state_check(self) -> None:
        """Controller mode, a master: ``check_sync_state`` every second (a
        quarter of haMaxTimeSlaveNotCatchup when shorter), until cancelled."""
        while True:
            await trio.sleep(min(1.0, self.config.ha_max_time_slave_not_catchup / 4000))
            self.check_sync_state(trio.current_time())

    def _sync_state_changed(self, old: SyncStateSet | None, new: SyncStateSet) -> None:
        """A new SyncStateSet: sends it now covers are released."""
        self.log.info("SyncStateSet changed", old=old.describe() if old else None,
                      **new.describe())
        if self.controller_mode:
            self.sends.guard.call(self.waiters.advance, self.acked_offset())
            self.notify_new_data()  # the confirm offset may move (run_confirm, the writers)

    def set_master_ha_addr(self, addr: str | None) -> None:
        """The name server told a slave its master's HA address."""
        if self.config.ha_master_address or self.pinned_master_ha_addr or not addr \
                or addr == self.master_ha_addr:
            return
        self.log.info("master HA address", addr=addr)
        self.master_ha_addr = addr
        ev, self._master_changed = self._master_changed, trio.Event()
        ev.set()

    def status(self) -> dict[str, Any]:
        """Runtime figures for brokerStatus."""
        master_max = self.store.get_max_phy_offset()
        epochs = self.store.epochs
        out: dict[str, Any] = {"maxOffset": master_max, "storeId": epochs.store_id,
                               "epoch": epochs.last_epoch}
        if self.controller_mode:
            sss = self.sync_state.current
            out["syncStateSet"] = sss.describe() if sss is not None else None
            out["dispatchLimit"] = self.store.dispatch_limit
            if self.master_role:
                out["confirmOffset"] = self.confirm_offset()
        if self.config.is_slave:
            out["masterHaAddress"] = self.master_ha_addr
            out["masterOffset"] = self.client.master_offset if self.client else None
            out["lag"] = (max(0, self.client.master_offset - master_max)
                          if self.client else None)
            out["link"] = self.link
            if self.link_reason:
                out["linkReason"] = self.link_reason
        else:
            out["slaves"] = [{"ackedOffset": c.acked_offset, "behind": c.lag(master_max),
                              "silent": c.silent_confirmed}
                             for c in self.connections]
            out["waitingSends"] = len(self.waiters)
            out["writable"] = self.store.write_fence is None
            if self.store.write_fence is not None:
                out["writeFence"] = self.store.write_fence
            if self.recovering is not None:
                out["recoveringFrom"] = self.recovering
            out["refusedSlaves"] = sum(self.refused.values())
            out["connections"] = self.slots.open
            out["connectionsRefused"] = self.slots.refused
            out["hellosDropped"] = self.slots.dropped
            if self.refusals:
                out["lastRefusal"] = self.refusals[-1]["reason"]
        return out

    # ---- role changes (broker/role.py) -------------------------------------------------

    async def stand_down(self, fence: str) -> int:
        """A master becoming a slave, before its tasks are cancelled: no put
        from now on (the store's write fence says ``fence``) and the write
        gate stays shut; then, while a slave is close enough to count
        (``is_slave_ok``), wait until one acknowledged the log's end (at
        most syncFlushTimeout, less when it falls silent): what this master
        stored, and every send waiting for it, reaches a slave. A send still
        waiting after that is answered SLAVE_NOT_AVAILABLE (stored here, not
        known to be on a slave). Returns how many were."""
        self.master_role = False
        self.store.write_fence = fence
        end = self.store.get_max_phy_offset()
        if is_slave_ok(self.connections, end, self.config.ha_slave_fallbehind_max):
            drained = trio.Event()
            self.sends.add(end).on_done(lambda _w: drained.set())
            ev, self._silence_check = self._silence_check, trio.Event()
            ev.set()
            self.notify_new_data()
            await drained.wait()
        waiting = len(self.waiters)
        self.sends.guard.call(self.waiters.fail_all, PutMessageStatus.SLAVE_NOT_AVAILABLE)
        return waiting

    def take_role(self, slave: bool, master_ha_addr: str | None = None) -> None:
        """Once the old role's tasks ended: the state the new role's tasks start
        from. A master takes no writes until ``start_writes`` (as at start);
        a slave follows ``master_ha_addr``, else haMasterAddress, else the
        name servers' answer."""
        self.probing = self.opened = self._opening = False
        self.heard.clear()
        self.behind.clear()
        self.recovering = None
        self.port = None
        self.client = None
        self.master_accepted = False
        self.link, self.link_reason = "connecting", ""
        self.pinned_master_ha_addr = master_ha_addr
        self.master_ha_addr = master_ha_addr or self.config.ha_master_address or None
        self.master_role = not slave
        # a new role starts with no SyncStateSet: the controller tells the new one
        self.sync_state.clear()
        self.catch_up.clear()
        self.decider.pending = None
        if not slave:
            self.fence_for_start()

    # ---- a master's write gate ---------------------------------------------------------

    def fence_for_start(self) -> None:
        """Before the broker serves: no writes until ``start_writes`` opens them."""
        if not self.opened:
            self.store.write_fence = STARTING

    async def start_writes(self, list_slaves: Callable[[], Awaitable[set[int] | None]]) -> None:
        """A master starting: wait until every slave the name servers list
        (``list_slaves``: their broker ids, None when no name server answered)
        has described its log, at most haMasterStartWaitMs; then take writes
        unless a slave's log showed this one behind."""
        wait = self.config.ha_master_start_wait_ms / 1000
        self.probing = True
        try:
            with trio.move_on_after(wait):
                wanted = await list_slaves() if wait > 0 else set()
                while wanted is None or not wanted <= set(self.heard):
                    await self._heard_event.wait()
            if wait > 0:
                self.log.info("slaves heard at start", heard=sorted(self.heard),
                              behind=sorted(self.behind))
        finally:
            self.probing = False
        await self._maybe_open()

    async def _maybe_open(self) -> None:
        """Take writes, in a new epoch, once nothing stops it."""
        if self.opened or self.probing or self.behind or self.recovering is not None \
                or self._opening or not self.master_role:
            return
        store = self.store
        start = store.get_max_phy_offset()
        self._opening = True  # one epoch begins at a time
        try:
            epoch: Epoch = await trio.to_thread.run_sync(
                store.epochs.begin, start, self.epoch_floor, store.get_min_phy_offset())
        finally:
            self._opening = False
        if self.opened or self.behind or self.recovering is not None or not self.master_role:
            return  # a slave's hello fenced it meanwhile, or the broker stood down
        self.opened = True
        store.write_fence = None
        self.log.info("master takes writes", epoch=epoch.epoch, from_offset=start,
                      store_id=store.epochs.store_id)

    def _fence_behind(self, broker_id: int, reason: str) -> None:
        self.behind[broker_id] = reason
        self.opened = False
        if self.master_role:  # a broker standing down keeps its own fence
            self.store.write_fence = f"writes refused: {reason}"

    def _heard_slave(self, broker_id: int, verdict: str) -> None:
        self.heard[broker_id] = verdict
        ev, self._heard_event = self._heard_event, trio.Event()
        ev.set()

    async def run_silence_check(self) -> None:
        """SYNC_MASTER: while sends wait, a slave with bytes sent to it and no
        acknowledgement progress for haSlaveSilentMs is confirmed silent (it
        no longer counts for sends, ``is_slave_ok``); once none that could
        release the waiting sends is left, they end SLAVE_NOT_AVAILABLE."""
        while True:
            # controller mode: the SyncStateSet decides who counts, not silence
            if not len(self.waiters) or self.silent_s <= 0 or self.controller_mode:
                await self._silence_check.wait()
                continue
            await trio.sleep(max(self.silent_s / 4, 0.01))
            if not len(self.waiters):
                continue
            if any(c.silent(trio.current_time(), self.silent_s) for c in self.connections):
                # reports that arrived while this loop was busy (a stall looks like
                # silence) go in first: the readers run before this task resumes
                for _ in range(3):
                    await trio.sleep(0)
                now = trio.current_time()
                for c in self.connections:
                    if c.silent(now, self.silent_s) and not c.silent_confirmed:
                        c.silent_confirmed = True
                        self.log.warning("slave silent: no acknowledgement progress",
                                         silent_ms=self.config.ha_slave_silent_ms,
                                         acked_offset=c.acked_offset, sent=c.next_offset)
            lowest = self.waiters.lowest_offset()
            if lowest is not None and not is_slave_ok(
                    self.connections, lowest, self.config.ha_slave_fallbehind_max):
                failed = self.waiters.fail_all(PutMessageStatus.SLAVE_NOT_AVAILABLE)
                self._refusals.note("slave silent: sends waiting for it answered "
                                    "SLAVE_NOT_AVAILABLE", "silent", sends=len(failed),
                                    silent_ms=self.config.ha_slave_silent_ms)

    # ---- master ----------------------------------------------------------------------

    async def run_master(self, port: int | None = None,
                         task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on haListenPort (or ``port``) until cancelled; reports the bound port."""
        listeners = await trio.open_tcp_listeners(
            self.config.ha_port if port is None else port, host=self.config.listen_host)
        self.port = listeners[0].socket.getsockname()[1]
        self.log.info("HA listening", port=self.port)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.sends.run_expiry)
                nursery.start_soon(self.run_silence_check)
                if self.controller_mode:
                    nursery.start_soon(self.run_sync_state_check)
                    nursery.start_soon(self.run_confirm)
                await nursery.start(trio.serve_listeners, self._serve_slave, listeners)
                task_status.started(self.port)
        finally:
            self.waiters.fail_all(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    async def _serve_slave(self, socket_stream: trio.SocketStream) -> None:
        peer = peer_name(socket_stream)
        handshake = trio.CancelScope()
        slot = self.slots.take(peer.rpartition(":")[0], handshake.cancel)
        if slot is None:
            # anyone reaching the port can repeat this: rate-limited per host
            self._refusals.note("HA connection refused", (peer.rpartition(":")[0], "full"),
                                slave=peer, error=f"haMaxConnections={self.slots.limit} HA "
                                "connections are open, all past their hello",
                                refused=self.slots.refused)
            with trio.move_on_after(1):
                await socket_stream.aclose()
            return
        try:
            await self._serve_in_slot(socket_stream, peer, slot, handshake)
        finally:
            slot.close()

    async def _serve_in_slot(self, socket_stream: trio.SocketStream, peer: str, slot: Slot,
                             handshake: trio.CancelScope) -> None:
        stream: trio.abc.Stream | None = None
        with handshake:
            stream = await accept(socket_stream, self._tls, self._tls_server, peer=peer,
                                  first_byte_timeout=self.housekeeping,
                                  handshake_timeout=min(10.0, self.housekeeping),
                                  max_frame_size=0, answer_plain=False)
            if stream is None:
                return
            try:
                hello, rest, key = await self._receive_hello(stream, peer)
                view = hello_log_view(hello)
                broker_id = hello_broker_id(hello)
            except Exception as exc:
                # anyone reaching the port can repeat this: rate-limited per host and reason
                leaf = first_leaf(exc)
                reason = describe(leaf)
                self._refusals.note("HA connection refused", (peer.rpartition(":")[0], reason),
                                    slave=peer, error=reason)
                with trio.move_on_after(1):
                    if isinstance(leaf, HandshakeVersionError):  # tell it our version
                        try:
                            await stream.send_all(GREETING)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            pass
                    await stream.aclose()
                return
            slot.established()
        if handshake.cancel_called or stream is None:  # dropped for a newer connection
            self._refusals.note("HA connection dropped in its hello",
                                (peer.rpartition(":")[0], "dropped"), slave=peer,
                                error="a newer connection took its slot (haMaxConnections "
                                f"{self.slots.limit}, at most {MAX_PENDING_HELLOS} in their "
                                "hello; the host holding the most loses its oldest)",
                                dropped=self.slots.dropped)
            with trio.move_on_after(1):
                await (stream or socket_stream).aclose()
            return
        async with stream:
            try:
                admitted = await self._admit(stream, peer, hello, view, broker_id, rest, key)
            except Exception as exc:
                leaf = first_leaf(exc)
                if not isinstance(leaf, EXPECTED_FAILURES):
                    raise
                self.log.warning("slave connection closed before streaming", slave=peer,
                                 error=describe(leaf))
                return
            if admitted is not None:
                await self._stream_to_slave(
                    stream, peer, rest, broker_id,
                    hello.fields.get(CONTROLLER_MODE_FIELD) == "true" and self.controller_mode,
                    list(admitted.epochs), hello.fields.get(EPOCH_FRAMES_FIELD) == "true")

    async def _admit(self, stream: trio.abc.Stream, peer: str, hello: Hello, view: LogView,
                     broker_id: int, rest: bytes, key: AnswerKey | None) -> Answer | None:
        """Judge the slave's log and answer (signed with ``key``); the
        accepting answer sent when transfers follow, else None."""
        store = self.store
        mine = store.log_view()
        j = judge(mine, view, store.crc_range)
        addr = hello.fields.get("brokerAddr", "")
        if j.verdict is Verdict.ACCEPT and not self.opened and addr \
                and self.on_slave_heard is not None:
            # before this master takes writes (and before start_writes counts the
            # slave heard): offsets committed to the slave while it was down
            try:
                with trio.fail_after(SLAVE_TABLES_TIMEOUT):
                    await self.on_slave_heard(addr)
            except Exception as exc:
                self.log.warning("taking the slave's consumer offsets failed", slave=addr,
                                 error=describe(first_leaf(exc)))
        self._heard_slave(broker_id, j.verdict.value)
        # controller mode: the controller chose this master; a longer slave truncates
        if j.verdict is Verdict.MASTER_BEHIND and not self.controller_mode:
            first = broker_id not in self.behind
            self._fence_behind(broker_id, j.reason)
            if first:  # its next hellos (every few seconds) say the same
                self.log.error("a slave holds more of the log than this master: writes refused",
                               slave=peer, slave_offset=view.max_offset,
                               master_offset=mine.max_offset, reason=j.reason,
                               recover_from_slave=self.config.recover_from_slave)
            if self.config.recover_from_slave and self.recovering is None:
                await self._recover_from(stream, peer, hello, view, broker_id, rest, key)
                return None
        if j.verdict is not Verdict.ACCEPT:
            self.refused[j.verdict.value] += 1
            self.refusals.append({"slave": peer, "verdict": j.verdict.value,
                                  "reason": j.reason, "at": int(time.time() * 1000)})
            self._refusals.note("slave's log refused", (peer.rpartition(":")[0], j.verdict.value),
                                slave=peer, verdict=j.verdict.value, reason=j.reason)
            with trio.move_on_after(3):
                await stream.send_all(encode_answer(self._answer(j.verdict.value, j.reason),
                                                    key))
            return None
        if self.behind.pop(broker_id, None) is not None:  # it discarded its longer log
            self.log.info("the slave that held more of the log now follows this one",
                          slave=peer)
            await self._maybe_open()
        answer = self._answer(Verdict.ACCEPT.value)  # its epochs are what the slave knows
        with trio.fail_after(3):
            await stream.send_all(encode_answer(answer, key))
        return answer

    def _answer(self, verdict: str, reason: str = "") -> Answer:
        v = self.store.log_view()
        return Answer(verdict, reason, v.store_id, tuple(v.epochs), v.min_offset, v.max_offset)

    async def _recover_from(self, stream: trio.abc.Stream, peer: str, hello: Hello,
                            view: LogView, broker_id: int, rest: bytes,
                            key: AnswerKey | None) -> None:
        """recoverFromSlave: copy the slave's log past ours over this connection
        (it sends, we report), take its epochs, then the slave's metadata, then
        writes in a new epoch."""
        self.recovering = peer
        target = view.max_offset
        self.log.warning("restoring this master's log from its slave", slave=peer,
                         from_offset=self.store.get_max_phy_offset(), to_offset=target)
        client = self._replica_client(list(view.epochs), view.min_offset)
        try:
            with trio.fail_after(3):
                await stream.send_all(encode_answer(self._answer(
                    RECOVER, f"restoring the master from this slave up to offset {target}"),
                    key))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_transfers, client, stream, nursery.cancel_scope,
                                   rest, target)
                nursery.start_soon(self._report_loop, client, stream)
        except Exception as exc:
            self.log.warning("restoring from the slave stopped; the next hello resumes it",
                             slave=peer, error=describe(first_leaf(exc)),
                             offset=self.store.get_max_phy_offset())
            return
        finally:
            self.recovering = None
        if self.store.get_max_phy_offset() < target:
            return
        self.log.warning("master's log restored from its slave", slave=peer,
                         offset=self.store.get_max_phy_offset())
        self.behind.pop(broker_id, None)
        addr = hello.fields.get("brokerAddr", "")
        self.recovered_from = addr or None
        if addr and self.on_recovered is not None:
            try:
                await self.on_recovered(addr)
            except Exception as exc:
                self.log.warning("copying the slave's tables after restoring failed",
                                 slave=addr, error=describe(first_leaf(exc)))
        await self._maybe_open()

    async def _stream_to_slave(self, stream: trio.abc.Stream, peer: str, rest: bytes,
                               broker_id: int | None = None, confirm: bool = False,
                               epochs: list[Epoch] | None = None,
                               epoch_frames: bool = False) -> None:
        """Stream to an accepted slave; ``epochs``: the master's history as the
        answer told it (epochs begun since follow in the stream, as epoch
        frames when ``epoch_frames``)."""
        conn = HAConnection(self.store, self.config.ha_transfer_batch_size,
                            self.heartbeat, self.housekeeping)
        conn.broker_id = broker_id
        conn.wants_confirm = confirm
        conn.epochs_known = epochs
        conn.wants_epochs = epoch_frames
        conn.connected(trio.current_time())
        self.connections.add(conn)
        if self.controller_mode and broker_id is not None:
            # a slave back keeps the date it last caught up (its grace does not restart)
            joined = self.catch_up.setdefault(broker_id, CatchUp(trio.current_time()))
            joined.connected, joined.dropped, joined.acked = True, False, 0
            joined.samples.clear()
        self.log.info("slave connected", slave=peer)
        ended = False  # by the slave or the link, not by this broker stopping
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_reports, conn, stream, nursery.cancel_scope,
                                   rest)
                nursery.start_soon(self._write_transfers, conn, stream)
            ended = True
        except Exception as exc:
            ended = True
            self.log.warning("slave connection closed", slave=peer,
                             error=describe(first_leaf(exc)))
        finally:
            self.connections.discard(conn)
            gone = self.catch_up.get(broker_id) if broker_id is not None else None
            if gone is not None and not any(o.broker_id == broker_id for o in self.connections):
                gone.connected, gone.dropped = False, True
                if ended:
                    # a member gone is proposed out now, not after
                    # haMaxTimeSlaveNotCatchup: sends waiting for every member's
                    # acknowledgement go on without it
                    self.check_sync_state(trio.current_time())
            self.log.info("slave disconnected", slave=peer, acked_offset=conn.acked_offset)

    def _admin_secret(self) -> Callable[[str], str | None] | None:
        """With aclEnable: an admin account's secret by access key (None: no such admin)."""
        if self.acl_config is None:
            return None
        acl = self.acl_config()

        def secret(key: str) -> str | None:
            account = acl.accounts.get(key) if acl is not None else None
            return account.secret_key if account is not None and account.admin else None
        return secret

    async def _receive_hello(self, stream: trio.abc.Stream,
                             peer: str) -> tuple[Hello, bytes, AnswerKey | None]:
        """The slave's greeting, this connection's challenge sent, then the
        slave's hello answering it, within HELLO_TIMEOUT; HAProtocolError when
        refused. Returns the hello, the bytes that followed it and the key the
        answer is signed with (transfer.answer_key; None: unsigned)."""
        timeout = min(HELLO_TIMEOUT, self.housekeeping)
        with trio.move_on_after(timeout):
            greeting = GreetingDecoder()
            got_rest: bytes | None = None
            while got_rest is None:
                data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    raise HAProtocolError("closed before its hello")
                got_rest = greeting.feed(data)
            challenge = new_challenge()
            await stream.send_all(encode_challenge(challenge))
            decoder = HelloDecoder()
            data = got_rest
            while True:
                got = decoder.feed(data) if data else None
                if got is not None:
                    break
                data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    raise HAProtocolError("closed before its hello")
            hello, rest = got
            now_ms = int(time.time() * 1000)
            check = HelloCheck(self.config.broker_name, self.config.broker_cluster_name)
            admin_secret = self._admin_secret()
            refused = check_hello(hello, check, now_ms, admin_secret, challenge)
            if refused is not None:
                raise HAProtocolError(refused)
            cred = self.config.broker_credentials()
            key = answer_key(hello, admin_secret, cred.access_key if cred else "",
                             cred.secret_key if cred else "")
            self.log.info("slave hello accepted", slave=peer, access_key=hello.access_key,
                          answer_signed=key is not None)
            return hello, rest, key
        raise HAProtocolError(f"no hello within {timeout:.0f}s")

    async def _read_reports(self, conn: HAConnection, stream: trio.abc.Stream,
                            scope: trio.CancelScope, first: bytes = b"") -> None:
        decoder = ReportDecoder()
        pending = first
        data: bytes | bytearray
        while True:
            with trio.move_on_after(self.housekeeping):
                if pending:
                    data, pending = pending, b""
                else:
                    data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    scope.cancel()
                    return
                now = trio.current_time()
                for offset in decoder.feed(data):
                    conn.on_report(offset, now)
                self.reported(conn, now)
                self.notify_new_data()  # the first report tells the writer where to start
                continue
            if conn.idle_too_long(trio.current_time()):
                raise TimeoutError(f"slave silent for {self.housekeeping:.0f}s")

    async def _write_transfers(self, conn: HAConnection, stream: trio.abc.Stream) -> None:
        """Send what ``conn`` has for its peer. What is prepared for one send
        comes out of SEND_BUDGET (shared by every connection; one transfer at
        least); a send not taken within haHousekeepingInterval (at most
        SEND_COALESCE bytes: the peer does not read) closes the connection."""
        catch_up = self.catch_up.get(conn.broker_id) if conn.broker_id is not None else None
        confirm_due: float | None = None  # when a confirm offset goes out alone
        while True:
            data_event = self._data
            now = trio.current_time()
            frames: list[bytes] = []
            size = 0
            limit = min(SEND_COALESCE, self._send_budget)
            try:
                # an epoch begun since the slave's answer goes before any byte it covers
                for epoch in conn.epochs_due(self.store.epochs.entries):
                    frame = encode_epoch(epoch)
                    frames.append(frame)
                    size += len(frame)
                    self._send_budget -= len(frame)
                    self.log.info("epoch sent to the slave", epoch=epoch.epoch,
                                  from_offset=epoch.start, slave_id=conn.broker_id)
                while size < limit or not frames:
                    t = conn.next_transfer(now)
                    if t is None:
                        break
                    frame = encode_transfer(*t)
                    if t[1] and catch_up is not None:
                        catch_up.on_sent(self.store.get_max_phy_offset(), now)
                    frames.append(frame)
                    size += len(frame)
                    self._send_budget -= len(frame)
                    if len(frame) == 12:  # a heartbeat: nothing more to send now
                        break
                if conn.wants_confirm and conn.next_offset is not None:
                    confirm = self.confirm_offset()
                    if confirm <= conn.confirm_sent:
                        confirm_due = None
                    elif frames or (confirm_due is not None and now >= confirm_due):
                        frames.append(encode_confirm(confirm))
                        size += 12
                        self._send_budget -= 12
                        conn.confirm_sent = confirm
                        confirm_due = None
                    elif confirm_due is None:  # nothing to ride now: CONFIRM_LINGER
                        confirm_due = now + CONFIRM_LINGER
                if frames:
                    payload = frames[0] if len(frames) == 1 else b"".join(frames)
                    frames.clear()
                    with trio.move_on_after(self.housekeeping) as send:
                        await stream.send_all(payload)
                    del payload
                    if send.cancelled_caught:  # a slave reads all the time
                        raise TimeoutError(f"the peer did not take {size} bytes within "
                                           f"{self.housekeeping:.0f}s (it does not read)")
                    continue
            finally:
                self._send_budget += size
            at = conn.next_heartbeat_at()
            wake = at if at is not None else now + self.heartbeat
            with trio.move_on_at(wake if confirm_due is None else min(wake, confirm_due)):
                await data_event.wait()

    # ---- slave -----------------------------------------------------------------------

    async def run_slave(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Follow the master until cancelled: connect, stream, reconnect."""
        task_status.started()
        guard = Guard(self.log, "replicate from master")
        while True:
            addr = self.master_ha_addr
            if addr is None:
                with trio.move_on_after(RECONNECT_BACKOFF):
                    await self._master_changed.wait()
                continue
            await guard.run(self._follow_logged, addr)
            refused = self.link == "refused"
            with trio.move_on_after(REFUSED_BACKOFF if refused else RECONNECT_BACKOFF):
                await self._master_changed.wait()

    async def _follow_logged(self, addr: str) -> bool:
        """Follow once; the network's own failures (the master gone or silent,
        refused frames) are one warning line, anything else goes to the guard.
        True when the master refused our log (the next hello waits longer)."""
        try:
            await self._follow(addr)
        except LogRefused as exc:
            self._refusals.note("the master refused this slave's log", (addr, exc.verdict),
                                master=addr, verdict=exc.verdict, reason=str(exc),
                                offset=self.store.get_max_phy_offset())
            return True
        except MasterUnproven as exc:
            self._refusals.note("this slave refuses its master's answer", (addr, str(exc)),
                                master=addr, reason=str(exc),
                                offset=self.store.get_max_phy_offset())
            return True
        except Exception as exc:
            leaf = first_leaf(exc)
            if not isinstance(leaf, EXPECTED_FAILURES):
                raise
            self.log.warning("replication from the master stopped, reconnecting", master=addr,
                             error=describe(leaf), offset=self.store.get_max_phy_offset())
        finally:
            # metadata sync waits for the next accepting answer: a master back
            # at this address may be one whose log no longer continues ours
            self.master_accepted = False
            if self.link != "refused":
                self.link, self.link_reason = "connecting", ""
        return False

    async def _follow(self, addr: str) -> None:
        host, port = split_addr(addr)
        with trio.fail_after(3):
            sock = await trio.open_tcp_stream(host, port)
        stream: trio.abc.Stream = sock
        if self._tls_client is not None:
            try:
                stream = await connect(sock, self._tls_client, addr, 3)
            except RemotingConnectError as exc:
                raise ConnectionError(str(exc)) from exc
        cred = self.config.broker_credentials()
        store = self.store
        async with stream:
            with trio.fail_after(3):
                await stream.send_all(GREETING)
            challenge = await self._receive_challenge(stream)
            mine = store.log_view()
            ours = new_challenge()  # the master's answer must sign it
            hello = make_hello(self.config.broker_name, self.config.broker_cluster_name,
                               int(time.time() * 1000), secrets.token_hex(12),
                               cred.access_key if cred else None,
                               cred.secret_key if cred else None, log=mine,
                               broker_id=self.config.broker_id,
                               broker_addr=self.config.broker_addr, challenge=challenge,
                               slave_challenge=ours, controller_mode=self.controller_mode)
            with trio.fail_after(3):
                await stream.send_all(encode_hello(hello))
            frame, rest = await self._receive_answer(stream)
            if cred is not None:  # nothing in the answer counts before its proof
                problem = check_answer(frame, ours, cred.access_key, cred.secret_key)
                if problem is not None:
                    self.link, self.link_reason = "refused", problem
                    raise MasterUnproven(problem)
            answer = frame.answer
            if self.controller_mode and answer.verdict in (Verdict.DIVERGED.value,
                                                           Verdict.MASTER_BEHIND.value):
                await self._truncate_to_master(answer)
            if answer.verdict == RECOVER:
                await self._send_log_to_master(stream, addr, answer, rest)
                return
            if answer.verdict != Verdict.ACCEPT.value:
                await self._refused(answer)
            master_epochs = list(answer.epochs)
            problem = lineage_problem(store.epochs.entries, master_epochs, mine.max_offset,
                                      max(mine.min_offset, answer.min_offset))
            if problem is not None:  # the master must have checked: never follow such a one
                self.link, self.link_reason = "refused", f"this slave refuses the master: {problem}"
                raise LogRefused(self.link_reason, "diverged")
            self.link, self.link_reason = "accepted", ""
            self.master_accepted = True
            # an empty log starts where the master said its log starts, nowhere else
            client = self.client = self._replica_client(master_epochs, answer.min_offset)
            self._appended = trio.Event()
            self.log.info("connected to master", master=addr, offset=store.get_max_phy_offset(),
                          master_offset=answer.max_offset, master_store=answer.store_id)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_transfers, client, stream,
                                       nursery.cancel_scope, rest)
                    nursery.start_soon(self._report_loop, client, stream)
            finally:
                self.client = None

    def _replica_client(self, epochs: list[Epoch], first_offset: int) -> HAClient:
        """An HAClient appending another store's log here (a slave's master's,
        or, restoring a master, its slave's): this store's epoch history takes
        ``epochs`` before the bytes they describe are written; an empty log
        takes its first bytes at ``first_offset`` (the other log's start) only."""
        store = self.store
        client = HAClient(store, self.heartbeat, self.housekeeping,
                          self.config.maped_file_size_commit_log,
                          first_offset=first_offset, master_epochs=epochs)
        # epoch frames extend client.master_epochs while the connection lasts
        client.before_append = lambda end: store.epochs.follow(
            client.master_epochs, end, store.get_min_phy_offset())
        client.connected(trio.current_time())
        return client

    async def _receive_challenge(self, stream: trio.abc.Stream) -> str:
        """The master's challenge to this connection's hello (in hex)."""
        decoder = ChallengeDecoder()
        with trio.fail_after(ANSWER_TIMEOUT):
            while True:
                data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    raise ConnectionError("the master closed the HA connection before its "
                                          "challenge (an older master, or its HA port is full)")
                got = decoder.feed(data)
                if got is not None:
                    challenge, rest = got
                    if rest:
                        raise HAProtocolError("the master sent more than its challenge")
                    return challenge

    async def _receive_answer(self, stream: trio.abc.Stream) -> tuple[AnswerFrame, bytes]:
        decoder = AnswerDecoder()
        with trio.fail_after(ANSWER_TIMEOUT):
            while True:
                data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    raise ConnectionError("the master closed the HA connection before answering")
                got = decoder.feed(data)
                if got is not None:
                    return got

    async def _refused(self, answer: Answer) -> None:
        """The master refused our log: say so everywhere; with haDiscardLog,
        empty the store (once) so the next hello copies the master's log."""
        self.master_accepted = False
        self.link, self.link_reason = "refused", answer.reason or answer.verdict
        discardable = answer.verdict in (Verdict.DIVERGED.value, Verdict.MASTER_BEHIND.value,
                                         Verdict.TOO_OLD.value)
        if discardable and self.config.ha_discard_log:
            store = self.store
            self.log.warning("haDiscardLog: discarding this slave's log to follow its master",
                             reason=answer.reason, discarded_bytes=store.get_max_phy_offset()
                             - store.get_min_phy_offset(), master_store=answer.store_id)
            # on the loop, not in a thread: pulls read the files it destroys
            store.discard_log()
            self.link, self.link_reason = "connecting", ""
            if self.on_discarded is not None:
                await self.on_discarded()
            raise LogRefused("log discarded: copying the master's afresh", answer.verdict)
        raise LogRefused(answer.reason or answer.verdict, answer.verdict)

    async def _truncate_to_master(self, answer: Answer) -> None:
        """Controller mode: the master refused our log as diverged or longer
        than its own. Cut it to the last point both share (``common_point``),
        crash-safe (broker/store/ha/truncation.py), and raise LogTruncated:
        the next hello follows from there. Where they share no point, or
        cutting would not help (the bytes before our end differ although the
        epochs agree), raise LogRefused with the log untouched."""
        store = self.store
        mine = store.log_view()
        point = common_point(store.epochs.entries, mine.min_offset, mine.max_offset,
                             list(answer.epochs), answer.min_offset, answer.max_offset)
        if point.offset is None or point.offset >= mine.max_offset:
            why = point.reason or (f"its log holds no byte past offset {point.offset} that "
                                   f"the master lacks, yet the master refuses it: "
                                   f"{answer.reason or answer.verdict}")
            self.master_accepted = False
            self.link, self.link_reason = "refused", (
                f"controller mode: this replica cannot follow the master: {why}")
            raise LogRefused(self.link_reason, answer.verdict)
        cut = mine.max_offset - point.offset
        self.log.warning("controller mode: truncating this replica's log to the point it "
                         "shares with the master", offset=point.offset, dropped_bytes=cut,
                         master_store=answer.store_id, master_offset=answer.max_offset,
                         verdict=answer.verdict)
        await trio.to_thread.run_sync(store.prepare_truncate, point.offset)
        # on the loop: pulls read the files it cuts (as discard_log)
        store.truncate_to(point.offset)
        await trio.to_thread.run_sync(store.finish_truncate)
        self.link, self.link_reason = "connecting", ""
        raise LogTruncated(f"log truncated to offset {point.offset} ({cut} bytes dropped): "
                           "following the master from there")

    async def _send_log_to_master(self, stream: trio.abc.Stream, addr: str, answer: Answer,
                                  rest: bytes) -> None:
        """recoverFromSlave on the master: it is behind us; send it our log
        from its end (it reports, we transfer), until it closes."""
        self.master_accepted = False
        self.link, self.link_reason = "recovering-master", answer.reason
        self.log.warning("the master restores its log from this slave", master=addr,
                         master_offset=answer.max_offset, offset=self.store.get_max_phy_offset())
        conn = HAConnection(self.store, self.config.ha_transfer_batch_size,
                            self.heartbeat, self.housekeeping)
        conn.connected(trio.current_time())
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_reports, conn, stream, nursery.cancel_scope, rest)
                nursery.start_soon(self._write_transfers, conn, stream)
        finally:
            self.log.info("the master's restore from this slave ended", master=addr,
                          master_offset=conn.acked_offset)

    async def _read_transfers(self, client: HAClient, stream: trio.abc.Stream,
                              scope: trio.CancelScope, first: bytes = b"",
                              until: int | None = None) -> None:
        """Apply transfers; with ``until``, stop (cancel ``scope``) once the
        log reaches that offset (a master restoring itself from a slave)."""
        decoder = TransferDecoder(max(self.config.ha_transfer_batch_size * 2, 4 << 20),
                                  confirm=self.controller_mode and until is None,
                                  epochs=until is None)
        pending = first
        data: bytes | bytearray
        while True:
            with trio.move_on_after(self.housekeeping):
                if pending:
                    data, pending = pending, b""
                else:
                    data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    raise ConnectionError("the master closed the HA connection")
                now = trio.current_time()
                frames = decoder.feed_joined(data)
                for epoch in decoder.take_epochs():  # each came before the bytes it covers
                    client.on_epoch(epoch)
                    self.log.info("the master began an epoch", epoch=epoch.epoch,
                                  from_offset=epoch.start)
                for offset, body in frames:
                    client.on_transfer(offset, body, now)
                if decoder.confirm_offset is not None and self.store.dispatch_limit is not None:
                    # what the master's SyncStateSet holds: consumers may see it here
                    self.store.set_dispatch_limit(decoder.confirm_offset)
                self._appended.set()  # the report loop tells the master at once
                if until is not None and self.store.get_max_phy_offset() >= until:
                    scope.cancel()
                    return
                continue
            if client.idle_too_long(trio.current_time()):
                scope.cancel()
                raise TimeoutError(f"master silent for {self.housekeeping:.0f}s")

    async def _report_loop(self, client: HAClient, stream: trio.abc.Stream) -> None:
        """The only sender on a slave's connection: reports at connect, after
        appends, and every heartbeat interval."""
        while True:
            appended = self._appended
            report = client.report_due(trio.current_time())
            if report is not None:
                await stream.send_all(encode_report(report))
            if appended.is_set():
                self._appended = trio.Event()
                continue
            at = client.next_report_at()
            with trio.move_on_at(at if at is not None else trio.current_time() + self.heartbeat):
                await appended.wait()

