"""An in-memory etcd for leadership tests on trio's MockClock: keys with revisions,
leases that expire by the clock (taking their keys), and clients that can be cut
off (their calls hang until their timeout, then fail as EtcdUnavailable) or
slowed. Only what EtcdLeadership and EtcdStateStore use."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import trio

from controller.etcd import (
    GRPC_NOT_FOUND,
    Compare,
    EtcdError,
    EtcdUnavailable,
    Get,
    KeyValue,
    Lease,
    Op,
    Put,
    TxnResult,
)


@dataclass
class FakeEtcd:
    kvs: dict[bytes, KeyValue] = field(default_factory=dict)
    revision: int = 1
    leases: dict[int, tuple[int, float]] = field(default_factory=dict)  # id -> (ttl, expiry)
    next_lease: int = 1000
    min_ttl: int = 2

    def expire(self) -> None:
        now = trio.current_time()
        for lease_id, (_, expiry) in list(self.leases.items()):
            if expiry <= now:
                self.drop_lease(lease_id)

    def drop_lease(self, lease_id: int) -> None:
        del self.leases[lease_id]
        doomed = [k for k, kv in self.kvs.items() if kv.lease == lease_id]
        if doomed:
            self.revision += 1
            for k in doomed:
                del self.kvs[k]

    def get(self, key: bytes) -> KeyValue | None:
        self.expire()
        return self.kvs.get(key)

    def put(self, put: Put) -> None:
        if put.lease and put.lease not in self.leases:
            raise EtcdError("etcdserver: requested lease not found", GRPC_NOT_FOUND)
        old = self.kvs.get(put.key)
        self.kvs[put.key] = KeyValue(
            put.key, put.value, old.create_revision if old else self.revision,
            self.revision, (old.version if old else 0) + 1, put.lease)

    def field(self, c: Compare) -> int | bytes:
        kv = self.kvs.get(c.key)
        if c.target == "VALUE":
            return kv.value if kv else b""
        if kv is None:
            return 0
        return {"CREATE": kv.create_revision, "MOD": kv.mod_revision, "VERSION": kv.version,
                "LEASE": kv.lease}[c.target]

    def txn(self, compare: Sequence[Compare], success: Sequence[Op],
            failure: Sequence[Op]) -> TxnResult:
        self.expire()
        ok = all(self.field(c) == c.value for c in compare)
        ops = success if ok else failure
        writes = [op for op in ops if isinstance(op, Put)]
        if writes:
            self.revision += 1
            for op in writes:
                self.put(replace(op))
        ranges = tuple((self.kvs[op.key],) if isinstance(op, Get) and op.key in self.kvs else ()
                       for op in ops)
        return TxnResult(ok, self.revision, ranges)

    def grant(self, ttl: int) -> Lease:
        self.expire()
        ttl = max(ttl, self.min_ttl)
        self.next_lease += 1
        self.leases[self.next_lease] = (ttl, trio.current_time() + ttl)
        return Lease(self.next_lease, ttl)

    def keepalive(self, lease_id: int) -> int:
        self.expire()
        if lease_id not in self.leases:
            return 0
        ttl, _ = self.leases[lease_id]
        self.leases[lease_id] = (ttl, trio.current_time() + ttl)
        return ttl

    def revoke(self, lease_id: int) -> None:
        self.expire()
        if lease_id not in self.leases:
            raise EtcdError("etcdserver: requested lease not found", GRPC_NOT_FOUND)
        self.drop_lease(lease_id)


class FakeClient:
    """One process's view of FakeEtcd: each call takes ``latency`` s on the way
    there (applied on arrival) and as long back; ``cut`` makes calls hang for
    their whole timeout and fail."""

    def __init__(self, etcd: FakeEtcd, timeout: float = 1.0, latency: float = 0.005) -> None:
        self.etcd = etcd
        self.timeout = timeout
        self.latency = latency
        self.cut = False
        self.keepalives = 0

    async def _arrive(self, timeout: float | None) -> float:
        budget = self.timeout if timeout is None else timeout
        if self.cut or 2 * self.latency > budget:
            await trio.sleep(max(0.0, budget))
            raise EtcdUnavailable("no endpoint answered (cut off)")
        await trio.sleep(self.latency)
        return budget

    async def _back(self) -> None:
        await trio.sleep(self.latency)
        if self.cut:  # cut while the answer was on its way
            raise EtcdUnavailable("no answer (cut off)")

    async def get(self, key: bytes, timeout: float | None = None) -> KeyValue | None:
        await self._arrive(timeout)
        kv = self.etcd.get(key)
        await self._back()
        return kv

    async def txn(self, compare: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = (), timeout: float | None = None) -> TxnResult:
        await self._arrive(timeout)
        result = self.etcd.txn(compare, success, failure)
        await self._back()
        return result

    async def grant(self, ttl: int, timeout: float | None = None) -> Lease:
        await self._arrive(timeout)
        lease = self.etcd.grant(ttl)
        await self._back()
        return lease

    async def keepalive(self, lease_id: int, timeout: float | None = None) -> int:
        await self._arrive(timeout)
        ttl = self.etcd.keepalive(lease_id)
        await self._back()
        self.keepalives += 1
        return ttl

    async def revoke(self, lease_id: int, timeout: float | None = None) -> None:
        await self._arrive(timeout)
        try:
            self.etcd.revoke(lease_id)
        except EtcdError as e:
            if e.code != GRPC_NOT_FOUND:
                raise
        await self._back()

    async def aclose(self) -> None:
        pass
