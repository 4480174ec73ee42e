"""Checks shared by the hostile-request tests (issue 11): after an attack the
daemons keep serving, nothing outside the store changed, the seeded messages
read back exactly once, and the broker restarts cleanly.

A ``Guard`` owns one name server and one broker. ``seed()`` fills ``RTSeed``
(one queue) before any attack; ``begin()`` lays out a sentinel tree beside the
store and snapshots everything under the cluster root outside the stores and
logs; ``verify()`` runs every check, with a restart in the middle.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from broker.pull_processor import FLAG_SUBSCRIPTION
from client import Message, Producer, SendStatus
from client.admin import MQAdmin
from protocol.body import pack_body, unpack_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import PullMessageRequestHeader
from protocol.message import MessageConst, MessageExt
from protocol.record import decode_records
from protocol.trio.client import RemotingClient
from tests.integration.cluster import Cluster, Daemon
from tests.waits import routed, wait_until

SEED_TOPIC = "RTSeed"
SEED_BODIES = [b"seed-%d" % i for i in range(4)]
SEED_KEYS = [f"seed-key-{i}" for i in range(len(SEED_BODIES))]
CHECK_GROUP = "RTChecker"
DELAY_TOPIC = "RTDelay"
MiB = 1024 * 1024
# Small, really allocated files: a store costs a few MiB of disk, not gigabytes.
BROKER_PROPS: dict[str, object] = {
    "mapedFileSizeCommitLog": 8 * MiB,
    "mapedFileSizeConsumeQueue": 20 * 1000,
    "maxHashSlotNum": 1000,
    "maxIndexNum": 4000,
}
# RocketMQ's rules, written out here so the tests do not lean on the code under test.
VALID_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")
VALID_GROUP = re.compile(r"[%|a-zA-Z0-9_-]{1,255}")
TIMEOUT = 10.0
# An error remark is for people: a short text, never an echo of megabytes of input.
SHORT_REMARK = 4096

_wells = itertools.count()


def shown(value: str, n: int = 60) -> str:
    return repr(value) if len(value) <= n else f"{value[:n]!r}... ({len(value)} characters)"


async def invoke(addr: str, code: int, fields: dict[str, Any] | None = None,
                 body: bytes | None = None, timeout: float = TIMEOUT) -> RemotingCommand:
    """One request on a connection of its own."""
    async with RemotingClient() as rc:
        return await rc.invoke(addr, RemotingCommand.request(code, fields, body), timeout)


def assert_refused(resp: RemotingCommand, *names: str) -> None:
    """An error response with a short remark naming every one of ``names``
    (as whole words, so ``flag`` is not found in ``sysFlag``)."""
    assert resp.code != ResponseCode.SUCCESS, f"accepted: remark {resp.remark!r}"
    assert resp.remark, f"error {resp.code} without a remark"
    assert len(resp.remark) <= SHORT_REMARK, f"remark of {len(resp.remark)} characters"
    for name in names:
        assert re.search(rf"(?<![A-Za-z]){re.escape(name)}(?![A-Za-z])", resp.remark), (
            f"the remark does not name {name!r}: {resp.remark!r}")


def heartbeat_body(group: Any = None, *, client_id: str = "127.0.0.1@rt-attacker",
                   **consumer: Any) -> bytes:
    """A consumer's heartbeat, as client.instance sends it; ``consumer`` overrides fields."""
    data: dict[str, Any] = {
        "groupName": group,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "subscriptionDataSet": [{"topic": SEED_TOPIC, "subString": "*", "tagsSet": [],
                                 "codeSet": [], "subVersion": 1, "expressionType": "TAG"}],
        "unitMode": False,
    }
    data.update(consumer)
    return pack_body({"clientID": client_id, "producerDataSet": [], "consumerDataSet": [data]})


def register_body(topics: dict[str, dict[str, Any]]) -> bytes:
    """A REGISTER_BROKER body claiming ``topics`` (name -> config fields)."""
    table = {name: {"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                    "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, **cfg}
             for name, cfg in topics.items()}
    return pack_body({"topicConfigTable": table,
                      "dataVersion": {"timestamp": 1, "counter": 1}})


# ---- the tree outside the stores ------------------------------------------------------


