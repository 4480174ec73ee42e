"""An etcd v3 client over etcd's JSON gateway (HTTP/1.1 POST to ``/v3/...``), on trio.

Only what the controller needs: read one key, put, a transaction (compares, then
puts or reads), and leases (grant, keep-alive, revoke). Keys and values travel
base64-encoded in JSON, 64-bit numbers as decimal strings, as the gateway
does.

Two layers, as elsewhere in the project:

- Pure (no sockets): ``HttpExchange`` (one request's bytes out, the response
  parsed from any split of the bytes in, with h11, size-bounded), the JSON
  bodies (``range_body``, ``put_body``, ``txn_body``, ...) and their parsers
  (``parse_kvs``, ``parse_txn``, ``parse_keepalive``, ...). Anything malformed
  raises ``EtcdError`` saying what.
- ``EtcdClient``: one TCP connection per call (``Connection: close``), every
  call bounded in time (``timeout``) and the answer in size
  (``max_response_bytes``). Several endpoints: a call goes to the one that
  answered last, and on to the next when that one cannot be reached. A write
  whose request went out but got no answer is *not* sent again to another
  endpoint (it may have been applied): it fails with ``EtcdUnavailable`` and the
  caller decides (the state store's compare-and-swap makes a retry safe).

Every failure is an ``EtcdError`` (a ``StateStoreError``) with the endpoint and
the reason; ``EtcdUnavailable`` when no endpoint answered in time.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import h11
import structlog
import trio

from controller.state_store import StateStoreError

log = structlog.get_logger("controller.etcd")

# gRPC status codes etcd's gateway puts in its error bodies
GRPC_NOT_FOUND = 5
GRPC_UNAVAILABLE = 14

DEFAULT_TIMEOUT = 2.0
# the gateway's answers: a state blob (etcd refuses requests over 1.5 MiB by default)
# base64-encoded in JSON, with room to spare
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
MAX_HEADER_BYTES = 16 * 1024
MAX_ENDPOINTS = 16


class EtcdError(StateStoreError):
    """etcd refused a request, answered something malformed, or could not be
    reached. ``code`` is etcd's gRPC status code when it sent one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailable(EtcdError):
    """No endpoint answered in time (or an endpoint said it is unavailable)."""


# --- endpoints ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoints(text: str | Sequence[str]) -> list[Endpoint]:
    """``http://host:port`` (or ``host:port``) items, separated by ``;`` or ``,``
    when given as one string. Only plain HTTP: a ``https://`` endpoint is refused
    (ValueError), as is an empty list, a missing port or more than MAX_ENDPOINTS."""
    items = [text] if isinstance(text, str) else list(text)
    parts = [p.strip() for item in items for p in item.replace(",", ";").split(";")]
    parts = [p for p in parts if p]
    if not parts:
        raise ValueError("no etcd endpoint given")
    if len(parts) > MAX_ENDPOINTS:
        raise ValueError(f"{len(parts)} etcd endpoints, at most {MAX_ENDPOINTS}")
    endpoints: list[Endpoint] = []
    for part in parts:
        url = urlsplit(part if "://" in part else f"http://{part}")
        if url.scheme != "http":
            raise ValueError(f"etcd endpoint {part!r}: only http:// is supported")
        if url.path not in ("", "/") or url.query or url.fragment:
            raise ValueError(f"etcd endpoint {part!r}: give host:port only")
        try:
            port = url.port
        except ValueError as e:
            raise ValueError(f"etcd endpoint {part!r}: {e}") from None
        if not url.hostname or port is None:
            raise ValueError(f"etcd endpoint {part!r}: host and port needed")
        endpoints.append(Endpoint(url.hostname, port))
    return endpoints


# --- HTTP/1.1, sans-IO ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes


