"""The master's HA port under hostile peers (issue rows 9-12), between real daemons:

- 9: a flood of hellos leaves no trace: the real slave reconnects and replicates;
  connections stuck in their hello, renewed for ever, do not keep it out either;
- 10: connections that never read: at most haMaxConnections, the slave still works,
  and the master closes them;
- 11: a captured admin hello replayed after the master restarted is refused;
- 12: a (man-in-the-middle) master's first transfer to an empty slave far past the
  master's start is refused; the slave then follows the real master;
- 13: a fake master (without the slave's account secret) answering with a lying
  log start is refused before anything is appended; the slave then follows the
  real master; a slave of another handshake version is told the master's.

The hand-made peers here speak whichever HA handshake the master speaks (the
greeting and challenge of this version, or a bare hello before version 3), so
each test of rows 9-12 shows the attack working on a master without the fix
(row 10's once its haMaxConnections, a key an older broker refuses, is left out;
a version 3 master, which refuses this version's greeting, once GREETING is
written out as b"RMQC\x03").
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

import trio

from broker.store.ha.epochs import LogView
from broker.store.ha.transfer import (
    CHALLENGE,
    GREETING,
    Answer,
    AnswerDecoder,
    AnswerKey,
    GreetingDecoder,
    HelloDecoder,
    TransferDecoder,
    encode_answer,
    encode_challenge,
    encode_hello,
    encode_report,
    encode_transfer,
    make_hello,
    new_challenge,
)
from client import AclCredentials, Message, Producer, SendStatus
from client.admin import MQAdmin
from tests.integration.cluster import Cluster, Daemon, free_port
from tests.waits import routed, wait_until

TOPIC = "HaPortTopic"
CL_FILE = 256 * 1024
TIMEOUT = 20.0
CHALLENGE_SIZE = CHALLENGE.size
ADMIN = AclCredentials("brokeradm1", "brokersecret1")
ACL = f"""globalWhiteRemoteAddresses:
  - 10.254.254.254
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
"""
EMPTY = LogView("flood", [], 0, 0, None)  # an empty log: a master accepts it


def pair(cluster: Cluster, ns: str, role: str, master_props: dict[str, Any] | None = None,
         slave_props: dict[str, Any] | None = None, **props: object) -> tuple[Daemon, Daemon]:
    common: dict[str, Any] = {"mapedFileSizeCommitLog": CL_FILE,
                              "mapedFileSizeConsumeQueue": 20 * 1000,
                              "slaveSyncInterval": 300, **props}
    master = cluster.broker("broker-a", ns, brokerRole=role, **common, **(master_props or {}))
    slave = cluster.broker("broker-a-s", ns, brokerName="broker-a", brokerId=1,
                           brokerRole="SLAVE", **common, **(slave_props or {}))
    return master, slave


async def setup_topic(ns: str, master: Daemon) -> None:
    async with MQAdmin(ns, credentials=ADMIN) as admin:
        await admin.create_topic(TOPIC, broker_addr=master.addr, read_queue_nums=1,
                                 write_queue_nums=1)
        await wait_until(routed(admin, TOPIC), TIMEOUT, "topic routed")


async def acknowledged(producer: Producer, what: str, timeout: float = TIMEOUT) -> None:
    """A SYNC_MASTER send answered SEND_OK: a slave acknowledges."""
    async def ok() -> bool:
        return (await producer.send(Message(TOPIC, b"probe"))).send_status == SendStatus.SEND_OK
    await wait_until(ok, timeout, what)


async def challenges(port: int) -> bool:
    """Whether the master answers the greeting with a challenge."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(GREETING)
        with trio.move_on_after(5):
            try:
                return (await stream.receive_some(CHALLENGE_SIZE)).startswith(b"RMQC")
            except trio.BrokenResourceError:
                return False
    return False


