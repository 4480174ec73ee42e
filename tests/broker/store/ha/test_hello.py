"""The slave's HA hello (transfer.py): codec, bad input, the master's checks, the
greeting and the master's challenge (replays); and the master's refusal of reports
past its end (#3015)."""

from __future__ import annotations

import pytest

from broker.store.ha.ha_connection import (
    HAConnection,
    SlaveInvalidError,
    is_slave_ok,
    push_to_slave_max_offset,
)
from broker.store.ha.transfer import (
    GREETING,
    HELLO_HEADER,
    HELLO_MAGIC,
    HELLO_VERSION,
    ChallengeDecoder,
    GreetingDecoder,
    HAProtocolError,
    Hello,
    HelloCheck,
    HelloDecoder,
    check_hello,
    encode_challenge,
    encode_hello,
    encode_report,
    make_hello,
    new_challenge,
)

NOW = 1_700_000_000_000
CHECK = HelloCheck("broker-a", "DefaultCluster")
ADMINS = {"brokeradmin": "brokersecret"}
CHALLENGE = "00112233445566778899aabbccddeeff"


def admin_secret(key: str) -> str | None:
    return ADMINS.get(key)


def signed(**kw: object) -> bytes:
    args: dict[str, object] = {"broker_name": "broker-a", "cluster_name": "DefaultCluster",
                               "now_ms": NOW, "nonce": "n1", "access_key": "brokeradmin",
                               "secret_key": "brokersecret", "challenge": CHALLENGE, **kw}
    return encode_hello(make_hello(**args))  # type: ignore[arg-type]


def decode(data: bytes) -> tuple[Hello, bytes]:
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
        assert check_hello(hello, CHECK, NOW, admin_secret, CHALLENGE) is None


@pytest.mark.parametrize("wire, message", [
    (encode_report(0), "no hello"),
    (b"RMQX" + bytes(10), "no hello"),
    (HELLO_HEADER.pack(HELLO_MAGIC, 9, 2) + b"{}", "version 9"),
    (HELLO_HEADER.pack(HELLO_MAGIC, HELLO_VERSION, 600000), "exceeds"),
    (HELLO_HEADER.pack(HELLO_MAGIC, HELLO_VERSION, 3) + b"\xff\xfe{", "not a JSON object"),
    (HELLO_HEADER.pack(HELLO_MAGIC, HELLO_VERSION, 2) + b"[]", "object of strings"),
    (HELLO_HEADER.pack(HELLO_MAGIC, HELLO_VERSION, 8) + b'{"a":1} ', "object of strings"),
    (HELLO_HEADER.pack(HELLO_MAGIC, HELLO_VERSION, 2) + b"{}", "without brokerName"),
])
def test_bad_hellos_refused(wire: bytes, message: str) -> None:
    with pytest.raises(HAProtocolError, match=message):
        HelloDecoder().feed(wire)


def test_bad_timestamp_refused() -> None:
    payload = b'{"brokerName":"b","clusterName":"c","timestamp":"-5","nonce":"n"}'
    with pytest.raises(HAProtocolError, match="timestamp"):
        HelloDecoder().feed(HELLO_HEADER.pack(HELLO_MAGIC, HELLO_VERSION, len(payload)) + payload)


def test_master_checks() -> None:
    hello, _ = decode(signed())
    assert check_hello(hello, CHECK, NOW + 59_000, admin_secret, CHALLENGE) is None
    assert "timestamp" in check_hello(hello, CHECK, NOW + 61_000, admin_secret, CHALLENGE)  # type: ignore[operator]
    assert "timestamp" in check_hello(hello, CHECK, NOW - 61_000, admin_secret, CHALLENGE)  # type: ignore[operator]
    other = HelloCheck("broker-b", "DefaultCluster")
    assert "broker group" in check_hello(hello, other, NOW, admin_secret, CHALLENGE)  # type: ignore[operator]
    # ACL off: no signature needed, the group still checked
    unsigned, _ = decode(signed(access_key=None, secret_key=None))
    assert unsigned.access_key is None
    assert check_hello(unsigned, CHECK, NOW, None, CHALLENGE) is None
    assert "must be signed" in check_hello(unsigned, CHECK, NOW, admin_secret, CHALLENGE)  # type: ignore[operator]
    wrong, _ = decode(signed(secret_key="not-the-secret"))
    assert "signature check failed" in check_hello(wrong, CHECK, NOW, admin_secret, CHALLENGE)  # type: ignore[operator]
    stranger, _ = decode(signed(access_key="someone1", secret_key="x" * 8))
    assert "not an admin" in check_hello(stranger, CHECK, NOW, admin_secret, CHALLENGE)  # type: ignore[operator]