class HttpExchange:
    """One POST and its response, with h11: ``request`` is the bytes to send;
    ``feed`` takes what came back (b"" at end of stream) and returns the response
    once complete, else None. A response larger than ``max_body`` bytes, or
    not HTTP, raises EtcdError."""

    def __init__(self, endpoint: Endpoint, path: str, body: bytes, max_body: int) -> None:
        self._conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        self._max_body = max_body
        self._where = f"{endpoint}{path}"
        self._status: int | None = None
        self._body = bytearray()
        self.request = b"".join([
            self._conn.send(h11.Request(method="POST", target=path, headers=[
                ("Host", str(endpoint)),
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ])) or b"",
            self._conn.send(h11.Data(data=body)) or b"",
            self._conn.send(h11.EndOfMessage()) or b"",
        ])

    def feed(self, data: bytes) -> HttpResponse | None:
        self._conn.receive_data(data)
        while True:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as e:
                raise EtcdError(f"{self._where}: bad HTTP answer: {e}") from None
            if event is h11.NEED_DATA:
                if not data:  # h11 reports the early close itself; this is a guard
                    raise EtcdError(f"{self._where}: connection closed mid-answer")
                return None
            if isinstance(event, h11.Response):
                self._status = event.status_code
            elif isinstance(event, h11.InformationalResponse):
                continue
            elif isinstance(event, h11.Data):
                if len(self._body) + len(event.data) > self._max_body:
                    raise EtcdError(f"{self._where}: answer larger than {self._max_body} bytes")
                self._body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert self._status is not None
                return HttpResponse(self._status, bytes(self._body))
            elif isinstance(event, h11.ConnectionClosed):
                raise EtcdError(f"{self._where}: connection closed mid-answer")


# --- JSON bodies and their answers, pure ---------------------------------------------------

