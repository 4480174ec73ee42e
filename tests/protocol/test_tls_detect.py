"""TLS on the remoting layer: the pure pieces (modes, first-byte detection,
settings checks) and a RemotingServer in each tlsMode with RemotingClients."""

from __future__ import annotations

import ssl

import pytest
import trio

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from protocol.trio.client import RemotingClient
from protocol.trio.connection import HandlerTable
from protocol.trio.errors import RemotingConnectError, RemotingError
from protocol.trio.limits import ConnectionLimits
from protocol.trio.server import RemotingServer
from protocol.trio.tls import (
    IGNORE_UNEXPECTED_EOF,
    REQUIRES_TLS,
    ClientTls,
    ServerTls,
    TlsConfigError,
    client_tls,
    client_tls_from_env,
    is_tls_first_byte,
    new_context,
    parse_client_auth,
    parse_mode,
)
from tests.tls_certs import Certs, tls_certs_fixture  # noqa: F401 (the tls_certs fixture)
from tests.waits import wait_until

ECHO = 3


# ---- pure ---------------------------------------------------------------------------


def test_modes_parse_case_insensitively_and_unknown_ones_are_refused() -> None:
    assert parse_mode(" Enforcing ") == "enforcing"
    assert parse_mode("disabled") == "disabled"
    with pytest.raises(TlsConfigError, match="tlsMode must be one of"):
        parse_mode("strict")


def test_a_client_hello_is_told_from_our_frames_and_rocketmqs() -> None:
    assert is_tls_first_byte(0x16)
    # a frame's 4-byte big-endian length starts with 0 below 16 MiB
    frame = encode_frame(RemotingCommand(code=ECHO, opaque=1).encode())
    assert not is_tls_first_byte(frame[0])
    assert not is_tls_first_byte(encode_frame(b"x" * (16 * 1024 * 1024 - 5))[0])
    # what ssl itself sends first
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    assert is_tls_first_byte(outgoing.read()[0])


