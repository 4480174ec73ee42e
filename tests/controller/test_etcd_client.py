"""The etcd client (controller/etcd.py): endpoints, the JSON bodies and answers, the
HTTP exchange fed any split of bytes (all without sockets); then EtcdClient against
small in-test HTTP servers on 127.0.0.1: failover between endpoints, a write not
sent twice, answers bounded in size and time."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.etcd import (
    GRPC_NOT_FOUND,
    Compare,
    Endpoint,
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    Get,
    HttpExchange,
    HttpResponse,
    KeyValue,
    Put,
    b64,
    compare_body,
    error_of,
    parse_endpoints,
    parse_grant,
    parse_keepalive,
    parse_kvs,
    parse_txn,
    txn_body,
)

HEADER = {"cluster_id": "3249", "member_id": "3319", "revision": "4", "raft_term": "2"}


# --- endpoints ------------------------------------------------------------------------------

def test_endpoints_parsed_from_one_string_or_a_list() -> None:
    assert parse_endpoints("http://127.0.0.1:2379") == [Endpoint("127.0.0.1", 2379)]
    assert parse_endpoints("http://a:1;b:2, http://c:3/") == [
        Endpoint("a", 1), Endpoint("b", 2), Endpoint("c", 3)]
    assert parse_endpoints(["a:1", "b:2"]) == [Endpoint("a", 1), Endpoint("b", 2)]


@pytest.mark.parametrize("bad, why", [
    ("", "no etcd endpoint"),
    (" ; ,", "no etcd endpoint"),
    ("https://a:2379", "only http"),
    ("http://a", "host and port"),
    ("http://a:2379/v3", "host:port only"),
    ("http://a:99999", "etcd endpoint"),
    (";".join(f"h{i}:1" for i in range(17)), "at most 16"),
])
def test_bad_endpoints_refused(bad: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_endpoints(bad)


# --- bodies and answers ----------------------------------------------------------------------

def test_txn_body_as_the_gateway_takes_it() -> None:
    body = txn_body([Compare(b"/s", "MOD", 7), Compare(b"/l", "LEASE", 42),
                     Compare(b"/s", "CREATE", 0), Compare(b"/l", "VALUE", b"me")],
                    [Put(b"/s", b"data"), Put(b"/l", b"me", lease=42)], [Get(b"/s")])
    assert body == {
        "compare": [
            {"key": b64(b"/s"), "target": "MOD", "result": "EQUAL", "mod_revision": "7"},
            {"key": b64(b"/l"), "target": "LEASE", "result": "EQUAL", "lease": "42"},
            {"key": b64(b"/s"), "target": "CREATE", "result": "EQUAL", "create_revision": "0"},
            {"key": b64(b"/l"), "target": "VALUE", "result": "EQUAL", "value": b64(b"me")},
        ],
        "success": [
            {"request_put": {"key": b64(b"/s"), "value": b64(b"data")}},
            {"request_put": {"key": b64(b"/l"), "value": b64(b"me"), "lease": "42"}},
        ],
        "failure": [{"request_range": {"key": b64(b"/s")}}],
    }
    with pytest.raises(TypeError):
        compare_body(Compare(b"/s", "MOD", b"7"))
    with pytest.raises(TypeError):
        compare_body(Compare(b"/s", "VALUE", 7))


def test_range_answer_parsed() -> None:
    doc = {"header": HEADER, "kvs": [{"key": "L2s=", "create_revision": "2", "mod_revision": "3",
                                      "version": "2", "value": "djE=", "lease": "77"}],
           "count": "1"}
    assert parse_kvs(doc) == (KeyValue(b"/k", b"v1", 2, 3, 2, 77),)
    assert parse_kvs({"header": HEADER}) == ()
    # an empty value is left out by the gateway
    assert parse_kvs({"kvs": [{"key": "L2s=", "mod_revision": "3"}]})[0].value == b""


@pytest.mark.parametrize("kvs, why", [
    ("nope", "not a list"),
    (["nope"], "not a JSON object"),
    ([{"key": "***", "mod_revision": "1"}], "not base64"),
    ([{"key": 5}], "non-string key"),
    ([{"key": "L2s=", "mod_revision": "x"}], "non-number mod_revision"),
    ([{"key": "L2s=", "mod_revision": True}], "non-number mod_revision"),
    ([{"key": "L2s=", "mod_revision": str(2**70)}], "out of range"),
])
def test_malformed_range_answers_are_errors(kvs: object, why: str) -> None:
    with pytest.raises(EtcdError, match=why):
        parse_kvs({"kvs": kvs})


def test_txn_answers_parsed() -> None:
    won = {"header": {**HEADER, "revision": "5"}, "succeeded": True,
           "responses": [{"response_put": {"header": {"revision": "5"}}}]}
    assert parse_txn(won).succeeded and parse_txn(won).revision == 5
    assert parse_txn(won).ranges == ((),)
    lost = {"header": HEADER, "responses": [
        {"response_range": {"header": {"revision": "4"}, "kvs": [
            {"key": "L2xlYWQ=", "create_revision": "4", "mod_revision": "4", "version": "1",
             "value": "bWU=", "lease": "2324"}], "count": "1"}},
        {"response_range": {"header": {"revision": "4"}}}]}
    result = parse_txn(lost)
    assert not result.succeeded and result.revision == 4
    assert result.ranges == ((KeyValue(b"/lead", b"me", 4, 4, 1, 2324),), ())
    with pytest.raises(EtcdError):
        parse_txn({"succeeded": "yes"})
    with pytest.raises(EtcdError):
        parse_txn({"responses": {}})


def test_lease_answers_parsed() -> None:
    assert parse_grant({"header": HEADER, "ID": "2324", "TTL": "3"}).ttl == 3
    with pytest.raises(EtcdError, match="no usable lease"):
        parse_grant({"header": HEADER, "ID": "2324"})
    with pytest.raises(EtcdError, match="refused"):
        parse_grant({"error": "etcdserver: too many requests"})
    alive = b'{"result":{"header":{"revision":"3"},"ID":"2324","TTL":"5"}}\n'
    assert parse_keepalive(alive) == 5
    # the gateway leaves TTL out for a lease that is gone
    assert parse_keepalive(b'{"result":{"header":{"revision":"5"},"ID":"2324"}}') == 0
    streamed = b'{"error":{"grpc_code":5,"message":"etcdserver: requested lease not found"}}'
    with pytest.raises(EtcdError, match="lease not found"):
        parse_keepalive(streamed)
    with pytest.raises(EtcdError, match="not JSON"):
        parse_keepalive(b"<html>")
    with pytest.raises(EtcdError):
        parse_keepalive(b'{"result": 5}')


def test_error_answers_keep_the_gateway_reason_and_code() -> None:
    gone = HttpResponse(404, b'{"error":"etcdserver: requested lease not found",'
                             b'"message":"etcdserver: requested lease not found","code":5}')
    e = error_of(gone, "h:1/v3/lease/revoke")
    assert type(e) is EtcdError and e.code == GRPC_NOT_FOUND
    assert "HTTP 404: 'etcdserver: requested lease not found'" in str(e)
    no_leader = HttpResponse(503, b'{"error":"etcdserver: no leader","code":14}')
    assert isinstance(error_of(no_leader, "x"), EtcdUnavailable)
    assert isinstance(error_of(HttpResponse(502, b"bad gateway"), "x"), EtcdUnavailable)
    plain = error_of(HttpResponse(400, b"not json at all"), "x")
    assert plain.code is None and "not json at all" in str(plain)


# --- the HTTP exchange, sans-IO ------------------------------------------------------------------

def exchange(max_body: int = 1000) -> HttpExchange:
    return HttpExchange(Endpoint("127.0.0.1", 2379), "/v3/kv/range", b'{"key":"L2s="}', max_body)


def test_request_is_one_post_with_length_and_close() -> None:
    head, _, body = exchange().request.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v3/kv/range HTTP/1.1"
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    assert headers[b"host"] == b"127.0.0.1:2379"
    assert headers[b"content-length"] == b"14" and headers[b"connection"] == b"close"
    assert body == b'{"key":"L2s="}'


LENGTH_ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
                 b'{"a":"bcd"}')
CHUNKED_ANSWER = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b'6\r\n{"a":"\r\n5\r\nbcd"}\r\n0\r\n\r\n')


@pytest.mark.parametrize("answer", [LENGTH_ANSWER, CHUNKED_ANSWER])
def test_answer_read_one_byte_at_a_time(answer: bytes) -> None:
    ex = exchange()
    results = [ex.feed(answer[i:i + 1]) for i in range(len(answer))]
    assert results[:-1] == [None] * (len(answer) - 1)
    assert results[-1] == HttpResponse(200, b'{"a":"bcd"}')


def test_answer_over_the_bound_is_refused() -> None:
    ex = exchange(max_body=10)
    with pytest.raises(EtcdError, match="larger than 10 bytes"):
        ex.feed(LENGTH_ANSWER)
    huge_header = b"HTTP/1.1 200 OK\r\nX: " + b"a" * 20000
    with pytest.raises(EtcdError, match="bad HTTP answer"):
        exchange().feed(huge_header)


@pytest.mark.parametrize("answer", [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"])
def test_garbage_or_early_close_is_an_error(answer: bytes) -> None:
    ex = exchange()
    with pytest.raises(EtcdError):
        ex.feed(answer)
        ex.feed(b"")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(1, 50), max_size=20))
def test_any_bytes_in_any_split_give_an_answer_or_an_etcd_error(
        data: bytes, cuts: list[int]) -> None:
    ex = exchange(max_body=100)
    try:
        pos = 0
        for n in [*cuts, len(data)]:
            if ex.feed(data[pos:pos + n]) is not None:
                return
            pos += n
            if pos >= len(data):
                break
        ex.feed(b"")
    except EtcdError:
        pass


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=40))
def test_the_same_answer_whatever_the_split(cuts: list[int]) -> None:
    ex = exchange()
    pos, result = 0, None
    while result is None and pos < len(CHUNKED_ANSWER):
        n = cuts[pos % len(cuts)]
        result = ex.feed(CHUNKED_ANSWER[pos:pos + n])
        pos += n
    assert result == HttpResponse(200, b'{"a":"bcd"}')


# --- EtcdClient against in-test HTTP servers ----------------------------------------------------

Handler = Callable[[trio.SocketStream, bytes], Awaitable[None]]


async def serve(nursery: trio.Nursery, handler: Handler) -> tuple[int, list[bytes]]:
    """An HTTP server on a free port: ``handler`` gets each connection and the
    request read so far (up to the blank line); returns its port and the requests."""
    seen: list[bytes] = []

    async def on_conn(stream: trio.SocketStream) -> None:
        data = b""
        with trio.move_on_after(5):
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                data += chunk
        seen.append(data)
        await handler(stream, data)
        await stream.aclose()

    listeners = await nursery.start(trio.serve_tcp, on_conn, 0)
    return listeners[0].socket.getsockname()[1], seen


def answer(doc: dict[str, object]) -> Handler:
    async def handler(stream: trio.SocketStream, request: bytes) -> None:
        body = json.dumps(doc).encode()
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                              % (len(body), body))
    return handler


async def silent(stream: trio.SocketStream, request: bytes) -> None:
    await trio.sleep_forever()


async def endless(stream: trio.SocketStream, request: bytes) -> None:
    await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    while True:
        await stream.send_all(b"1000\r\n" + b"x" * 4096 + b"\r\n")


def refused_port() -> int:
    from tests.integration.cluster import free_port
    return free_port(1)


async def test_failover_to_the_next_endpoint_and_remembered() -> None:
    async with trio.open_nursery() as nursery:
        port, seen = await serve(nursery, answer({"header": HEADER}))
        client = EtcdClient(f"127.0.0.1:{refused_port()};127.0.0.1:{port}", timeout=2)
        assert await client.get(b"/k") is None
        assert await client.put(Put(b"/k", b"v")) == 4  # a write not sent anywhere before
        assert len(seen) == 2 and client._preferred == 1
        nursery.cancel_scope.cancel()


async def test_read_goes_on_after_a_silent_endpoint_within_the_call_timeout() -> None:
    async with trio.open_nursery() as nursery:
        mute, _ = await serve(nursery, silent)
        port, seen = await serve(nursery, answer({"header": HEADER}))
        client = EtcdClient(f"127.0.0.1:{mute};127.0.0.1:{port}", timeout=1.0)
        start = trio.current_time()
        assert await client.get(b"/k") is None
        assert trio.current_time() - start < 1.0  # half the budget for each endpoint
        assert len(seen) == 1
        nursery.cancel_scope.cancel()


async def test_write_sent_but_unanswered_is_not_sent_again() -> None:
    async with trio.open_nursery() as nursery:
        mute, seen_mute = await serve(nursery, silent)
        port, seen = await serve(nursery, answer({"header": HEADER, "succeeded": True}))
        client = EtcdClient(f"127.0.0.1:{mute};127.0.0.1:{port}", timeout=1.0)
        with pytest.raises(EtcdUnavailable, match="outcome unknown"):
            await client.txn([Compare(b"/s", "MOD", 1)], [Put(b"/s", b"x")])
        assert len(seen_mute) == 1 and seen == []
        nursery.cancel_scope.cancel()


async def test_endless_answer_is_cut_at_the_bound() -> None:
    async with trio.open_nursery() as nursery:
        port, _ = await serve(nursery, endless)
        client = EtcdClient(f"127.0.0.1:{port}", timeout=5, max_response_bytes=100_000)
        with pytest.raises(EtcdError, match="larger than 100000 bytes"):
            await client.get(b"/k")
        nursery.cancel_scope.cancel()


async def test_refusal_from_etcd_is_not_failed_over() -> None:
    async def not_found(stream: trio.SocketStream, request: bytes) -> None:
        body = b'{"error":"etcdserver: requested lease not found","code":5}'
        await stream.send_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s"
                              % (len(body), body))

    async with trio.open_nursery() as nursery:
        first, seen1 = await serve(nursery, not_found)
        second, seen2 = await serve(nursery, answer({"header": HEADER}))
        client = EtcdClient(f"127.0.0.1:{first};127.0.0.1:{second}", timeout=2)
        with pytest.raises(EtcdError, match="lease not found") as info:
            await client.keepalive(5)
        assert info.value.code == GRPC_NOT_FOUND and len(seen1) == 1 and seen2 == []
        await client.revoke(5)  # already gone: no error
        nursery.cancel_scope.cancel()


async def test_nothing_listening_is_a_bounded_unavailable() -> None:
    client = EtcdClient([f"127.0.0.1:{refused_port()}", f"127.0.0.1:{refused_port()}"],
                        timeout=1.0)
    start = trio.current_time()
    with pytest.raises(EtcdUnavailable, match="no endpoint answered"):
        await client.get(b"/k")
    assert trio.current_time() - start < 1.5
    with pytest.raises(ValueError):
        EtcdClient("127.0.0.1:1", timeout=0)