def test_tampered_hello_fails_signature() -> None:
    wire = signed().replace(b'"broker-a"', b'"broker-b"')
    hello, _ = decode(wire)
    refused = check_hello(hello, HelloCheck("broker-b", "DefaultCluster"), NOW,
                          admin_secret, CHALLENGE)
    assert refused is not None and "signature" in refused


def test_hello_answers_only_its_connections_challenge() -> None:
    """Row 11: a hello is good for the one connection whose challenge it signs; a
    captured hello replayed on another connection (or after the master restarted:
    a new challenge) is refused, with or without aclEnable, however fresh."""
    hello, _ = decode(signed())
    assert check_hello(hello, CHECK, NOW, admin_secret, CHALLENGE) is None
    for other in (new_challenge(), new_challenge()):
        assert other != CHALLENGE
        for secret in (admin_secret, None):
            refused = check_hello(hello, CHECK, NOW, secret, other)
            assert refused is not None and "challenge" in refused
    # the challenge is signed: rewriting it breaks the signature
    forged = signed().replace(CHALLENGE.encode(), b"f" * 32)
    hello, _ = decode(forged)
    refused = check_hello(hello, CHECK, NOW, admin_secret, "f" * 32)
    assert refused is not None and "signature check failed" in refused
    # a hello answering no challenge (an older slave's) is refused
    old, _ = decode(signed(challenge=""))
    assert "challenge" in (check_hello(old, CHECK, NOW, None, CHALLENGE) or "")


def test_greeting_and_challenge_codecs() -> None:
    challenge = new_challenge()
    assert len(challenge) == 32 and challenge != new_challenge()
    wire = encode_challenge(challenge)
    for split in range(1, len(wire)):
        d = ChallengeDecoder()
        assert d.feed(wire[:split]) is None
        assert d.feed(wire[split:] + b"x") == (challenge, b"x")
    for split in range(1, len(GREETING)):
        g = GreetingDecoder()
        assert g.feed(GREETING[:split]) is None
        assert g.feed(GREETING[split:] + b"rest") == b"rest"
    with pytest.raises(HAProtocolError, match="without the master's challenge"):
        GreetingDecoder().feed(signed())  # a slave of the previous version: hello first
    with pytest.raises(HAProtocolError, match="no hello"):
        GreetingDecoder().feed(encode_report(0))
    with pytest.raises(HAProtocolError, match="version 9 not understood"):
        GreetingDecoder().feed(b"RMQC\x09")
    with pytest.raises(HAProtocolError, match="no challenge"):
        ChallengeDecoder().feed(b"RMQA\x01\x00\x00\x00\x02{}")  # an older master's answer
    with pytest.raises(HAProtocolError, match="version 2 not understood"):
        ChallengeDecoder().feed(b"RMQC\x02")


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
    honest = HAConnection(store)
    honest.on_report(100, 0.0)
    fake = HAConnection(store)
    with pytest.raises(SlaveInvalidError, match="longer than master"):
        fake.on_report(10**12, 0.0)
    assert fake.acked_offset == 0 and fake.invalid is not None
    with pytest.raises(SlaveInvalidError):
        fake.on_report(500, 1.0)  # once invalid, always
    assert push_to_slave_max_offset([honest, fake]) == 100
    assert not is_slave_ok([fake], 1000)
    # a later report past what was sent is refused too
    fake2 = HAConnection(store)
    fake2.on_report(900, 0.0)
    with pytest.raises(HAProtocolError, match="past what was sent"):
        fake2.on_report(950, 1.0)