def test_a_connection_dropped_without_close_notify_is_an_error_on_every_build(
    tls_certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # some Python builds (Debian's 3.11.2) set the option by default: a refused
    # client then read a clean end of stream and lost the reason
    made = ssl.create_default_context

    def like_such_a_build(purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH) -> ssl.SSLContext:
        ctx = made(purpose)
        ctx.options |= IGNORE_UNEXPECTED_EOF
        return ctx

    monkeypatch.setattr(ssl, "create_default_context", like_such_a_build)
    assert ssl.create_default_context().options & IGNORE_UNEXPECTED_EOF == IGNORE_UNEXPECTED_EOF
    contexts = [new_context(ssl.Purpose.SERVER_AUTH), new_context(ssl.Purpose.CLIENT_AUTH),
                ClientTls(ca_path=tls_certs.ca).context(),
                server_tls(tls_certs, "enforcing", "require").context()]
    for ctx in contexts:
        assert ctx is not None and not ctx.options & IGNORE_UNEXPECTED_EOF


def test_server_settings_problems_name_the_key() -> None:
    assert ServerTls().problem() is None  # permissive without certificates: plain only
    assert not ServerTls().serves_tls
    assert ServerTls(mode="disabled", cert_path="a").problem() is None
    assert "certPath and tls.server.keyPath" in str(ServerTls(cert_path="a").problem())
    assert "tlsMode=enforcing needs" in str(ServerTls(mode="enforcing").problem())
    need = ServerTls(cert_path="a", key_path="b", need_client_auth="require")
    assert "trustCertPath" in str(need.problem())
    assert "must be one of" in str(ServerTls(need_client_auth="always").problem())
    assert parse_client_auth(" TRUE") == "require" and parse_client_auth("false") == "none"
    assert parse_client_auth("Optional") == "optional"
    with pytest.raises(TlsConfigError, match="need.client.auth"):
        parse_client_auth("yes please")
    with pytest.raises(TlsConfigError, match="no such file"):
        ServerTls(cert_path="/nonexistent.pem", key_path="/nonexistent.key").context()


def test_client_settings() -> None:
    assert client_tls() is None
    with pytest.raises(TlsConfigError, match="without use_tls"):
        client_tls(ca_path="ca.pem")
    assert client_tls(True, "ca.pem") == ClientTls(ca_path="ca.pem")
    with pytest.raises(TlsConfigError, match="together"):
        ClientTls(cert_path="c.pem").context()
    assert client_tls_from_env({}) is None
    assert client_tls_from_env({"ROCKETMQ_TLS_ENABLE": "true", "ROCKETMQ_TLS_CA": "x"}) == \
        ClientTls(ca_path="x")


# ---- live, in one process --------------------------------------------------------------


def handlers() -> HandlerTable:
    t = HandlerTable()
    t.register(ECHO, lambda conn, cmd: cmd.response(ResponseCode.SUCCESS, body=cmd.body))
    return t


def server_tls(certs: Certs, mode: str = "permissive", need_client_auth: str = "none") -> ServerTls:
    return ServerTls(mode=mode, cert_path=certs.server_cert, key_path=certs.server_key,
                     trust_cert_path=certs.ca, need_client_auth=need_client_auth)


async def echo(client: RemotingClient, port: int, body: bytes = b"hello") -> RemotingCommand:
    return await client.invoke(f"127.0.0.1:{port}", RemotingCommand(code=ECHO, body=body), 5)


async def test_permissive_serves_tls_and_plain_on_one_port(tls_certs: Certs) -> None:
    server = RemotingServer(handlers(), tls=server_tls(tls_certs))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        async with RemotingClient(tls=ClientTls(ca_path=tls_certs.ca)) as secure, \
                RemotingClient() as plain:
            for client in (secure, plain):
                answer = await echo(client, port, b"x" * 300_000)
                assert answer.code == ResponseCode.SUCCESS and answer.body == b"x" * 300_000
            conns = list(server.connections)
            assert sorted(type(c.stream).__name__ for c in conns) == ["SSLStream", "SocketStream"]
        nursery.cancel_scope.cancel()


async def test_enforcing_answers_a_plain_client_that_tls_is_required(tls_certs: Certs) -> None:
    server = RemotingServer(handlers(), tls=server_tls(tls_certs, "enforcing"))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        async with RemotingClient() as plain:
            answer = await echo(plain, port)
            assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark == REQUIRES_TLS
        async with RemotingClient(tls=ClientTls(ca_path=tls_certs.ca)) as secure:
            assert (await echo(secure, port)).code == ResponseCode.SUCCESS
        nursery.cancel_scope.cancel()


async def test_a_wrong_ca_fails_with_a_clear_message(tls_certs: Certs) -> None:
    server = RemotingServer(handlers(), tls=server_tls(tls_certs, "enforcing"))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        async with RemotingClient(tls=ClientTls(ca_path=tls_certs.wrong_ca)) as client:
            with pytest.raises(RemotingConnectError, match="certificate verification failed"):
                await echo(client, port)
        nursery.cancel_scope.cancel()


async def test_a_tls_client_of_a_plain_server_is_told_why(tls_certs: Certs) -> None:
    server = RemotingServer(handlers())  # disabled
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        async with RemotingClient(tls=ClientTls(ca_path=tls_certs.ca)) as client:
            with pytest.raises(RemotingConnectError, match="TLS handshake with .* failed"):
                await echo(client, port)
        nursery.cancel_scope.cancel()


async def test_need_client_auth_refuses_a_client_without_a_certificate(tls_certs: Certs) -> None:
    server = RemotingServer(handlers(), tls=server_tls(tls_certs, "enforcing", "require"))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        async with RemotingClient(tls=ClientTls(ca_path=tls_certs.ca)) as anonymous:
            # TLS 1.3: the server's refusal arrives after the client's handshake
            with pytest.raises(RemotingError, match="(?i)certificate"):
                await echo(anonymous, port)
        await wait_until(lambda: not server.connections, 5, "no connection left", interval=0.01)
        mine = ClientTls(ca_path=tls_certs.ca, cert_path=tls_certs.client_cert,
                         key_path=tls_certs.client_key)
        async with RemotingClient(tls=mine) as client:
            assert (await echo(client, port)).code == ResponseCode.SUCCESS
        nursery.cancel_scope.cancel()


async def test_a_stalled_handshake_is_closed_in_time(tls_certs: Certs) -> None:
    limits = ConnectionLimits(frame_timeout=0.5, idle_timeout=1.0)
    server = RemotingServer(handlers(), tls=server_tls(tls_certs), limits=limits)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        stalled = await trio.open_tcp_stream("127.0.0.1", port)
        await stalled.send_all(b"\x16\x03\x01")  # a record header, then nothing
        silent = await trio.open_tcp_stream("127.0.0.1", port)  # not a byte
        with trio.fail_after(5):
            assert await stalled.receive_some(10) == b""
            assert await silent.receive_some(10) == b""
        await wait_until(lambda: not server.per_host, 5, "no longer counted against the address",
                         interval=0.01)
        assert not server.connections
        await stalled.aclose()
        await silent.aclose()
        nursery.cancel_scope.cancel()


async def test_garbage_after_a_tls_record_byte_is_closed_and_the_server_goes_on(
        tls_certs: Certs) -> None:
    server = RemotingServer(handlers(), tls=server_tls(tls_certs))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        for junk in (b"\x16" + b"\xff" * 600, b"\x16\x03\x01\x00\x05hello", b"\x16"):
            peer = await trio.open_tcp_stream("127.0.0.1", port)
            await peer.send_all(junk)
            await peer.send_eof()
            with trio.fail_after(15):
                while await peer.receive_some(4096):
                    pass  # a TLS alert at most, then the end
            await peer.aclose()
        async with RemotingClient(tls=ClientTls(ca_path=tls_certs.ca)) as client:
            assert (await echo(client, port)).code == ResponseCode.SUCCESS
        nursery.cancel_scope.cancel()