async def receive_exactly(stream: trio.abc.Stream, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            data = await stream.receive_some(n - len(buf))
        except trio.BrokenResourceError:
            return None
        if not data:
            return None
        buf += data
    return buf


async def say_hello(port: int, greet: bool, cred: AclCredentials | None = None,
                    after: bytes = b"") -> trio.SocketStream | None:
    """A connection that said a valid hello of an empty slave of broker-a (and
    ``after``); None when the master closed it before its challenge."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    kw: dict[str, Any] = {}
    if greet:
        await stream.send_all(GREETING)
        got = await receive_exactly(stream, CHALLENGE_SIZE)
        if got is None:
            await stream.aclose()
            return None
        kw["challenge"] = got[5:].hex()
    hello = make_hello("broker-a", "DefaultCluster", int(time.time() * 1000),
                       secrets.token_hex(8), cred.access_key if cred else None,
                       cred.secret_key if cred else None, log=EMPTY, **kw)
    try:
        await stream.send_all(encode_hello(hello) + after)
    except trio.BrokenResourceError:
        await stream.aclose()
        return None
    return stream


async def ha_status(ns: str, broker: Daemon) -> dict[str, Any]:
    async with MQAdmin(ns, credentials=ADMIN) as admin:
        info: dict[str, Any] = (await admin.broker_runtime_info(broker.addr))["ha"]
        return info


def rss_kib(daemon: Daemon) -> int:
    """The daemon's resident anonymous memory (KiB)."""
    assert daemon.proc is not None
    status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
    m = re.search(r"RssAnon:\s+(\d+) kB", status)
    assert m is not None
    return int(m.group(1))


# ---- row 9 ------------------------------------------------------------------------------


async def test_a_flood_of_hellos_does_not_keep_the_slave_out(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "SYNC_MASTER", syncFlushTimeout=2500)
    ha_port = master.port + 1
    await setup_topic(ns.addr, master)
    greet = await challenges(ha_port)
    async with Producer("ha-port-flood", ns.addr) as producer:
        await acknowledged(producer, "the slave acknowledging sends")
        # 4,100 connect-hello-close (an older master remembered 4,096 hellos' nonces
        # for 120 s and refused any hello past them); 28 at a time stays under the
        # 32 connections a master lets sit in their hello
        sent = 0

        async def flood(n: int) -> None:
            nonlocal sent
            for _ in range(n):
                stream = await say_hello(ha_port, greet)
                if stream is not None:
                    sent += 1
                    await stream.aclose()
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(28):
                nursery.start_soon(flood, 4100 // 28 + 1)
        print(f"flood: {sent} hellos in {trio.current_time() - t0:.1f}s")
        assert sent >= 4100
        # the real slave reconnects (restarted) and replicates at once
        slave.stop()
        slave.start()
        await acknowledged(producer, "the reconnected slave acknowledging sends")
    assert "hello replayed" not in master.log_text()


async def test_connections_stuck_in_their_hello_do_not_keep_the_slave_out(
        cluster: Cluster) -> None:
    """40 connections from another address that start a greeting and stop, each
    opened again once the master closes it: they hold every slot for connections
    in their hello (an older master refused the slave's while 32 did, for ever);
    the restarted slave's connection takes one of theirs and replicates."""
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "SYNC_MASTER", syncFlushTimeout=2500)
    ha_port = master.port + 1
    await setup_topic(ns.addr, master)
    opened = 0

    async def hold_one() -> None:
        nonlocal opened
        while True:
            stream = await trio.open_tcp_stream("127.0.0.1", ha_port, local_address="127.0.0.2")
            opened += 1
            async with stream:
                try:
                    await stream.send_all(b"RMQ")  # a greeting (or hello) begun, no more
                    await stream.receive_some(65536)  # until the master closes it
                except trio.BrokenResourceError:
                    pass
            await trio.sleep(0.05)

    async with Producer("ha-port-stuck", ns.addr) as producer:
        await acknowledged(producer, "the slave acknowledging sends")
        slave.stop()
        async with trio.open_nursery() as attack:
            for _ in range(40):
                attack.start_soon(hold_one)

            async def holding() -> bool:
                return opened >= 40
            await wait_until(holding, TIMEOUT, "the connections opened")
            await trio.to_thread.run_sync(slave.start)
            await acknowledged(producer, "the restarted slave acknowledging sends")
            status = await ha_status(ns.addr, master)
            attack.cancel_scope.cancel()
    print(f"stuck hellos: {opened} connections opened; HA {status}")
    assert status["hellosDropped"] > 0


# ---- row 10 -----------------------------------------------------------------------------


async def test_connections_that_never_read_are_bounded(cluster: Cluster) -> None:
    ns = cluster.namesrv()
    limit = 8
    master, slave = pair(cluster, ns.addr, "SYNC_MASTER", syncFlushTimeout=2500,
                         master_props={"haMaxConnections": limit},
                         haSendHeartbeatInterval=1000, haHousekeepingInterval=5000)
    ha_port = master.port + 1
    await setup_topic(ns.addr, master)
    greet = await challenges(ha_port)
    async with Producer("ha-port-never-read", ns.addr) as producer:
        await acknowledged(producer, "the slave acknowledging sends")
        for _ in range(60):  # 12 MB for each connection to be sent (not compressible)
            r = await producer.send(Message(TOPIC, os.urandom(200_000)))
            assert r.send_status == SendStatus.SEND_OK, r
        before = rss_kib(master)
        # 64 connections: a valid hello of an empty slave and its report, then they
        # read the master's answer and nothing more
        admitted: list[trio.SocketStream] = []
        refused = 0
        for _ in range(64):
            stream = await say_hello(ha_port, greet, after=encode_report(0))
            if stream is None:
                refused += 1
                continue
            decoder, got = AnswerDecoder(), None
            with trio.move_on_after(5):
                while got is None:
                    try:
                        data = await stream.receive_some(65536)
                    except trio.BrokenResourceError:
                        data = b""
                    if not data:
                        break
                    got = decoder.feed(data)
            if got is None:
                refused += 1
                await stream.aclose()
            else:
                admitted.append(stream)
        async def keep_reporting() -> None:  # alive, so only their not reading shows
            while True:
                for s in admitted:
                    try:
                        await s.send_all(encode_report(0))
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                await trio.sleep(0.5)

        async def closed_by_master() -> bool:
            return bool((await ha_status(ns.addr, master))["connections"] == 1)

        try:
            async with trio.open_nursery() as reporting:
                reporting.start_soon(keep_reporting)
                status = await ha_status(ns.addr, master)
                peak = rss_kib(master)
                for _ in range(10):  # the writers fill what they may
                    await trio.sleep(0.05)
                    peak = max(peak, rss_kib(master))
                print(f"never-reading connections: {len(admitted)} admitted, {refused} "
                      f"refused; master RssAnon {before} KiB -> {peak} KiB; HA {status}")
                assert len(admitted) <= limit - 1 and refused >= 64 - limit + 1
                assert status["connections"] <= limit
                assert status["connectionsRefused"] >= 64 - limit
                assert "HA connection refused" in master.log_text()
                # the real slave (connected first) still acknowledges every send
                for _ in range(20):
                    r = await producer.send(Message(TOPIC, b"y" * 1000))
                    assert r.send_status == SendStatus.SEND_OK, r
                await wait_until(closed_by_master, TIMEOUT, "the master closing what is not read")
                reporting.cancel_scope.cancel()
        finally:
            for s in admitted:
                await s.aclose()
        assert "does not read" in master.log_text()


# ---- row 11 -----------------------------------------------------------------------------


async def pipe(src: trio.abc.Stream, dst: trio.abc.Stream, record: bytearray | None) -> None:
    try:
        while data := await src.receive_some(65536):
            if record is not None:
                record += data
            await dst.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    with trio.move_on_after(1):
        await dst.aclose()


async def test_a_captured_hello_replayed_after_a_master_restart_is_refused(
        cluster: Cluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv()
    proxy_port = free_port(1)
    master, slave = pair(cluster, ns.addr, "SYNC_MASTER", syncFlushTimeout=2500,
                         master_props={"aclEnable": "true", "aclPlainFile": acl},
                         slave_props={"haMasterAddress": f"127.0.0.1:{proxy_port}"},
                         brokerAccessKey=ADMIN.access_key, brokerSecretKey=ADMIN.secret_key)
    ha_port = master.port + 1
    captured = bytearray()  # what the slave sent on its first HA connection

    async def relay(client: trio.SocketStream) -> None:
        server = await trio.open_tcp_stream("127.0.0.1", ha_port)
        record = captured if not captured else None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pipe, client, server, record)
            nursery.start_soon(pipe, server, client, None)

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(proxy_port, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, relay, listeners)
        await setup_topic(ns.addr, master)
        async with Producer("ha-port-replay", ns.addr, credentials=ADMIN) as producer:
            await acknowledged(producer, "the slave (through the relay) acknowledging sends")
        assert b'"AccessKey"' in captured  # a signed hello went by
        slave.stop()
        nursery.cancel_scope.cancel()
    master.stop()
    master.start()
    # the captured bytes replayed at once (well within the hello's 60 s)
    stream = await trio.open_tcp_stream("127.0.0.1", ha_port)
    got = bytearray()
    async with stream:
        await stream.send_all(bytes(captured))
        with trio.move_on_after(TIMEOUT):
            while True:
                try:
                    data = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    break
                if not data:
                    break
                got += data
    assert b"RMQA" not in got, "the master answered the replayed hello"
    assert "does not answer this connection's challenge" in master.log_text()


# ---- row 12 -----------------------------------------------------------------------------


async def test_an_empty_slave_refuses_a_first_transfer_far_past_the_masters_start(
        cluster: Cluster) -> None:
    ns = cluster.namesrv()
    proxy_port = free_port(1)
    master = cluster.broker("broker-a", ns.addr, brokerRole="ASYNC_MASTER",
                            mapedFileSizeCommitLog=CL_FILE,
                            mapedFileSizeConsumeQueue=20 * 1000)
    ha_port = master.port + 1
    await setup_topic(ns.addr, master)
    async with Producer("ha-port-far", ns.addr) as producer:
        for i in range(50):
            assert (await producer.send(Message(TOPIC, f"m{i}".encode() * 100))).send_status \
                == SendStatus.SEND_OK
    far = 1000 * CL_FILE
    attacks = 0

    async def man_in_the_middle(client: trio.SocketStream) -> None:
        """The first connection: the real master's handshake relayed, then its first
        transfer sent on at ``far``; later ones relayed as they are."""
        nonlocal attacks
        server = await trio.open_tcp_stream("127.0.0.1", ha_port)
        if attacks:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pipe, client, server, None)
                nursery.start_soon(pipe, server, client, None)
            return
        attacks += 1
        slave_closed = trio.Event()

        async def forward() -> None:
            await pipe(client, server, None)
            slave_closed.set()

        async with client, server, trio.open_nursery() as nursery:
            nursery.start_soon(forward)
            buf = bytearray()
            while len(buf) < 4:
                buf += await server.receive_some(65536)
            if buf.startswith(b"RMQC"):  # version 3 on: the challenge goes to the slave
                while len(buf) < CHALLENGE_SIZE:
                    buf += await server.receive_some(65536)
                await client.send_all(bytes(buf[:CHALLENGE_SIZE]))
                del buf[:CHALLENGE_SIZE]
            decoder = AnswerDecoder()
            got = decoder.feed(buf)
            while got is None:
                got = decoder.feed(await server.receive_some(65536))
            frame, rest = got
            answer = frame.answer
            assert answer.verdict == "accept" and answer.min_offset == 0, answer
            await client.send_all(encode_answer(answer))  # the real answer: accept from 0
            transfers = TransferDecoder()
            frames = transfers.feed(rest)
            while not any(data for _, data in frames):
                frames = transfers.feed(await server.receive_some(65536))
            offset, data = next((o, d) for o, d in frames if d)
            assert offset == 0
            await client.send_all(encode_transfer(far, data))  # ... sent on far away
            with trio.move_on_after(TIMEOUT):  # until the slave closes (or forever)
                await slave_closed.wait()
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(proxy_port, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, man_in_the_middle, listeners)
        slave = cluster.broker("broker-a-s", ns.addr, brokerName="broker-a", brokerId=1,
                               brokerRole="SLAVE", mapedFileSizeCommitLog=CL_FILE,
                               mapedFileSizeConsumeQueue=20 * 1000,
                               haMasterAddress=f"127.0.0.1:{proxy_port}")

        async def caught_up() -> bool:
            m, s = await ha_status(ns.addr, master), await ha_status(ns.addr, slave)
            return bool(s["maxOffset"] == m["maxOffset"] and s.get("link") == "accepted")
        await wait_until(caught_up, TIMEOUT, "the slave following the real master")
        nursery.cancel_scope.cancel()
    assert attacks == 1
    status = await ha_status(ns.addr, slave)
    assert status["maxOffset"] < far
    assert re.search(r"master transfer of \d+ bytes at offset " + str(far), slave.log_text())