def make_sentinel(root: Path) -> None:
    """Things an escaping path would hit: ``outside/`` beside the stores (an empty
    directory, a file, an empty directory for an absolute DELETE_TOPIC to aim at)
    and ``victim/`` where ``consumequeue/../../victim`` lands."""
    outside = root / "outside"
    (outside / "empty").mkdir(parents=True, exist_ok=True)
    (outside / "keep").mkdir(exist_ok=True)
    keep = outside / "keep" / "file.txt"
    if not keep.exists():
        keep.write_bytes(b"nothing outside the store may change\n")
    (outside / "abs-victim" / "0").mkdir(parents=True, exist_ok=True)
    (root / "victim" / "0").mkdir(parents=True, exist_ok=True)


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` but the stores, logs and config files of the
    daemons: relative path -> "dir", "link -> target" or the file's sha256."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel = here.relative_to(root)
        if rel == Path("."):
            # the daemons' stores and log directories (tests/integration/cluster.py)
            dirnames[:] = [d for d in dirnames if not d.startswith(("store-", "logs-"))]
            filenames = [f for f in filenames if not f.endswith((".log", ".properties"))]
        for d in dirnames:
            p = here / d
            out[str(rel / d)] = f"link -> {os.readlink(p)}" if p.is_symlink() else "dir"
        for f in filenames:
            p = here / f
            if p.is_symlink():
                out[str(rel / f)] = f"link -> {os.readlink(p)}"
            else:
                out[str(rel / f)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# ---- reading back ---------------------------------------------------------------------


async def pull_all(addr: str, topic: str, queue_id: int = 0) -> list[MessageExt]:
    """Every message of one queue, by raw PULL_MESSAGE straight to the broker."""
    out: list[MessageExt] = []
    offset = 0
    async with RemotingClient() as rc:
        for _ in range(1000):
            h = PullMessageRequestHeader(consumer_group=CHECK_GROUP, topic=topic,
                                         queue_id=queue_id, queue_offset=offset, max_msg_nums=32,
                                         sys_flag=FLAG_SUBSCRIPTION)
            r = await rc.invoke(addr, RemotingCommand.request(
                RequestCode.PULL_MESSAGE, h.to_fields()), TIMEOUT)
            if r.code == ResponseCode.PULL_NOT_FOUND:
                return out
            assert r.code == ResponseCode.SUCCESS, (
                f"pull {topic}:{queue_id}@{offset}: {ResponseCode(r.code).name} {r.remark}")
            assert r.body
            out += decode_records(r.body, verify_crc=True)
            offset = int(r.ext_fields["nextBeginOffset"])
    raise AssertionError(f"{topic}:{queue_id} never ends")


def daemon_state(d: Daemon) -> str:
    assert d.proc is not None
    code = d.proc.poll()
    if code is None:
        return "running"
    return f"exited with {code}; log tail:\n{d.log_text()[-3000:]}"


@dataclass
class Guard:
    cluster: Cluster
    ns: Daemon
    broker: Daemon
    before: dict[str, str] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.cluster.root

    @property
    def store(self) -> Path:
        return self.root / f"store-{self.broker.name}"

    # ---- set-up -----------------------------------------------------------------------

    async def seed(self) -> None:
        """``RTSeed`` (one queue) holding SEED_BODIES; ``RTDelay`` for delayed messages."""
        async with MQAdmin(self.ns.addr) as admin:
            for topic in (SEED_TOPIC, DELAY_TOPIC):
                await admin.create_topic(topic, broker_addr=self.broker.addr,
                                         read_queue_nums=1, write_queue_nums=1)
                await wait_until(routed(admin, topic), TIMEOUT, f"{topic} routed")
        async with Producer("RTSeeder", self.ns.addr) as p:
            for body, key in zip(SEED_BODIES, SEED_KEYS, strict=True):
                r = await p.send(Message(SEED_TOPIC, body, keys=key))
                assert r.send_status == SendStatus.SEND_OK
        await self.check_seed()

    def begin(self) -> None:
        """Before an attack: daemons a previous test killed are started again (that
        test failed already), the sentinel tree is in place and snapshotted."""
        if self.ns.proc is None or self.ns.proc.poll() is not None:
            self.ns.start()
            if self.broker.proc is not None and self.broker.proc.poll() is None:
                self.broker.stop()  # so it registers with the new name server at once
        if self.broker.proc is None or self.broker.proc.poll() is not None:
            self.broker.start()
        make_sentinel(self.root)
        self.before = snapshot(self.root)

    # ---- checks -----------------------------------------------------------------------

    def alive(self) -> None:
        for d in (self.ns, self.broker):
            state = daemon_state(d)
            assert state == "running", f"{d.name} {state}"

    async def check_seed(self) -> None:
        """Every seeded message reads back exactly once, in order, from RTSeed."""
        msgs = await pull_all(self.broker.addr, SEED_TOPIC)
        got = [(m.topic, m.queue_offset, m.body) for m in msgs]
        want = [(SEED_TOPIC, i, b) for i, b in enumerate(SEED_BODIES)]
        assert got == want, f"RTSeed reads back {got}, not {want}"

    def check_outside(self) -> None:
        """Nothing under the cluster root outside the stores, logs and configs
        appeared, vanished or changed since ``begin``."""
        after = snapshot(self.root)
        gone = sorted(set(self.before) - set(after))
        new = sorted(set(after) - set(self.before))
        changed = sorted(k for k in set(self.before) & set(after) if self.before[k] != after[k])
        assert not (gone or new or changed), (
            f"outside the store: removed {gone}, created {new}, changed {changed}")

    async def served(self) -> None:
        """Well-behaved traffic works end to end: a new topic is created on the broker,
        registered with and routed by the name server, a real producer sends to it
        and the message reads back."""
        topic = f"RTWell{next(_wells)}"
        async with MQAdmin(self.ns.addr) as admin:
            await admin.create_topic(topic, broker_addr=self.broker.addr,
                                     read_queue_nums=1, write_queue_nums=1)
            await wait_until(routed(admin, topic), TIMEOUT,
                             f"{topic} routed (the broker registers, the name server answers)")
        async with Producer("RTWellProducer", self.ns.addr) as p:
            r = await p.send(Message(topic, b"well"), timeout=TIMEOUT)
            assert r.send_status == SendStatus.SEND_OK
        assert [m.body for m in await pull_all(self.broker.addr, topic)] == [b"well"]

    async def check_names(self) -> None:
        """Every topic the broker or name server holds, and every subscription group
        of the broker, is a legal name."""
        r = await invoke(self.broker.addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        assert r.code == ResponseCode.SUCCESS, r.remark
        broker_topics = list(unpack_body(r.body)["topicConfigTable"])
        r = await invoke(self.ns.addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert r.code == ResponseCode.SUCCESS, r.remark
        ns_topics = list(unpack_body(r.body)["topicList"])
        bad = [shown(t) for t in broker_topics + ns_topics
               if not (isinstance(t, str) and VALID_TOPIC.fullmatch(t))]
        assert not bad, f"illegal topic names kept: {bad}"
        r = await invoke(self.broker.addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        assert r.code == ResponseCode.SUCCESS, r.remark
        groups = list(unpack_body(r.body)["subscriptionGroupTable"])
        bad = [shown(g) for g in groups if not (isinstance(g, str) and VALID_GROUP.fullmatch(g))]
        assert not bad, f"illegal subscription group names kept: {bad}"

    async def delayed_delivered(self) -> None:
        """A normal level-1 (1 s) delayed message reaches its topic: the schedule
        service works, and at least a second of background work has run."""
        body = b"delayed-%d" % next(_wells)
        msg = Message(DELAY_TOPIC, body)
        msg.properties[MessageConst.PROPERTY_DELAY_TIME_LEVEL] = "1"
        async with Producer("RTDelayProducer", self.ns.addr) as p:
            r = await p.send(msg, timeout=TIMEOUT)
            assert r.send_status == SendStatus.SEND_OK

        async def arrived() -> list[MessageExt]:
            return [m for m in await pull_all(self.broker.addr, DELAY_TOPIC) if m.body == body]

        got = await wait_until(arrived, 15, f"level-1 delayed message {body!r} delivered",
                               interval=0.1)
        assert len(got) == 1

    async def restart_broker(self) -> None:
        """SIGTERM (an orderly stop, exit code 0), start again, registered again."""
        code = self.broker.stop()
        assert code == 0, f"{self.broker.name} exited with {code} on SIGTERM:\n" \
                          f"{self.broker.log_text()[-3000:]}"
        self.broker.start()
        async with MQAdmin(self.ns.addr) as admin:
            await wait_until(routed(admin, SEED_TOPIC), TIMEOUT, "RTSeed routed after the restart")

    async def verify(self, *, restart: bool = True, delayed: bool = False) -> None:
        """Every check of a row: alive and serving, nothing outside the store touched,
        names legal, seeded messages exactly once; then the same after a restart."""
        with trio.fail_after(90):
            self.alive()
            await self.served()
            if delayed:
                await self.delayed_delivered()
            self.alive()
            await self.check_seed()
            self.check_outside()
            await self.check_names()
            if restart:
                await self.restart_broker()
                self.alive()
                await self.served()
                if delayed:
                    await self.delayed_delivered()
                await self.check_seed()
                self.check_outside()
                await self.check_names()
                self.alive()
