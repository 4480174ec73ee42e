"""The gRPC ASGI app driven in process with made-up ASGI events: what it sends and in
which order, deadlines on trio's MockClock, a client going away, bad input."""

from __future__ import annotations

import struct
from typing import Any

import pytest
import trio
import trio.testing

from broker.grpc.framing import GrpcError, MessageDecoder, StatusCode, encode_message
from broker.grpc.server import Call, GrpcApp, Method

PATH = "/test.Svc/"


class Exchange:
    """One call's ASGI side: request events fed in, what the app sends recorded."""

    def __init__(self, events: list[dict[str, Any]], hang: bool = True) -> None:
        self.events = list(events)
        self.hang = hang
        self.sent: list[dict[str, Any]] = []
        self.disconnect = trio.Event()

    async def receive(self) -> dict[str, Any]:
        if self.events:
            return self.events.pop(0)
        if self.hang:
            await self.disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def kinds(self) -> list[str]:
        return [m["type"] for m in self.sent]

    def trailers(self) -> dict[bytes, bytes]:
        assert self.sent[-1]["type"] == "http.response.trailers"
        return dict(self.sent[-1]["headers"])

    def messages(self) -> list[bytes]:
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        decoder = MessageDecoder()
        out = decoder.feed(body)
        decoder.finish()
        return out


