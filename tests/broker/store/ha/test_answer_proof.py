"""The master's answer proves who sent it (HA handshake version 4, transfer.py):
signed with the slave's account secret over the slave's own challenge and every
byte of the answer. A tampered field, another secret, another connection's
challenge, no signature: each refused by the slave (``check_answer``). The
master signs only for a hello it verified (``answer_key``)."""

from __future__ import annotations

import json

import pytest

from broker.store.ha.epochs import Epoch
from broker.store.ha.transfer import (
    ANSWER_HEADER,
    ANSWER_MAGIC,
    ANSWER_PROOF_MAX_SIZE,
    ANSWER_VERSION,
    GREETING,
    Answer,
    AnswerDecoder,
    AnswerFrame,
    AnswerKey,
    ChallengeDecoder,
    GreetingDecoder,
    HandshakeVersionError,
    HAProtocolError,
    Hello,
    HelloCheck,
    HelloDecoder,
    answer_key,
    check_answer,
    check_hello,
    encode_answer,
    encode_hello,
    make_hello,
    new_challenge,
)

KEY, SECRET = "brokeradmin", "brokersecret"
OURS = "0123456789abcdef0123456789abcdef"  # the slave's challenge on this connection
ANSWER = Answer("accept", "", "storeA", (Epoch(1, 0, "aaaa", "storeA"),
                                         Epoch(2, 500, "bbbb", "storeA")), 0, 900)
NOW = 1_700_000_000_000
MASTER_CHALLENGE = "ffeeddccbbaa99887766554433221100"


def signed(answer: Answer = ANSWER, challenge: str = OURS, key: str = KEY,
           secret: str = SECRET) -> bytes:
    return encode_answer(answer, AnswerKey(challenge, key, secret))


def decode(wire: bytes) -> tuple[AnswerFrame, bytes]:
    got = AnswerDecoder().feed(wire)
    assert got is not None
    return got


def reframe(payload: bytes, proof: bytes) -> bytes:
    return ANSWER_HEADER.pack(ANSWER_MAGIC, ANSWER_VERSION, len(payload), len(proof)) \
        + payload + proof


def parts(wire: bytes) -> tuple[bytes, bytes]:
    """(payload, proof) of an answer frame."""
    _magic, _version, size, proof_size = ANSWER_HEADER.unpack_from(wire)
    head = ANSWER_HEADER.size
    return wire[head:head + size], wire[head + size:head + size + proof_size]


def test_a_signed_answer_round_trips_in_any_split_and_checks() -> None:
    wire = signed() + b"transfer"
    for split in range(1, len(wire)):
        d = AnswerDecoder()
        first = d.feed(wire[:split])
        got = first if first is not None else d.feed(wire[split:])
        assert got is not None, split
        frame, rest = got
        if first is not None:
            rest += wire[split:]
        assert frame.answer == ANSWER and frame.access_key == KEY and rest == b"transfer"
        assert check_answer(frame, OURS, KEY, SECRET) is None


@pytest.mark.parametrize("field, value", [
    ("verdict", "diverged"),  # a slave with haDiscardLog would destroy its log
    ("verdict", "recover"),  # ... or send it to whoever asks
    ("reason", "lies"),
    ("storeId", "storeB"),
    ("epochs", [[1, 0, "aaaa", "storeA"], [9, 500, "evil", "storeE"]]),
    ("minOffset", 1000 * 1024 * 1024),  # an empty slave would start there
    ("maxOffset", 10**15),
])
def test_any_tampered_field_is_refused(field: str, value: object) -> None:
    payload, proof = parts(signed())
    raw = json.loads(payload)
    assert raw[field] != value
    raw[field] = value
    frame, _ = decode(reframe(json.dumps(raw, separators=(",", ":")).encode(), proof))
    problem = check_answer(frame, OURS, KEY, SECRET)
    assert problem is not None and "signature check failed" in problem


def test_the_same_answer_reordered_or_respaced_is_refused() -> None:
    """The signature covers the bytes as sent, not a re-encoding of them."""
    payload, proof = parts(signed())
    respaced = json.dumps(json.loads(payload)).encode()  # ", " and ": ": the same object
    assert respaced != payload
    frame, _ = decode(reframe(respaced, proof))
    assert frame.answer == ANSWER
    assert check_answer(frame, OURS, KEY, SECRET) is not None


def test_another_secret_or_account_is_refused() -> None:
    frame, _ = decode(signed(secret="not-the-secret"))
    assert "signature check failed for accessKey=brokeradmin" in (
        check_answer(frame, OURS, KEY, SECRET) or "")
    frame, _ = decode(signed(key="someoneelse", secret=SECRET))
    assert "signed by accessKey=someoneelse" in (check_answer(frame, OURS, KEY, SECRET) or "")
    # the proof's AccessKey rewritten to ours: still another secret's signature
    payload, proof = parts(signed(key="someoneelse", secret="othersecret"))
    forged = json.loads(proof)
    forged["AccessKey"] = KEY
    frame, _ = decode(reframe(payload, json.dumps(forged).encode()))
    assert "signature check failed" in (check_answer(frame, OURS, KEY, SECRET) or "")


def test_an_answer_replayed_from_another_connection_is_refused() -> None:
    """A genuine answer, captured on one connection (its challenge), replayed
    on another: that connection's slave challenge differs."""
    captured = signed(challenge=new_challenge())
    frame, _ = decode(captured)
    for _ in range(3):
        problem = check_answer(frame, new_challenge(), KEY, SECRET)
        assert problem is not None and "replayed" in problem