# ---- row 13 -----------------------------------------------------------------------------


async def fake_master(client: trio.SocketStream, secret: str | None, lie: Answer,
                      transfer: bytes) -> None:
    """A master without the slave's account secret: the handshake as a master
    speaks it, then ``lie`` (signed with ``secret``, None: unsigned) and
    ``transfer``, until the slave closes."""
    async with client:
        greeting, rest = GreetingDecoder(), None
        while rest is None:
            rest = greeting.feed(await client.receive_some(65536))
        await client.send_all(encode_challenge(new_challenge()))
        decoder = HelloDecoder()
        got = decoder.feed(rest) if rest else None
        while got is None:
            got = decoder.feed(await client.receive_some(65536))
        hello, _ = got
        key = AnswerKey(hello.slave_challenge, ADMIN.access_key, secret) if secret else None
        await client.send_all(encode_answer(lie, key) + transfer)
        with trio.move_on_after(TIMEOUT):  # until the slave closes
            try:
                while await client.receive_some(65536):
                    pass
            except trio.BrokenResourceError:
                pass


async def test_a_fake_master_without_the_secret_is_refused(cluster: Cluster,
                                                           tmp_path: Path) -> None:
    """The slave (brokerAccessKey) is sent to a fake master: one closing at its
    greeting (an older master), one answering with a log start far past the
    real one signed with a wrong secret, one with no signature. Each refused,
    the slave's log stays empty and its status names the reason; released to
    the real master (aclEnable), it follows it."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    ns = cluster.namesrv()
    cred: dict[str, Any] = {"brokerAccessKey": ADMIN.access_key,
                            "brokerSecretKey": ADMIN.secret_key,
                            "mapedFileSizeCommitLog": CL_FILE,
                            "mapedFileSizeConsumeQueue": 20 * 1000}
    master = cluster.broker("broker-a", ns.addr, brokerRole="ASYNC_MASTER", aclEnable="true",
                            aclPlainFile=acl, **cred)
    ha_port = master.port + 1
    await setup_topic(ns.addr, master)
    async with Producer("ha-port-fake", ns.addr, credentials=ADMIN) as producer:
        for i in range(50):
            assert (await producer.send(Message(TOPIC, f"m{i}".encode() * 100))).send_status \
                == SendStatus.SEND_OK
    # a slave of the previous handshake version: the master names both versions
    stream = await trio.open_tcp_stream("127.0.0.1", ha_port)
    async with stream:
        await stream.send_all(b"RMQC\x03")
        assert await receive_exactly(stream, len(GREETING)) == GREETING
    assert "HA handshake version 3 not understood (this master speaks 4" in master.log_text()

    far = 1000 * CL_FILE
    first_file = tmp_path / "store-broker-a" / "commitlog" / f"{0:020d}"
    records = first_file.read_bytes()[:4096]  # the master's own records, sent at ``far``
    lie = Answer("accept", "", "fake", (), far, far + len(records))
    transfer = encode_transfer(far, records)
    seen = 0
    release = trio.Event()

    async def proxy(client: trio.SocketStream) -> None:
        nonlocal seen
        seen += 1
        if seen == 1:  # an older master closes at the greeting
            async with client:
                await receive_exactly(client, len(GREETING))
        elif seen == 2:
            await fake_master(client, "wrongsecret1", lie, transfer)
        elif seen == 3:
            await fake_master(client, None, lie, transfer)
        else:
            await release.wait()
            server = await trio.open_tcp_stream("127.0.0.1", ha_port)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pipe, client, server, None)
                nursery.start_soon(pipe, server, client, None)

    proxy_port = free_port(1)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(proxy_port, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, proxy, listeners)
        slave = cluster.broker("broker-a-s", ns.addr, brokerName="broker-a", brokerId=1,
                               brokerRole="SLAVE", haMasterAddress=f"127.0.0.1:{proxy_port}",
                               **cred)

        async def both_refused() -> bool:
            log = slave.log_text()
            return seen >= 4 and "not signed" in log and "signature check failed" in log
        await wait_until(both_refused, TIMEOUT, "the slave refusing both fake masters")
        status = await ha_status(ns.addr, slave)
        print(f"after the fake masters: {status}")
        assert status["maxOffset"] == 0 and status["link"] == "refused", status
        assert "the master's answer is not signed" in status["linkReason"], status
        log = slave.log_text()
        assert "closed the HA connection before its challenge (an older master" in log
        assert re.search(r"this slave refuses its master's answer .*signature check failed "
                         r"for accessKey=" + ADMIN.access_key, log)
        assert not list((tmp_path / "store-broker-a-s" / "commitlog").glob(f"{far:020d}"))
        release.set()

        async def caught_up() -> bool:
            m, s = await ha_status(ns.addr, master), await ha_status(ns.addr, slave)
            return bool(s["maxOffset"] == m["maxOffset"] and s.get("link") == "accepted")
        await wait_until(caught_up, TIMEOUT, "the slave following the real master")
        nursery.cancel_scope.cancel()
    assert "linkReason" not in await ha_status(ns.addr, slave)
    assert "answer_signed=True" in master.log_text()


async def test_a_master_without_acl_signs_with_its_own_credentials(cluster: Cluster) -> None:
    """No aclEnable, but master and slave share brokerAccessKey/brokerSecretKey
    (a name server with ACL, say): the master signs its answer with them, and
    the slave, which requires a signed answer, follows it."""
    ns = cluster.namesrv()
    master, slave = pair(cluster, ns.addr, "ASYNC_MASTER", brokerAccessKey=ADMIN.access_key,
                         brokerSecretKey=ADMIN.secret_key)

    async def accepted() -> bool:
        return bool((await ha_status(ns.addr, slave)).get("link") == "accepted")
    await wait_until(accepted, TIMEOUT, "the slave accepting its master's signed answer")
    assert re.search(r"slave hello accepted .*access_key=" + ADMIN.access_key
                     + r" answer_signed=True", master.log_text())
    assert "refuses its master's answer" not in slave.log_text()