def scope(method: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    hs = {"content-type": "application/grpc", "te": "trailers", **(headers or {})}
    return {"type": "http", "http_version": "2", "method": "POST", "path": PATH + method,
            "headers": [(k.encode(), v.encode()) for k, v in hs.items()],
            "client": ("127.0.0.1", 5555)}


def body(*payloads: bytes) -> list[dict[str, Any]]:
    return [{"type": "http.request", "body": b"".join(encode_message(p) for p in payloads),
             "more_body": False}]


async def echo(call: Call) -> None:
    await call.send(b"echo:" + await call.recv_one())


async def echo_stream(call: Call) -> None:
    while (payload := await call.recv()) is not None:
        await call.send(payload.upper())


async def forever(call: Call) -> None:
    calls.append(call.peer)
    try:
        await trio.sleep_forever()
    finally:
        cancelled.append(call.method)


async def quick_then_forever(call: Call) -> None:
    """A unary handler that does not declare it waits, yet waits."""
    calls.append(call.peer)
    try:
        await trio.sleep_forever()
    finally:
        cancelled.append(call.method)


async def two_answers(call: Call) -> None:
    request = await call.recv_one()
    await call.send(b"first:" + request)
    await call.send(b"second")


async def broken(call: Call) -> None:
    raise RuntimeError("secret detail")


async def refuses(call: Call) -> None:
    raise GrpcError(StatusCode.INVALID_ARGUMENT, "no good")


calls: list[str] = []
cancelled: list[str] = []


def app(**kw: Any) -> GrpcApp:
    return GrpcApp({PATH + "Echo": Method(echo), PATH + "Stream": Method(echo_stream, True),
                    PATH + "Forever": Method(forever, waits=True), PATH + "Broken": Method(broken),
                    PATH + "Refuses": Method(refuses), PATH + "Quick": Method(quick_then_forever),
                    PATH + "Two": Method(two_answers)}, **kw)


def assert_never_trailers_only(ex: Exchange) -> None:
    kinds = ex.kinds()
    assert kinds[0] == "http.response.start" and ex.sent[0]["trailers"] is True
    assert ex.sent[0]["status"] == 200
    assert kinds[-1] == "http.response.trailers"
    assert kinds[-2] == "http.response.body" and ex.sent[-2]["more_body"] is False
    assert set(kinds[1:-1]) == {"http.response.body"}


async def test_unary_call_headers_body_trailers() -> None:
    ex = Exchange(body(b"hi"))
    await app()(scope("Echo"), ex.receive, ex.send)
    assert_never_trailers_only(ex)
    assert ex.messages() == [b"echo:hi"]
    assert ex.trailers() == {b"grpc-status": b"0"}


async def test_request_split_anywhere() -> None:
    wire = encode_message(b"one") + encode_message(b"two") + encode_message(b"three")
    events = [{"type": "http.request", "body": wire[i:i + 3], "more_body": True}
              for i in range(0, len(wire), 3)] + [{"type": "http.request", "body": b"",
                                                   "more_body": False}]
    ex = Exchange(events)
    await app()(scope("Stream"), ex.receive, ex.send)
    assert ex.messages() == [b"ONE", b"TWO", b"THREE"]
    assert ex.trailers()[b"grpc-status"] == b"0"


async def test_unknown_method_unimplemented_with_headers_and_empty_body() -> None:
    ex = Exchange(body(b"x"))
    await app()(scope("Nope"), ex.receive, ex.send)
    assert_never_trailers_only(ex)
    assert ex.messages() == []
    assert ex.trailers()[b"grpc-status"] == b"12"
    assert b"unknown method" in ex.trailers()[b"grpc-message"]


async def test_unary_with_two_messages_or_none() -> None:
    for events in (body(b"a", b"b"), body()):
        ex = Exchange(events)
        await app()(scope("Echo"), ex.receive, ex.send)
        assert ex.trailers()[b"grpc-status"] == b"13"


async def test_oversized_message_resource_exhausted() -> None:
    ex = Exchange([{"type": "http.request", "body": struct.pack(">BI", 0, 1001),
                    "more_body": True}])
    await app(max_message_bytes=1000)(scope("Echo"), ex.receive, ex.send)
    assert_never_trailers_only(ex)
    assert ex.trailers()[b"grpc-status"] == b"8"


async def test_bad_flag_ends_the_call() -> None:
    ex = Exchange([{"type": "http.request", "body": struct.pack(">BI", 3, 1) + b"x",
                    "more_body": False}])
    await app()(scope("Echo"), ex.receive, ex.send)
    assert ex.trailers()[b"grpc-status"] == b"13"
    assert b"compression flag" in ex.trailers()[b"grpc-message"]


async def test_deadline_cancels_the_handler(autojump_clock: trio.testing.MockClock) -> None:
    cancelled.clear()
    ex = Exchange(body(b"x"))
    started = trio.current_time()
    await app()(scope("Forever", {"grpc-timeout": "250m"}), ex.receive, ex.send)
    assert trio.current_time() - started == pytest.approx(0.25)
    assert cancelled == [PATH + "Forever"]
    assert_never_trailers_only(ex)
    assert ex.trailers()[b"grpc-status"] == b"4"


async def test_bad_timeout_refused() -> None:
    ex = Exchange(body(b"x"))
    await app()(scope("Echo", {"grpc-timeout": "soon"}), ex.receive, ex.send)
    assert ex.trailers()[b"grpc-status"] == b"13"


async def test_client_gone_cancels_the_handler_and_sends_nothing_more() -> None:
    cancelled.clear()
    calls.clear()
    ex = Exchange(body(b"x"))
    a = app()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a, scope("Forever"), ex.receive, ex.send)
        await trio.testing.wait_all_tasks_blocked()
        assert calls == ["127.0.0.1:5555"] and a.active == 1
        ex.disconnect.set()
    assert cancelled == [PATH + "Forever"]
    assert a.active == 0
    assert ex.kinds() == ["http.response.start"]


async def test_handler_failure_is_internal_without_detail() -> None:
    ex = Exchange(body(b"x"))
    await app()(scope("Broken"), ex.receive, ex.send)
    trailers = ex.trailers()
    assert trailers[b"grpc-status"] == b"13"
    assert b"secret" not in trailers[b"grpc-message"]


async def test_handler_status_passed_on() -> None:
    ex = Exchange(body(b"x"))
    await app()(scope("Refuses"), ex.receive, ex.send)
    assert ex.trailers() == {b"grpc-status": b"3", b"grpc-message": b"no good"}


async def test_not_grpc_refused() -> None:
    ex = Exchange(body(b"x"))
    await app()({**scope("Echo"), "http_version": "1.1"}, ex.receive, ex.send)
    assert ex.sent[0]["status"] == 415
    ex = Exchange(body(b"x"))
    await app()(scope("Echo", {"content-type": "text/plain"}), ex.receive, ex.send)
    assert ex.trailers()[b"grpc-status"] == b"13"


async def test_unary_request_in_pieces_is_read_whole_before_the_handler() -> None:
    wire = encode_message(b"piecewise")
    events = [{"type": "http.request", "body": wire[i:i + 2], "more_body": True}
              for i in range(0, len(wire), 2)] + [{"type": "http.request", "body": b"",
                                                   "more_body": False}]
    ex = Exchange(events)
    await app()(scope("Two"), ex.receive, ex.send)
    assert_never_trailers_only(ex)
    assert ex.messages() == [b"first:piecewise", b"second"]
    assert ex.trailers() == {b"grpc-status": b"0"}


