"""EtcdStateStore against a real etcd: load, save, compare-and-swap on the key's
mod revision, the fence on the leader key's lease; and the reasons a refused
save gives, without etcd."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from controller.etcd import EtcdClient, KeyValue, Put
from controller.etcd_store import EtcdStateStore, conflict_reason, leader_key, state_key
from controller.state_store import StateConflict, StateStoreError, Stored
from tests.controller.etcd_server import EtcdCluster, make_cluster, needs_etcd

_prefixes = itertools.count()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = make_cluster(tmp_path_factory.mktemp("etcd"), 1)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def prefix() -> str:
    return f"/test/store/{next(_prefixes)}"


@dataclass
class FakeFence:
    key: bytes
    lease_id: int | None


def test_keys_under_the_prefix() -> None:
    assert state_key("/rocketmq/controller/c1/") == b"/rocketmq/controller/c1/state"
    assert leader_key("/rocketmq/controller/c1") == b"/rocketmq/controller/c1/leader"


def kv(value: bytes, mod: int, lease: int = 0) -> KeyValue:
    return KeyValue(b"k", value, create_revision=1, mod_revision=mod, version=1, lease=lease)


def test_conflict_reasons() -> None:
    assert conflict_reason(5, kv(b"s", 7), None, None, None) == "state version is 7, not 5"
    assert conflict_reason(3, None, None, None, None) == "state version is 0, not 3"
    text = conflict_reason(7, kv(b"s", 7), b"/p/leader", kv(b"other:9876", 9, lease=42), 41)
    assert text == "this process no longer leads (/p/leader held by b'other:9876')"
    both = conflict_reason(0, kv(b"s", 2), b"/p/leader", None, 41)
    assert both == "state version is 2, not 0; this process no longer leads (/p/leader held by nobody)"


@needs_etcd
async def test_load_save_and_compare_and_swap(etcd: EtcdCluster, prefix: str) -> None:
    store = EtcdStateStore(EtcdClient(etcd.endpoints), prefix)
    assert await store.load() is None
    v1 = await store.save(b"first", 0)
    assert v1 > 0
    assert await store.load() == Stored(b"first", v1)
    v2 = await store.save(b"second", v1)
    assert v2 > v1
    assert await store.load() == Stored(b"second", v2)

    # a stale version (someone saved in between) and a second create are refused
    with pytest.raises(StateConflict, match=f"state version is {v2}, not {v1}"):
        await store.save(b"stale", v1)
    with pytest.raises(StateConflict, match=f"state version is {v2}, not 0"):
        await store.save(b"again", 0)
    assert await store.load() == Stored(b"second", v2)

    # another controller's store on the same prefix sees the same state and version
    other = EtcdStateStore(EtcdClient(etcd.endpoints), prefix)
    assert await other.load() == Stored(b"second", v2)
    v3 = await other.save(b"third", v2)
    with pytest.raises(StateConflict):
        await store.save(b"lost race", v2)
    assert await store.load() == Stored(b"third", v3)
    await store.aclose()
    await other.aclose()


@needs_etcd
async def test_version_is_the_key_mod_revision_not_the_store_revision(
        etcd: EtcdCluster, prefix: str) -> None:
    client = EtcdClient(etcd.endpoints)
    store = EtcdStateStore(client, prefix)
    v1 = await store.save(b"a", 0)
    # other keys move etcd's revision on; the state's version stays
    await client.put(Put(f"{prefix}/unrelated".encode(), b"x"))
    assert (await store.load()) == Stored(b"a", v1)
    assert await store.save(b"b", v1) > v1


@needs_etcd
async def test_binary_state_round_trips(etcd: EtcdCluster, prefix: str) -> None:
    store = EtcdStateStore(EtcdClient(etcd.endpoints), prefix)
    blob = bytes(range(256)) * 1000
    version = await store.save(blob, 0)
    assert await store.load() == Stored(blob, version)


@needs_etcd
async def test_oversized_state_refused_before_etcd(etcd: EtcdCluster, prefix: str) -> None:
    store = EtcdStateStore(EtcdClient(etcd.endpoints), prefix, max_value_bytes=1000)
    with pytest.raises(StateStoreError, match="state of 1001 bytes is over"):
        await store.save(b"x" * 1001, 0)
    assert await store.load() is None
    with pytest.raises(ValueError):
        await store.save(b"x", -1)


@needs_etcd
async def test_fenced_save_needs_the_leader_key_on_our_lease(
        etcd: EtcdCluster, prefix: str) -> None:
    client = EtcdClient(etcd.endpoints)
    lkey = leader_key(prefix)
    ours = await client.grant(30)
    theirs = await client.grant(30)
    fence = FakeFence(lkey, ours.id)
    store = EtcdStateStore(client, prefix, fence=fence)

    # nobody holds the leader key: refused, nothing written
    with pytest.raises(StateConflict, match="no longer leads"):
        await store.save(b"s", 0)
    await client.put(Put(lkey, b"me", ours.id))
    v1 = await store.save(b"s", 0)

    # the key now on another lease (we were deposed): refused though the version matches
    await client.revoke(ours.id)
    await client.put(Put(lkey, b"them", theirs.id))
    with pytest.raises(StateConflict, match=r"held by b'them'"):
        await store.save(b"deposed", v1)
    assert await store.load() == Stored(b"s", v1)

    # a fence saying "not leading" refuses without asking
    fence.lease_id = None
    with pytest.raises(StateConflict, match="does not lead"):
        await store.save(b"x", v1)
    await client.revoke(theirs.id)


async def test_unreachable_etcd_is_a_bounded_store_error() -> None:
    from tests.integration.cluster import free_port

    store = EtcdStateStore(EtcdClient(f"http://127.0.0.1:{free_port(1)}", timeout=1.0))
    with pytest.raises(StateStoreError, match="no endpoint answered"):
        await store.load()
    with pytest.raises(StateStoreError, match="no endpoint answered"):
        await store.save(b"x", 0)