def test_an_unsigned_answer_is_refused_by_a_slave_with_credentials() -> None:
    frame, _ = decode(encode_answer(ANSWER))
    assert frame.answer == ANSWER and frame.signature == ""
    problem = check_answer(frame, OURS, KEY, SECRET)
    assert problem is not None and "not signed" in problem and "aclEnable" in problem


def test_a_hello_signature_is_no_answer_signature() -> None:
    """The slave's own hello signature (same account) passed off as the proof."""
    hello = make_hello("broker-a", "DefaultCluster", NOW, "n1", KEY, SECRET,
                       challenge=MASTER_CHALLENGE, slave_challenge=OURS)
    payload, _ = parts(signed())
    proof = json.dumps({"AccessKey": KEY, "Signature": hello.fields["Signature"]}).encode()
    frame, _ = decode(reframe(payload, proof))
    assert "signature check failed" in (check_answer(frame, OURS, KEY, SECRET) or "")


@pytest.mark.parametrize("proof, message", [
    (b"[]", "proof not an object"),
    (b"{", "malformed"),
    (b'{"AccessKey":"k"}', "without AccessKey and Signature"),
    (b'{"AccessKey":"","Signature":"s"}', "without AccessKey and Signature"),
    (b'{"AccessKey":1,"Signature":"s"}', "without AccessKey and Signature"),
])
def test_malformed_proofs_are_protocol_errors(proof: bytes, message: str) -> None:
    payload, _ = parts(signed())
    with pytest.raises(HAProtocolError, match=message):
        AnswerDecoder().feed(reframe(payload, proof))


def test_answer_limits_and_other_versions() -> None:
    payload, _ = parts(signed())
    too_long = ANSWER_HEADER.pack(ANSWER_MAGIC, ANSWER_VERSION, len(payload),
                                  ANSWER_PROOF_MAX_SIZE + 1)
    with pytest.raises(HAProtocolError, match="proof of 1025 bytes exceeds"):
        AnswerDecoder().feed(too_long)
    # a version 3 master's answer (version 1: no proof length), refused at its version byte
    with pytest.raises(HAProtocolError, match="answer version 1 not understood"):
        AnswerDecoder().feed(b"RMQA\x01")
    with pytest.raises(HAProtocolError, match="malformed"):  # deep nesting, no crash
        AnswerDecoder().feed(reframe(b"[" * 60_000, b""))
    with pytest.raises(HAProtocolError, match="bad verdict"):  # not a string, no crash
        AnswerDecoder().feed(reframe(b'{"verdict":["accept"]}', b""))


# ---- the master's side -------------------------------------------------------------------


def hello_from(access_key: str | None, secret_key: str | None,
               slave_challenge: str | None = OURS) -> Hello:
    wire = encode_hello(make_hello("broker-a", "DefaultCluster", NOW, "n1", access_key,
                                   secret_key, challenge=MASTER_CHALLENGE,
                                   slave_challenge=slave_challenge))
    got = HelloDecoder().feed(wire)
    assert got is not None
    return got[0]


def admins(key: str) -> str | None:
    return {KEY: SECRET}.get(key)


def test_the_master_signs_only_for_a_verified_hello() -> None:
    good = hello_from(KEY, SECRET)
    # aclEnable: the admin account's secret (check_hello verified the hello)
    assert answer_key(good, admins) == AnswerKey(OURS, KEY, SECRET)
    # ACL off: its own brokerAccessKey, when the hello is signed with it and checks
    assert answer_key(good, None, KEY, SECRET) == AnswerKey(OURS, KEY, SECRET)
    assert answer_key(hello_from(KEY, "wrongsecret"), None, KEY, SECRET) is None
    assert answer_key(good, None, "otherkey", SECRET) is None
    assert answer_key(good, None) is None  # ACL off, no credentials of its own
    assert answer_key(hello_from(None, None), admins) is None  # nothing to sign with
    assert answer_key(hello_from(None, None), None, KEY, SECRET) is None
    # what it signs, the slave that sent the hello accepts; another connection's does not
    key = answer_key(good, admins)
    assert key is not None
    frame, _ = decode(encode_answer(ANSWER, key))
    assert check_answer(frame, OURS, KEY, SECRET) is None
    assert check_answer(frame, new_challenge(), KEY, SECRET) is not None


def test_a_hello_without_the_slaves_challenge_is_refused() -> None:
    check = HelloCheck("broker-a", "DefaultCluster")
    assert check_hello(hello_from(KEY, SECRET), check, NOW, admins, MASTER_CHALLENGE) is None
    for bad in ("", "abc", "0123456789ABCDEF0123456789ABCDEF", OURS + "00"):
        refused = check_hello(hello_from(KEY, SECRET, slave_challenge=bad), check, NOW,
                              admins, MASTER_CHALLENGE)
        assert refused is not None and "slave's challenge" in refused, bad
    assert len(hello_from(None, None, slave_challenge=None).slave_challenge) == 32  # a fresh one


def test_other_handshake_versions_are_named_on_both_sides() -> None:
    """A version 3 slave's greeting: the master says so (and answers with its
    own greeting, which a version 3 slave's challenge decoder names in turn)."""
    assert GREETING == b"RMQC\x04"
    with pytest.raises(HandshakeVersionError,
                       match="version 3 not understood \\(this master speaks 4"):
        GreetingDecoder().feed(b"RMQC\x03")
    with pytest.raises(HandshakeVersionError,
                       match="version 3 not understood \\(this slave speaks 4"):
        ChallengeDecoder().feed(b"RMQC\x03" + bytes(16))
    with pytest.raises(HandshakeVersionError, match="version 5 not understood"):
        ChallengeDecoder().feed(b"RMQC\x05")
