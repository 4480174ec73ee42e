"""The slave's HA hello (transfer.py): codec, bad input, the master's checks, replays;
and the master's refusal of reports past its end (#3015)."""

from __future__ import annotations

import pytest

from broker.store.ha.ha_connection import (
    HAConnection,
    SlaveInvalidError,
    is_slave_ok,
    push_to_slave_max_offset,
)
from broker.store.ha.transfer import (
    HELLO_HEADER,
    HELLO_MAGIC,
    HAProtocolError,
    HelloCheck,
    HelloDecoder,
    NonceCache,
    check_hello,
    encode_hello,
    encode_report,
    make_hello,
)

NOW = 1_700_000_000_000
CHECK = HelloCheck("broker-a", "DefaultCluster")
ADMINS = {"brokeradmin": "brokersecret"}


def admin_secret(key: str) -> str | None:
    return ADMINS.get(key)


def signed(**kw: object) -> bytes:
    args: dict[str, object] = {"broker_name": "broker-a", "cluster_name": "DefaultCluster",
                               "now_ms": NOW, "nonce": "n1", "access_key": "brokeradmin",
                               "secret_key": "brokersecret", **kw}
    return encode_hello(make_hello(**args))  # type: ignore[arg-type]


def decode(data: bytes) -> tuple[object, bytes]:
    got = HelloDecoder().feed(data)
    assert got is not None
    return got


def test_round_trip_any_split_and_rest_kept() -> None:
    wire = signed() + encode_report(42)
    for split in range(1, len(wire)):
        d = HelloDecoder()
        first = d.feed(wire[:split])
        got = first if first is not None else d.feed(wire[split:])
        assert got is not None, split
        hello, rest = got
        if first is not None:  # the hello was complete in the first part
            rest += wire[split:]
        assert hello.broker_name == "broker-a" and hello.access_key == "brokeradmin"
        assert rest == encode_report(42)
        assert check_hello(hello, CHECK, NOW, admin_secret) is None


@pytest.mark.parametrize("wire, message", [
    (encode_report(0), "no hello"),
    (b"RMQX" + bytes(10), "no hello"),
    (HELLO_HEADER.pack(HELLO_MAGIC, 9, 2) + b"{}", "version 9"),
    (HELLO_HEADER.pack(HELLO_MAGIC, 2, 600000), "exceeds"),
    (HELLO_HEADER.pack(HELLO_MAGIC, 2, 3) + b"\xff\xfe{", "not a JSON object"),
    (HELLO_HEADER.pack(HELLO_MAGIC, 2, 2) + b"[]", "object of strings"),
    (HELLO_HEADER.pack(HELLO_MAGIC, 2, 8) + b'{"a":1} ', "object of strings"),
    (HELLO_HEADER.pack(HELLO_MAGIC, 2, 2) + b"{}", "without brokerName"),
])
def test_bad_hellos_refused(wire: bytes, message: str) -> None:
    with pytest.raises(HAProtocolError, match=message):
        HelloDecoder().feed(wire)


def test_bad_timestamp_refused() -> None:
    payload = b'{"brokerName":"b","clusterName":"c","timestamp":"-5","nonce":"n"}'
    with pytest.raises(HAProtocolError, match="timestamp"):
        HelloDecoder().feed(HELLO_HEADER.pack(HELLO_MAGIC, 2, len(payload)) + payload)


def test_master_checks() -> None:
    hello, _ = decode(signed())
    assert check_hello(hello, CHECK, NOW + 59_000, admin_secret) is None
    assert "timestamp" in check_hello(hello, CHECK, NOW + 61_000, admin_secret)  # type: ignore[operator]
    assert "timestamp" in check_hello(hello, CHECK, NOW - 61_000, admin_secret)  # type: ignore[operator]
    other = HelloCheck("broker-b", "DefaultCluster")
    assert "broker group" in check_hello(hello, other, NOW, admin_secret)  # type: ignore[operator]
    # ACL off: no signature needed, the group still checked
    unsigned, _ = decode(signed(access_key=None, secret_key=None))
    assert unsigned.access_key is None  # type: ignore[attr-defined]
    assert check_hello(unsigned, CHECK, NOW, None) is None  # type: ignore[arg-type]
    assert "must be signed" in check_hello(unsigned, CHECK, NOW, admin_secret)  # type: ignore[arg-type, operator]
    wrong, _ = decode(signed(secret_key="not-the-secret"))
    assert "signature check failed" in check_hello(wrong, CHECK, NOW, admin_secret)  # type: ignore[arg-type, operator]
    stranger, _ = decode(signed(access_key="someone1", secret_key="x" * 8))
    assert "not an admin" in check_hello(stranger, CHECK, NOW, admin_secret)  # type: ignore[arg-type, operator]


def test_tampered_hello_fails_signature() -> None:
    wire = signed().replace(b'"broker-a"', b'"broker-b"')
    hello, _ = decode(wire)
    refused = check_hello(hello, HelloCheck("broker-b", "DefaultCluster"), NOW,  # type: ignore[arg-type]
                          admin_secret)
    assert refused is not None and "signature" in refused


def test_nonce_replay_and_bound() -> None:
    cache = NonceCache(window_ms=1000, max_entries=3)
    assert cache.accept("a", 0)
    assert not cache.accept("a", 500)  # replay within the window
    assert cache.accept("a", 2000)  # the window passed (the timestamp check bounds it anyway)
    assert cache.accept("b", 2000) and cache.accept("c", 2000)
    assert not cache.accept("d", 2000)  # full of fresh nonces: refused, never forgotten
    assert cache.accept("d", 3500)


class Store:
    def __init__(self, max_offset: int) -> None:
        self.max = max_offset

    def get_max_phy_offset(self) -> int:
        return self.max

    def get_min_phy_offset(self) -> int:
        return 0

    def get_raw(self, offset: int, max_bytes: int) -> bytes | None:
        return b"x" * min(max_bytes, self.max - offset)


def test_report_past_master_end_refused_and_never_acknowledges() -> None:
    """#3015: a (fake) slave reporting beyond the master's end is refused and its
    offset counts for no SYNC_MASTER waiter."""
    store = Store(1000)
    honest = HAConnection(store)  # type: ignore[arg-type]
    honest.on_report(100, 0.0)
    fake = HAConnection(store)  # type: ignore[arg-type]
    with pytest.raises(SlaveInvalidError, match="longer than master"):
        fake.on_report(10**12, 0.0)
    assert fake.acked_offset == 0 and fake.invalid is not None
    with pytest.raises(SlaveInvalidError):
        fake.on_report(500, 1.0)  # once invalid, always
    assert push_to_slave_max_offset([honest, fake]) == 100
    assert not is_slave_ok([fake], 1000)
    # a later report past what was sent is refused too
    fake2 = HAConnection(store)  # type: ignore[arg-type]
    fake2.on_report(900, 0.0)
    with pytest.raises(HAProtocolError, match="past what was sent"):
        fake2.on_report(950, 1.0)