def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise EtcdError(f"etcd answered a non-string {what}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise EtcdError(f"etcd answered {what} that is not base64") from None


def as_int(value: object, what: str) -> int:
    """A 64-bit number as the gateway writes it (a decimal string; absent is 0)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise EtcdError(f"etcd answered a non-number {what}: {value!r:.80}")
    try:
        number = int(value)
    except ValueError:
        raise EtcdError(f"etcd answered a non-number {what}: {value!r:.80}") from None
    if not -(2**63) <= number < 2**64:
        raise EtcdError(f"etcd answered {what} out of range")
    return number


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


Target = Literal["CREATE", "MOD", "VERSION", "VALUE", "LEASE"]


@dataclass(frozen=True, slots=True)
class Compare:
    """``key``'s ``target`` EQUAL to ``value``. A key that does not exist has
    create/mod revision, version and lease 0."""

    key: bytes
    target: Target
    value: int | bytes


@dataclass(frozen=True, slots=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Get:
    key: bytes


Op = Put | Get


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int  # the store's revision after the transaction
    # one entry per op of the branch taken: the keys a Get found ([] for a Put)
    ranges: tuple[tuple[KeyValue, ...], ...]


_COMPARE_FIELD = {"CREATE": "create_revision", "MOD": "mod_revision", "VERSION": "version",
                  "VALUE": "value", "LEASE": "lease"}


def range_body(key: bytes) -> dict[str, Any]:
    return {"key": b64(key)}


def put_body(put: Put) -> dict[str, Any]:
    body: dict[str, Any] = {"key": b64(put.key), "value": b64(put.value)}
    if put.lease:
        body["lease"] = str(put.lease)
    return body


def compare_body(c: Compare) -> dict[str, Any]:
    field = _COMPARE_FIELD[c.target]
    if c.target == "VALUE":
        if not isinstance(c.value, bytes):
            raise TypeError("a VALUE compare takes bytes")
        value: object = b64(c.value)
    else:
        if not isinstance(c.value, int) or isinstance(c.value, bool):
            raise TypeError(f"a {c.target} compare takes an int")
        value = str(c.value)
    return {"key": b64(c.key), "target": c.target, "result": "EQUAL", field: value}


def op_body(op: Op) -> dict[str, Any]:
    if isinstance(op, Put):
        return {"request_put": put_body(op)}
    return {"request_range": range_body(op.key)}


def txn_body(compare: Sequence[Compare], success: Sequence[Op],
             failure: Sequence[Op] = ()) -> dict[str, Any]:
    return {"compare": [compare_body(c) for c in compare],
            "success": [op_body(o) for o in success],
            "failure": [op_body(o) for o in failure]}


def _object(doc: object, what: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise EtcdError(f"etcd answered {what} that is not a JSON object")
    return doc


def header_revision(doc: dict[str, Any]) -> int:
    return as_int(_object(doc.get("header", {}), "a header").get("revision"), "revision")


def parse_kvs(doc: dict[str, Any]) -> tuple[KeyValue, ...]:
    """The keys of a range answer (``kvs``; absent when nothing matched)."""
    kvs = doc.get("kvs", [])
    if not isinstance(kvs, list):
        raise EtcdError("etcd answered kvs that is not a list")
    out = []
    for item in kvs:
        kv = _object(item, "a key")
        out.append(KeyValue(
            key=unb64(kv.get("key"), "key"),
            value=unb64(kv.get("value", ""), "value"),
            create_revision=as_int(kv.get("create_revision"), "create_revision"),
            mod_revision=as_int(kv.get("mod_revision"), "mod_revision"),
            version=as_int(kv.get("version"), "version"),
            lease=as_int(kv.get("lease"), "lease"),
        ))
    return tuple(out)


def parse_txn(doc: dict[str, Any]) -> TxnResult:
    """A txn answer: ``succeeded`` (absent when false) and one response per op
    of the branch taken."""
    responses = doc.get("responses", [])
    if not isinstance(responses, list):
        raise EtcdError("etcd answered txn responses that are not a list")
    ranges: list[tuple[KeyValue, ...]] = []
    for item in responses:
        response = _object(item, "a txn response")
        if "response_range" in response:
            ranges.append(parse_kvs(_object(response["response_range"], "a range")))
        else:
            ranges.append(())
    succeeded = doc.get("succeeded", False)
    if not isinstance(succeeded, bool):
        raise EtcdError("etcd answered a non-boolean succeeded")
    return TxnResult(succeeded=succeeded, revision=header_revision(doc), ranges=tuple(ranges))


@dataclass(frozen=True, slots=True)
class Lease:
    id: int
    ttl: int  # seconds etcd granted


def parse_grant(doc: dict[str, Any]) -> Lease:
    if doc.get("error"):
        raise EtcdError(f"lease grant refused: {doc['error']!r:.200}")
    lease = Lease(as_int(doc.get("ID"), "lease ID"), as_int(doc.get("TTL"), "lease TTL"))
    if lease.id == 0 or lease.ttl <= 0:
        raise EtcdError(f"etcd granted no usable lease ({lease})")
    return lease


def parse_keepalive(body: bytes) -> int:
    """The TTL (seconds) a keep-alive renewed the lease to; 0 when the lease is
    gone (expired or revoked). The gateway streams ``{"result": ...}`` objects,
    one per request: the first is the answer."""
    first = body.split(b"\n", 1)[0].strip()
    doc = decode_json(first, "keep-alive")
    if "error" in doc:
        err = doc["error"]
        message = err.get("message") if isinstance(err, dict) else err
        raise EtcdError(f"keep-alive refused: {message!r:.200}")
    result = _object(doc.get("result"), "a keep-alive result")
    return max(0, as_int(result.get("TTL"), "lease TTL"))


def decode_json(body: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise EtcdError(f"etcd answered {what} with something that is not JSON: "
                        f"{body[:80]!r}") from None
    return _object(doc, what)


def error_of(response: HttpResponse, where: str) -> EtcdError:
    """A non-200 answer as an error: the gateway's ``{"error", "code"}`` when it is there."""
    message: object = None
    code: int | None = None
    try:
        doc = json.loads(response.body)
        if isinstance(doc, dict):
            message = doc.get("message") or doc.get("error")
            raw = doc.get("code")
            code = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    except (UnicodeDecodeError, ValueError):
        pass
    text = f"{where}: HTTP {response.status}: {message or response.body[:200]!r:.300}"
    if code == GRPC_UNAVAILABLE or response.status in (502, 503, 504):
        return EtcdUnavailable(text, code)
    return EtcdError(text, code)


# --- the trio edge --------------------------------------------------------------------------

class EtcdClient:
    """etcd over its JSON gateway. ``endpoints``: ``http://host:port`` items (one
    string with ``;`` between, or a list). Each call is bounded by ``timeout``
    seconds in all (``timeout=`` per call overrides), shared among the endpoints
    it tries."""

    def __init__(self, endpoints: str | Sequence[str], timeout: float = DEFAULT_TIMEOUT,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        if not timeout > 0 or math.isinf(timeout):
            raise ValueError(f"etcd timeout must be a positive number of seconds, not {timeout}")
        self.endpoints = parse_endpoints(endpoints)
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._preferred = 0
        self.log = log.bind(etcd=";".join(map(str, self.endpoints)))

    async def get(self, key: bytes, timeout: float | None = None) -> KeyValue | None:
        doc = await self.call("/v3/kv/range", range_body(key), idempotent=True, timeout=timeout)
        kvs = parse_kvs(doc)
        return kvs[0] if kvs else None

    async def put(self, put: Put, timeout: float | None = None) -> int:
        """The store's revision after the put."""
        doc = await self.call("/v3/kv/put", put_body(put), idempotent=False, timeout=timeout)
        return header_revision(doc)

    async def txn(self, compare: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = (), timeout: float | None = None) -> TxnResult:
        writes = any(isinstance(op, Put) for op in (*success, *failure))
        doc = await self.call("/v3/kv/txn", txn_body(compare, success, failure),
                              idempotent=not writes, timeout=timeout)
        return parse_txn(doc)

    async def grant(self, ttl: int, timeout: float | None = None) -> Lease:
        # a grant sent twice leaves a lease nobody keeps alive: it expires by itself
        doc = await self.call("/v3/lease/grant", {"TTL": str(ttl)}, idempotent=True,
                              timeout=timeout)
        return parse_grant(doc)

    async def keepalive(self, lease_id: int, timeout: float | None = None) -> int:
        """Renew ``lease_id``; the TTL it now has in seconds, 0 when it is gone."""
        body = await self._post("/v3/lease/keepalive", {"ID": str(lease_id)}, idempotent=True,
                                timeout=timeout)
        return parse_keepalive(body)

    async def revoke(self, lease_id: int, timeout: float | None = None) -> None:
        """Revoke ``lease_id`` (its keys go with it); a lease already gone is no error."""
        try:
            await self.call("/v3/lease/revoke", {"ID": str(lease_id)}, idempotent=True,
                            timeout=timeout)
        except EtcdError as e:
            if e.code != GRPC_NOT_FOUND:
                raise

    async def aclose(self) -> None:
        """Nothing is held between calls (one connection per call)."""

    async def call(self, path: str, body: dict[str, Any], idempotent: bool,
                   timeout: float | None = None) -> dict[str, Any]:
        return decode_json(await self._post(path, body, idempotent, timeout), path)

    async def _post(self, path: str, body: dict[str, Any], idempotent: bool,
                    timeout: float | None) -> bytes:
        payload = json.dumps(body, separators=(",", ":")).encode()
        total = self.timeout if timeout is None else timeout
        deadline = trio.current_time() + max(0.0, total)
        n = len(self.endpoints)
        failures: list[str] = []
        for i in range(n):
            index = (self._preferred + i) % n
            endpoint = self.endpoints[index]
            left = deadline - trio.current_time()
            if left <= 0:
                break
            # the time left, shared among the endpoints not tried yet
            budget = left / (n - i)
            sent = False
            try:
                with trio.fail_after(budget):
                    stream = await trio.open_tcp_stream(endpoint.host, endpoint.port)
                    async with stream:
                        exchange = HttpExchange(endpoint, path, payload, self.max_response_bytes)
                        sent = True
                        await stream.send_all(exchange.request)
                        response = None
                        while response is None:
                            response = exchange.feed(await stream.receive_some(65536))
            except trio.TooSlowError:
                failures.append(f"{endpoint}: no answer within {budget:.3g}s")
            except (OSError, trio.BrokenResourceError) as e:
                failures.append(f"{endpoint}: {e}")
            else:
                if response.status == 200:
                    self._preferred = index
                    return response.body
                error = error_of(response, f"{endpoint}{path}")
                if not isinstance(error, EtcdUnavailable):
                    raise error
                failures.append(str(error))
            if sent and not idempotent:
                # the request may have been applied: not sent again elsewhere
                raise EtcdUnavailable(f"etcd {path}: outcome unknown: {failures[-1]}")
        if not failures:
            failures.append(f"no time left of {total:.3g}s")
        self.log.debug("etcd_unavailable", path=path, failures=failures)
        raise EtcdUnavailable(f"etcd {path}: no endpoint answered: {'; '.join(failures)}")


__all__ = [
    "Compare", "EtcdClient", "EtcdError", "EtcdUnavailable", "Endpoint", "Get", "HttpExchange",
    "HttpResponse", "KeyValue", "Lease", "Op", "Put", "TxnResult", "b64", "compare_body",
    "decode_json", "error_of", "parse_endpoints", "parse_grant", "parse_keepalive", "parse_kvs",
    "parse_txn", "put_body", "range_body", "txn_body", "unb64",
]
