"""The controller's state in etcd: one key, compare-and-swap on its mod revision.

Keys under one prefix (``etcdKeyPrefix``, default ``/rocketmq/controller/default``);
every controller given the same prefix shares one state and one leader:

- ``<prefix>/state``: the whole state blob (``StateStore``). Its version is the
  key's ``mod_revision``: ``load`` is a range on the key; ``save(data, expected)``
  is one transaction comparing ``mod_revision == expected`` (for ``expected`` 0:
  ``create_revision == 0``, the key absent) and then putting ``data``; the new
  version is the revision the transaction made. Another version found is a
  ``StateConflict``.
- ``<prefix>/leader``: who leads (``EtcdLeadership``, controller/etcd_leadership.py):
  the leader's identity, attached to its lease.

Fencing: a store given a ``fence`` (the leadership) adds a second compare to each
save: the leader key's ``lease`` equals the lease this process holds. A deposed
leader (its lease expired or revoked, someone else's lease on the key now) fails
that compare, so its save is refused with ``StateConflict`` even if it has not
yet noticed that it lost. A store whose fence says it does not lead refuses
without asking etcd.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import structlog

from controller.etcd import Compare, EtcdClient, Get, KeyValue, Put
from controller.state_store import StateConflict, StateStore, StateStoreError, Stored

log = structlog.get_logger("controller.etcd_store")

DEFAULT_KEY_PREFIX = "/rocketmq/controller/default"
# etcd refuses requests over 1.5 MiB by default (--max-request-bytes); a value this
# large is refused here first, with a clear error
DEFAULT_MAX_VALUE_BYTES = 1024 * 1024


def state_key(prefix: str) -> bytes:
    return f"{prefix.rstrip('/')}/state".encode()


def leader_key(prefix: str) -> bytes:
    return f"{prefix.rstrip('/')}/leader".encode()


class Fence(Protocol):
    """What fences saves: the key that names the leader and the lease this
    process holds it by (None while it does not lead)."""

    @property
    def key(self) -> bytes: ...

    @property
    def lease_id(self) -> int | None: ...


def conflict_reason(expected: int, state: KeyValue | None, fence_key: bytes | None,
                    holder: KeyValue | None, lease_id: int | None) -> str:
    """Why a save's compares failed, from what the failure branch read (pure)."""
    found = state.mod_revision if state is not None else 0
    reasons = []
    if found != expected:
        reasons.append(f"state version is {found}, not {expected}")
    if fence_key is not None:
        held_by = holder.lease if holder is not None else 0
        if held_by != lease_id:
            who = repr(holder.value[:100]) if holder is not None else "nobody"
            reasons.append(f"this process no longer leads ({fence_key.decode(errors='replace')}"
                           f" held by {who})")
    return "; ".join(reasons) or "the store changed between the compare and the read"


class EtcdStateStore:
    """``StateStore`` on one etcd key (see the module's docstring)."""

    def __init__(self, client: EtcdClient, prefix: str = DEFAULT_KEY_PREFIX,
                 fence: Fence | None = None,
                 max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> None:
        self.client = client
        self.key = state_key(prefix)
        self.fence = fence
        self.max_value_bytes = max_value_bytes
        self.log = log.bind(key=self.key.decode(errors="replace"))

    async def load(self) -> Stored | None:
        kv = await self.client.get(self.key)
        if kv is None:
            return None
        if kv.mod_revision <= 0:
            raise StateStoreError(f"etcd gave {self.key!r} the revision {kv.mod_revision}")
        return Stored(kv.value, kv.mod_revision)

    async def save(self, data: bytes, expected: int) -> int:
        if expected < 0:
            raise ValueError(f"expected version {expected} < 0")
        if len(data) > self.max_value_bytes:
            raise StateStoreError(f"state of {len(data)} bytes is over the etcd store's "
                                  f"{self.max_value_bytes}")
        compare = [Compare(self.key, "CREATE", 0) if expected == 0
                   else Compare(self.key, "MOD", expected)]
        failure = [Get(self.key)]
        lease_id: int | None = None
        if self.fence is not None:
            lease_id = self.fence.lease_id
            if lease_id is None:
                raise StateConflict("not saved: this controller does not lead")
            compare.append(Compare(self.fence.key, "LEASE", lease_id))
            failure.append(Get(self.fence.key))
        result = await self.client.txn(compare, [Put(self.key, data)], failure)
        if result.succeeded:
            self.log.debug("state_saved", version=result.revision, expected=expected,
                           size=len(data))
            return result.revision
        ranges = list(result.ranges) + [()] * (2 - len(result.ranges))
        state = ranges[0][0] if ranges[0] else None
        holder = ranges[1][0] if ranges[1] else None
        reason = conflict_reason(expected, state, self.fence.key if self.fence else None,
                                 holder, lease_id)
        self.log.info("state_save_refused", expected=expected, reason=reason)
        raise StateConflict(f"not saved: {reason}")

    async def aclose(self) -> None:
        await self.client.aclose()


if TYPE_CHECKING:  # mypy checks that the interface is met
    def _state_store(x: EtcdStateStore) -> StateStore:
        return x


__all__ = ["DEFAULT_KEY_PREFIX", "EtcdStateStore", "Fence", "conflict_reason", "leader_key",
           "state_key"]