async def test_unary_call_refused_at_its_second_message_not_at_its_end() -> None:
    calls.clear()
    more = {"type": "http.request", "body": encode_message(b"c"), "more_body": True}
    ex = Exchange([{"type": "http.request", "body": encode_message(b"a") + encode_message(b"b"),
                    "more_body": True}, more])
    await app()(scope("Quick"), ex.receive, ex.send)
    assert calls == []  # the handler never ran
    assert ex.events == [more]  # nothing more was read
    assert_never_trailers_only(ex)
    assert ex.trailers()[b"grpc-status"] == b"13"
    assert b"more than one" in ex.trailers()[b"grpc-message"]


async def test_unary_body_cut_short_is_internal() -> None:
    ex = Exchange([{"type": "http.request", "body": encode_message(b"whole")[:-1],
                    "more_body": False}])
    await app()(scope("Echo"), ex.receive, ex.send)
    assert_never_trailers_only(ex)
    assert ex.trailers()[b"grpc-status"] == b"13"
    assert b"ended inside a message" in ex.trailers()[b"grpc-message"]


async def test_unary_client_gone_before_its_request_is_whole() -> None:
    calls.clear()
    ex = Exchange([{"type": "http.request", "body": encode_message(b"x")[:3],
                    "more_body": True}], hang=False)
    a = app()
    await a(scope("Quick"), ex.receive, ex.send)
    assert calls == []  # the handler never ran
    assert ex.kinds() == ["http.response.start"] and a.active == 0


async def test_deadline_covers_a_slow_unary_request(
        autojump_clock: trio.testing.MockClock) -> None:
    calls.clear()
    ex = Exchange([{"type": "http.request", "body": encode_message(b"x")[:3],
                    "more_body": True}])  # the rest never comes
    started = trio.current_time()
    await app()(scope("Quick", {"grpc-timeout": "2S"}), ex.receive, ex.send)
    assert trio.current_time() - started == pytest.approx(2.0)
    assert calls == []
    assert_never_trailers_only(ex)
    assert ex.trailers()[b"grpc-status"] == b"4"


async def test_deadline_cancels_a_unary_handler_that_does_not_declare_it_waits(
        autojump_clock: trio.testing.MockClock) -> None:
    cancelled.clear()
    ex = Exchange(body(b"x"))
    started = trio.current_time()
    await app()(scope("Quick", {"grpc-timeout": "300m"}), ex.receive, ex.send)
    assert trio.current_time() - started == pytest.approx(0.3)
    assert cancelled == [PATH + "Quick"]
    assert ex.trailers()[b"grpc-status"] == b"4"


async def test_deadline_counts_from_the_call_start_not_the_handler_start(
        autojump_clock: trio.testing.MockClock) -> None:
    cancelled.clear()
    seen: list[float] = []

    async def request_after_a_second() -> dict[str, Any]:
        await trio.sleep(1.0)
        return body(b"x")[0]

    async def deadline_seen(call: Call) -> None:
        seen.append(call.deadline)
        await trio.sleep_forever()

    ex = Exchange([])
    started = trio.current_time()
    await GrpcApp({PATH + "D": Method(deadline_seen)})(
        scope("D", {"grpc-timeout": "1500m"}), request_after_a_second, ex.send)
    assert seen == [pytest.approx(started + 1.5)]
    assert trio.current_time() - started == pytest.approx(1.5)
    assert ex.trailers()[b"grpc-status"] == b"4"


async def test_quick_unary_handler_is_not_watched_for_the_client_going_away() -> None:
    """Only a streaming or waiting call has a second task: the disconnect stays queued
    for a quick unary call, which ends as usual (the HTTP/2 edge drops what follows)."""
    ex = Exchange(body(b"x") + [{"type": "http.disconnect"}])
    await app()(scope("Echo"), ex.receive, ex.send)
    assert ex.events == [{"type": "http.disconnect"}]  # never read
    assert ex.messages() == [b"echo:x"]
    assert ex.trailers() == {b"grpc-status": b"0"}
