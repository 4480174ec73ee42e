"""Who leads among several controllers sharing one etcd: a lease and a leader key.

``EtcdLeadership.run`` campaigns, leads, and campaigns again after a loss:

1. Campaign: read ``<prefix>/leader``. While someone holds it, poll again after a
   wait that grows to ``poll_max`` (about a third of the TTL), with jitter. When
   it is absent: grant a lease of ``ttl`` seconds, then one transaction puts the
   key with this process's identity on that lease *if the key is still absent*
   (``create_revision == 0``). Lost the race: revoke the lease and poll on.
2. Lead: ``on_elected`` runs (cancelled if the term ends first) while the lease is
   kept alive every ``ttl / 3`` s (sooner again after a failed keep-alive).
   Leadership ends at ``deadline``:
   ``ttl - margin`` s after the *sending* of the last keep-alive etcd answered
   (etcd renewed the lease no earlier than it received it, so its expiry is
   later). Reaching the deadline without a renewal (etcd unreachable, too
   slow), etcd answering that the lease is gone, or the leader key found on no lease
   or another after a renewal (deleted by hand), ends the term: ``is_leader``
   turns false, then ``on_lost`` is awaited. The key (and so the way for another
   controller) is freed only when etcd expires the lease, ``margin`` s or more
   after that: this process has stopped leading before another can be elected.
   It campaigns again after one TTL, giving the others the first chance.
3. Cancelled: the lease is revoked at once (bounded, shielded), freeing the key.

Clocks: ``trio.current_time()`` (so ``MockClock`` drives it in tests); the margin
covers the rates at which etcd's clock and ours run apart, not their offsets.
Saves are fenced as well (``EtcdStateStore(fence=leadership)``): a save compares
the leader key's lease with ``lease_id``, so a deposed leader's save fails even
if its timing were wrong.

``LeaseTerm`` (timing of one term) and ``Backoff`` are pure and tested alone.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import structlog
import trio

from controller.etcd import Compare, EtcdError, KeyValue, Lease, Op, Put, TxnResult
from controller.etcd_store import DEFAULT_KEY_PREFIX, Fence, leader_key
from controller.state_store import Leadership

log = structlog.get_logger("controller.etcd_leadership")

DEFAULT_TTL = 3  # seconds; etcd grants whole seconds, 2 at least on default settings
MIN_TTL = 2
MAX_TTL = 300


class Backoff:
    """Waits that start at ``initial`` and grow by ``factor`` up to ``maximum``;
    each is scaled down by a random fraction of at most ``jitter`` (0..1) so that
    several campaigners do not poll in step. ``reset`` after a success."""

    def __init__(self, initial: float, maximum: float, factor: float = 2.0,
                 jitter: float = 0.0, rng: random.Random | None = None) -> None:
        if not 0 < initial <= maximum or factor < 1 or not 0 <= jitter < 1:
            raise ValueError("backoff needs 0 < initial <= maximum, factor >= 1, 0 <= jitter < 1")
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._current = initial

    def next(self) -> float:
        wait = self._current
        self._current = min(self.maximum, self._current * self.factor)
        if self.jitter:
            wait *= 1 - self.jitter * self._rng.random()
        return wait

    def reset(self) -> None:
        self._current = self.initial


class LeaseTerm:
    """The timing of one term of leadership on lease ``lease_id`` (pure; times in
    seconds on one monotonic clock). ``started_at`` is when the grant was sent."""

    def __init__(self, lease_id: int, ttl: float, margin: float, started_at: float) -> None:
        if not 0 < margin < ttl * 2 / 3:
            raise ValueError(f"margin {margin}s must be above 0 and below 2/3 of the TTL {ttl}s "
                             "(room for a keep-alive)")
        self.lease_id = lease_id
        self.ttl = ttl
        self.margin = margin
        self.interval = ttl / 3
        self.retry = ttl / 10
        self.renewed_at = started_at
        self.deadline = started_at + ttl - margin
        self.next_keepalive = started_at + self.interval

    def renewed(self, sent_at: float, granted_ttl: float) -> None:
        """etcd answered a keep-alive sent at ``sent_at``: the lease lives
        ``granted_ttl`` s from when etcd got it (counted from the sending; never
        more than the TTL asked for)."""
        if granted_ttl <= 0:
            raise ValueError("a lease renewed to no TTL is gone: end the term instead")
        ttl = min(self.ttl, granted_ttl)
        self.renewed_at = max(self.renewed_at, sent_at)
        self.deadline = max(self.deadline, sent_at + ttl - self.margin)
        self.next_keepalive = sent_at + self.interval

    def failed(self, now: float) -> None:
        """A keep-alive failed at ``now``: try again soon, never after the deadline."""
        self.next_keepalive = min(now + self.retry, self.deadline)

    def expired(self, now: float) -> bool:
        return now >= self.deadline

    def wake_at(self) -> float:
        """When the holder must next act: keep-alive or step down."""
        return min(self.next_keepalive, self.deadline)


def default_margin(ttl: float) -> float:
    """A fifth of the TTL, at least 0.5 s (still below 2/3 of any TTL of 2 s or more)."""
    return max(0.5, ttl / 5)


class LeaseClient(Protocol):
    """What leadership needs of etcd (EtcdClient has it)."""

    timeout: float

    async def get(self, key: bytes, timeout: float | None = None) -> KeyValue | None: ...

    async def txn(self, compare: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = (), timeout: float | None = None) -> TxnResult: ...

    async def grant(self, ttl: int, timeout: float | None = None) -> Lease: ...

    async def keepalive(self, lease_id: int, timeout: float | None = None) -> int: ...

    async def revoke(self, lease_id: int, timeout: float | None = None) -> None: ...


class EtcdLeadership:
    """``Leadership`` through an etcd lease (see the module's docstring).
    ``identity`` is what the leader key holds (say the controller's address), so
    others can tell who leads (``current_leader``)."""

    def __init__(self, client: LeaseClient, identity: str, prefix: str = DEFAULT_KEY_PREFIX,
                 ttl: int = DEFAULT_TTL, margin: float | None = None,
                 poll_max: float | None = None, rng: random.Random | None = None) -> None:
        if not MIN_TTL <= ttl <= MAX_TTL:
            raise ValueError(f"lease TTL {ttl}s out of [{MIN_TTL}, {MAX_TTL}]")
        if not identity or len(identity) > 256:
            raise ValueError("the leader identity must be 1 to 256 characters")
        self.client = client
        self.identity = identity.encode()
        self._key = leader_key(prefix)
        self.ttl = ttl
        self.margin = default_margin(ttl) if margin is None else margin
        LeaseTerm(0, ttl, self.margin, 0.0)  # checks the margin
        self.poll_max = ttl / 3 if poll_max is None else poll_max
        self._rng = rng or random.Random()
        self._term: LeaseTerm | None = None
        self._owned: int | None = None  # a lease granted and not yet revoked
        self.terms = 0  # terms led so far
        self.log = log.bind(key=self._key.decode(errors="replace"), identity=identity)

    @property
    def key(self) -> bytes:
        return self._key

    @property
    def is_leader(self) -> bool:
        return self._term is not None

    @property
    def lease_id(self) -> int | None:
        """The lease this process leads by; None while it does not lead."""
        return self._term.lease_id if self._term is not None else None

    async def current_leader(self) -> bytes | None:
        """The identity in the leader key, None when nobody leads."""
        kv = await self.client.get(self._key)
        return kv.value if kv is not None else None

    async def run(self, on_elected: Callable[[], Awaitable[None]],
                  on_lost: Callable[[], Awaitable[None]]) -> None:
        try:
            while True:
                term = await self._campaign()
                self._term = term
                self.terms += 1
                self.log.info("controller_elected", lease=term.lease_id, term=self.terms)
                try:
                    reason = await self._lead(term, on_elected)
                finally:
                    self._term = None
                self.log.warning("controller_leadership_lost", lease=term.lease_id, reason=reason)
                await on_lost()
                # a process that could not keep its lease is the least likely to keep the
                # next one: the others get one TTL to take the key first
                await trio.sleep(self.ttl)
        finally:
            self._term = None
            if self._owned is not None:
                with trio.CancelScope(shield=True):
                    await self._revoke(self._owned)

    async def _campaign(self) -> LeaseTerm:
        backoff = Backoff(min(0.05, self.poll_max), self.poll_max, jitter=0.3, rng=self._rng)
        if self._owned is not None:
            await self._revoke(self._owned)  # the last term's: frees the key sooner
        failing = False
        while True:
            try:
                holder = await self.client.get(self._key)
                if holder is None:
                    term = await self._try_take()
                    if term is not None:
                        return term
                else:
                    self.log.debug("controller_leader_held", holder=holder.value[:100])
                failing = False
            except EtcdError as e:
                # once per streak of failures at info; the rest at debug
                (self.log.debug if failing else self.log.info)(
                    "controller_campaign_failed", error=str(e))
                failing = True
                if self._owned is not None:
                    await self._revoke(self._owned)
            await trio.sleep(backoff.next())

    async def _try_take(self) -> LeaseTerm | None:
        started = trio.current_time()
        lease = await self.client.grant(self.ttl)
        self._owned = lease.id
        term = LeaseTerm(lease.id, min(self.ttl, lease.ttl), self.margin, started)
        left = term.deadline - trio.current_time()
        if left > 0:
            result = await self.client.txn([Compare(self._key, "CREATE", 0)],
                                           [Put(self._key, self.identity, lease.id)],
                                           timeout=left)
            if result.succeeded and not term.expired(trio.current_time()):
                return term
        await self._revoke(lease.id)  # another took the key first (or we were too slow)
        return None

    async def _lead(self, term: LeaseTerm, on_elected: Callable[[], Awaitable[None]]) -> str:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_elected)
            reason = await self._keep(term)
            nursery.cancel_scope.cancel()
        return reason

    async def _keep(self, term: LeaseTerm) -> str:
        """Keep the lease alive until the term ends; why it ended."""
        while True:
            await trio.sleep_until(term.wake_at())
            now = trio.current_time()
            if term.expired(now):
                return (f"lease not renewed for {now - term.renewed_at:.3g}s "
                        f"(TTL {term.ttl}s, margin {term.margin}s)")
            if now < term.next_keepalive:
                continue
            try:
                ttl = await self.client.keepalive(term.lease_id, timeout=term.deadline - now)
            except EtcdError as e:
                self.log.info("controller_keepalive_failed", error=str(e))
                term.failed(trio.current_time())
                continue
            if ttl <= 0:
                self._owned = None
                return "etcd says the lease is gone (expired or revoked)"
            term.renewed(now, ttl)
            if not await self._holds_key(term):
                return "the leader key is no longer on this lease (deleted or overwritten)"

    async def _holds_key(self, term: LeaseTerm) -> bool:
        """Whether the leader key is still on the term's lease (an operator may have
        deleted it, letting another controller in); True when etcd cannot say in
        time (the deadline settles that case)."""
        left = term.deadline - trio.current_time()
        if left <= 0:
            return True
        try:
            kv = await self.client.get(self._key, timeout=left)
        except EtcdError:
            return True
        return kv is not None and kv.lease == term.lease_id

    async def _revoke(self, lease_id: int) -> None:
        try:
            with trio.move_on_after(self.client.timeout):
                await self.client.revoke(lease_id)
        except EtcdError as e:
            # it expires by itself within the TTL
            self.log.info("controller_revoke_failed", lease=lease_id, error=str(e))
        if self._owned == lease_id:
            self._owned = None


if TYPE_CHECKING:  # mypy checks that the interfaces are met
    def _leadership(x: EtcdLeadership) -> Leadership:
        return x

    def _fence(x: EtcdLeadership) -> Fence:
        return x


__all__ = ["Backoff", "EtcdLeadership", "LeaseClient", "LeaseTerm", "default_margin"]
