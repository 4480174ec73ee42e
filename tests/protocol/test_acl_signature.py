"""Request signatures of RocketMQ's plain ACL (protocol/acl.py).

Golden vectors: each signed byte string is written out here by hand, in the order
RocketMQ's rules give (ext fields plus AccessKey/SecurityToken, sorted by key as a
Java TreeMap does, values only, Signature left out, then the body), and its
signature is computed without the module: by the ``openssl`` binary
(``openssl dgst -sha1 -hmac KEY -binary | base64``) when it is installed, and by
``hmac`` here. The expected signatures are also pinned as literals (computed once
with openssl). Then tampering, exclusions, garbage, and a hypothesis round trip.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import shutil
import subprocess
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import acl
from protocol.acl import (
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    calc_signature,
    sign_fields,
    signature_content,
    verify,
)

PROPERTIES = "UNIQ_KEY\x017F000001A1B2C3D4E5F60000000A0001\x02WAIT\x01true\x02TAGS\x01TagA\x02"


@dataclass(frozen=True)
class Vector:
    name: str
    fields: dict[str, object]  # the header fields, as typed values
    body: bytes | None
    access_key: str
    secret_key: str
    security_token: str | None
    content: bytes  # written by hand in the sorted order
    signature: str  # pinned: computed once with openssl


VECTORS = [
    Vector(
        name="SEND_MESSAGE",
        fields={
            "producerGroup": "PG_ORDER",
            "topic": "TopicTest",
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4,
            "queueId": 1,
            "sysFlag": 0,
            "bornTimestamp": 1700000000123,
            "flag": 0,
            "properties": PROPERTIES,
            "reconsumeTimes": 0,
            "unitMode": False,
            "batch": False,
        },
        body=b"Hello RocketMQ",
        access_key="RocketMQ",
        secret_key="12345678",
        security_token=None,
        # AccessKey, batch, bornTimestamp, defaultTopic, defaultTopicQueueNums, flag,
        # producerGroup, properties, queueId, reconsumeTimes, sysFlag, topic, unitMode; body
        content=(
            b"RocketMQ"
            + b"false"
            + b"1700000000123"
            + b"TBW102"
            + b"4"
            + b"0"
            + b"PG_ORDER"
            + b"UNIQ_KEY\x017F000001A1B2C3D4E5F60000000A0001\x02WAIT\x01true\x02TAGS\x01TagA\x02"
            + b"1"
            + b"0"
            + b"0"
            + b"TopicTest"
            + b"false"
            + b"Hello RocketMQ"
        ),
        signature="LFfQj89SESUWS5ByzxPbswekQns=",
    ),
    Vector(
        name="PULL_MESSAGE",
        fields={
            "consumerGroup": "CG_ORDER",
            "topic": "TopicTest",
            "queueId": 2,
            "queueOffset": 128,
            "maxMsgNums": 32,
            "sysFlag": 3,
            "commitOffset": 120,
            "suspendTimeoutMillis": 15000,
            "subscription": "TagA || TagB",
            "subVersion": 1700000000000,
            "expressionType": "TAG",
        },
        body=None,
        access_key="rocketmq2",
        secret_key="12345678",
        security_token=None,
        # AccessKey, commitOffset, consumerGroup, expressionType, maxMsgNums, queueId,
        # queueOffset, subVersion ('V' < 's'), subscription, suspendTimeoutMillis, sysFlag, topic
        content=(
            b"rocketmq2"
            + b"120"
            + b"CG_ORDER"
            + b"TAG"
            + b"32"
            + b"2"
            + b"128"
            + b"1700000000000"
            + b"TagA || TagB"
            + b"15000"
            + b"3"
            + b"TopicTest"
        ),
        signature="yDkZFPQtUPgX8PeBYDMAMF0BT+8=",
    ),
    Vector(
        name="QUERY_MESSAGE with SecurityToken, non-ASCII",
        fields={
            "topic": "主题-Tést",
            "key": "ключ 🔑",
            "maxNum": 32,
            "beginTimestamp": 0,
            "endTimestamp": 1700000000999,
            "_UNIQUE_KEY_QUERY": False,
        },
        body=b"",
        access_key="ak-ünï",
        secret_key="sëcret-键",
        security_token="tök€n",
        # AccessKey, SecurityToken, _UNIQUE_KEY_QUERY ('_' sorts between upper and lower
        # case), beginTimestamp, endTimestamp, key, maxNum, topic; empty body adds nothing
        content=(
            b"ak-\xc3\xbcn\xc3\xaf"
            + b"t\xc3\xb6k\xe2\x82\xacn"
            + b"false"
            + b"0"
            + b"1700000000999"
            + b"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87 \xf0\x9f\x94\x91"
            + b"32"
            + b"\xe4\xb8\xbb\xe9\xa2\x98-T\xc3\xa9st"
        ),
        signature="qO39RzRFEdVMoO0yjWQUs7XpLbA=",
    ),
]


def _hmac_b64(content: bytes, key: str) -> str:
    return base64.b64encode(hmac.new(key.encode(), content, hashlib.sha1).digest()).decode()


def _openssl_b64(content: bytes, key: str) -> str:
    mac = subprocess.run(
        ["openssl", "dgst", "-sha1", "-hmac", key, "-binary"],
        input=content,
        capture_output=True,
        check=True,
    ).stdout
    if shutil.which("base64") is None:
        return base64.b64encode(mac).decode()
    out = subprocess.run(["base64"], input=mac, capture_output=True, check=True).stdout
    return out.decode().strip()


def _signed(v: Vector) -> dict[str, str]:
    return sign_fields(v.fields, v.body, v.access_key, v.secret_key, v.security_token)


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: v.name)
def test_golden_content_is_the_hand_written_bytes(v: Vector) -> None:
    fields = dict(v.fields)
    fields[ACCESS_KEY] = v.access_key
    if v.security_token is not None:
        fields[SECURITY_TOKEN] = v.security_token
    assert signature_content(fields, v.body) == v.content
    # the same bytes from what goes on the wire (Signature included, and skipped)
    assert signature_content(_signed(v), v.body) == v.content


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: v.name)
def test_golden_signature_matches_hmac(v: Vector) -> None:
    assert _hmac_b64(v.content, v.secret_key) == v.signature
    assert calc_signature(v.content, v.secret_key) == v.signature
    signed = _signed(v)
    assert signed[SIGNATURE] == v.signature
    assert verify(signed, v.body, v.secret_key)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl binary is not installed")
@pytest.mark.parametrize("v", VECTORS, ids=lambda v: v.name)
def test_golden_signature_matches_openssl(v: Vector) -> None:
    assert _openssl_b64(v.content, v.secret_key) == v.signature


def test_sign_fields_returns_wire_strings() -> None:
    v = VECTORS[0]
    signed = _signed(v)
    assert signed == {
        "producerGroup": "PG_ORDER",
        "topic": "TopicTest",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "1700000000123",
        "flag": "0",
        "properties": PROPERTIES,
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "false",
        ACCESS_KEY: "RocketMQ",
        SIGNATURE: v.signature,
    }
    assert SECURITY_TOKEN not in signed
    assert v.fields["queueId"] == 1  # the input is not changed
    assert ACCESS_KEY not in v.fields
    with_token = _signed(VECTORS[2])
    assert with_token[SECURITY_TOKEN] == "tök€n"


def test_constants() -> None:
    assert (acl.ACCESS_KEY, acl.SECRET_KEY, acl.SIGNATURE, acl.SECURITY_TOKEN) == (
        "AccessKey",
        "SecretKey",
        "Signature",
        "SecurityToken",
    )


# ---- tampering ----


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: v.name)
def test_changing_any_field_value_fails(v: Vector) -> None:
    signed = _signed(v)
    for key in signed:
        if key == SIGNATURE:
            continue
        for changed in (signed[key] + "x", signed[key][:-1], "", signed[key].upper() + "Z"):
            if changed == signed[key]:
                continue
            assert not verify({**signed, key: changed}, v.body, v.secret_key), (key, changed)


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: v.name)
def test_changing_any_body_byte_fails(v: Vector) -> None:
    signed = _signed(v)
    body = v.body or b""
    for i in range(len(body)):
        for flip in (0x01, 0x80):
            bad = bytearray(body)
            bad[i] ^= flip
            assert not verify(signed, bytes(bad), v.secret_key), i
    assert not verify(signed, body + b"\x00", v.secret_key)
    assert not verify(signed, body[:-1] if body else b"x", v.secret_key)


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: v.name)
def test_wrong_key_or_added_field_fails(v: Vector) -> None:
    signed = _signed(v)
    assert not verify(signed, v.body, v.secret_key + "x")
    assert not verify(signed, v.body, v.secret_key[:-1])
    assert not verify(signed, v.body, "")
    assert not verify({**signed, "extra": "1"}, v.body, v.secret_key)
    assert not verify({**signed, "a": "x"}, v.body, v.secret_key)
    if v.security_token is None:
        assert not verify({**signed, SECURITY_TOKEN: "t"}, v.body, v.secret_key)
    # an added field with an empty value adds no bytes: RocketMQ cannot see it either
    assert verify({**signed, "extra": ""}, v.body, v.secret_key)


def test_values_are_concatenated_without_keys() -> None:
    """RocketMQ signs values only: moving text across a boundary keeps the signature."""
    signed = sign_fields({"a": "xy", "b": "z"}, None, "AK", "SK")
    assert verify({**signed, "a": "x", "b": "yz"}, None, "SK")
    assert signature_content({"a": "xy", "b": "z"}, b"!") == b"xyz!"
    # renaming a key keeps the signature while the order stays the same
    renamed = {("c" if k == "b" else k): v for k, v in signed.items()}
    assert verify(renamed, None, "SK")


# ---- exclusions ----


def test_signature_field_is_excluded() -> None:
    fields = {"topic": "T", "queueId": "1"}
    plain = signature_content(fields, b"body")
    assert plain == b"1Tbody"
    assert signature_content({**fields, SIGNATURE: "whatever"}, b"body") == plain
    signed = sign_fields(fields, b"body", "AK", "SK")
    assert signature_content(signed, b"body") == b"AK1Tbody"
    # an old Signature in the input is replaced, not signed
    resigned = sign_fields({**fields, SIGNATURE: "stale"}, b"body", "AK", "SK")
    assert resigned == signed


def test_none_values_are_skipped() -> None:
    assert signature_content({"a": "1", "b": None, "c": "3"}, None) == b"13"
    signed = sign_fields({"a": "1", "b": None}, None, "AK", "SK")
    assert "b" not in signed
    assert verify(signed, None, "SK")
    assert verify({**signed, "b": None}, None, "SK")


def test_body_none_and_empty_are_the_same() -> None:
    assert signature_content({"a": "1"}, None) == signature_content({"a": "1"}, b"") == b"1"
    signed = sign_fields({"a": "1"}, None, "AK", "SK")
    assert verify(signed, b"", "SK")


def test_value_types_as_on_the_wire() -> None:
    content = signature_content({"a": True, "b": False, "c": -7, "d": 2**63 - 1, "e": "s"}, None)
    assert content == b"truefalse-79223372036854775807s"
    for bad in (1.5, b"bytes", [1], object()):
        with pytest.raises(TypeError):
            signature_content({"a": bad}, None)
        with pytest.raises(TypeError):
            sign_fields({"a": bad}, None, "AK", "SK")


def test_keys_sort_in_java_utf16_order() -> None:
    # Python orders code points (U+FFFF < U+1F600); Java's String.compareTo orders UTF-16
    # code units, and the emoji's high surrogate 0xD83D sorts before 0xFFFF
    fields = {"\uffff": "B", "\U0001f600": "A", "Z": "0", "a": "1", "_": "2"}
    assert signature_content(fields, None) == b"0" + b"2" + b"1" + b"A" + b"B"
    # a shorter key sorts before a longer one it prefixes
    assert signature_content({"topicX": "2", "topic": "1"}, None) == b"12"


def test_unpaired_surrogate_encodes_as_java_does() -> None:
    # Java's getBytes(UTF_8) writes '?' for an unpaired surrogate and joins a split pair
    assert signature_content({"a": "x\ud800y"}, None) == b"x?y"
    assert signature_content({"a": "\ud83d", "b": "\ude00"}, None) == "\U0001f600".encode()
    signed = sign_fields({"a": "x\udc00"}, None, "AK", "SK")
    assert verify(signed, None, "SK")


def test_skip_leaves_keys_out() -> None:
    """A 4.9.3 client added _UNIQUE_KEY_QUERY after signing; RocketMQ's broker skips it."""
    signed = sign_fields({"topic": "T", "key": "k"}, None, "AK", "SK")
    late = {**signed, "_UNIQUE_KEY_QUERY": "false"}
    assert not verify(late, None, "SK")
    assert verify(late, None, "SK", skip={"_UNIQUE_KEY_QUERY"})
    assert signature_content(late, None, skip=("_UNIQUE_KEY_QUERY",)) == b"AKkT"


# ---- garbage ----


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"topic": "T"},
        {"topic": "T", SIGNATURE: None},
        {"topic": "T", SIGNATURE: 12},
        {"topic": "T", SIGNATURE: b"abc"},
        {"topic": "T", SIGNATURE: ""},
        {"topic": "T", SIGNATURE: "not base64 at all \x00\xff"},
        {"topic": "T", SIGNATURE: "\ud800"},
        {"topic": 1.5, SIGNATURE: "abc="},
        {"topic": [1], SIGNATURE: "abc="},
        {1: "T", SIGNATURE: "abc="},
        {None: "T", SIGNATURE: "abc="},
    ],
)
def test_verify_on_garbage_is_false(fields: dict[object, object]) -> None:
    assert verify(fields, b"body", "SK") is False  # type: ignore[arg-type]
    assert verify(fields, None, "SK") is False  # type: ignore[arg-type]


def test_verify_with_garbage_body_or_key_is_false() -> None:
    signed = sign_fields({"a": "1"}, b"x", "AK", "SK")
    assert verify(signed, b"x", "SK")
    assert verify(signed, "x", "SK") is False  # type: ignore[arg-type]
    assert verify(signed, 5, "SK") is False  # type: ignore[arg-type]
    assert verify(signed, b"x", None) is False  # type: ignore[arg-type]
    assert verify(signed, b"x", b"SK") is False  # type: ignore[arg-type]
    assert verify(signed, bytearray(b"x"), "SK")


# ---- property ----

_keys = st.text(min_size=1, max_size=12).filter(lambda k: k != SIGNATURE)
_values = st.one_of(st.text(max_size=40), st.integers(), st.booleans(), st.none())


@given(
    fields=st.dictionaries(_keys, _values, max_size=12),
    body=st.one_of(st.none(), st.binary(max_size=200)),
    access_key=st.text(max_size=20),
    secret_key=st.text(max_size=30),
    token=st.one_of(st.none(), st.text(max_size=20)),
)
def test_sign_then_verify_round_trip(
    fields: dict[str, object],
    body: bytes | None,
    access_key: str,
    secret_key: str,
    token: str | None,
) -> None:
    signed = sign_fields(fields, body, access_key, secret_key, token)
    assert all(isinstance(v, str) for v in signed.values())
    assert signed[ACCESS_KEY] == access_key
    assert (SECURITY_TOKEN in signed) == (token is not None or SECURITY_TOKEN in fields)
    assert verify(signed, body, secret_key)
    assert not verify(signed, (body or b"") + b"\x00", secret_key)
    # HMAC pads its key with zero bytes, so "k" and "k\x00" are the same key: change a byte
    assert not verify(signed, body, secret_key + "x")
    # independent recomputation: values sorted by UTF-16 key, concatenated, body appended
    ordered = sorted(
        (k for k in signed if k != SIGNATURE), key=lambda k: k.encode("utf-16-be", "surrogatepass")
    )
    content = "".join(signed[k] for k in ordered).encode() + (body or b"")
    assert signed[SIGNATURE] == _hmac_b64(content, secret_key)


# ---- the keyed HMAC (pads hashed once) against the standard library's ----


@pytest.mark.parametrize("length", [0, 1, 20, 63, 64, 65, 128, 200])
def test_keyed_sha1_is_hmac_sha1_for_keys_around_a_block(length: int) -> None:
    key = bytes(range(256))[:length] if length <= 256 else b"k" * length
    mac = acl._KeyedSha1(key)
    for parts in ((), (b"",), (b"abc",), (b"ab", b"c"), (b"x" * 100, bytearray(b"y" * 5000))):
        assert mac.digest(*parts) == hmac.digest(key, b"".join(parts), "sha1")
    assert mac.digest(b"abc") == mac.digest(b"abc")  # a copy per digest: nothing carried over


@given(key=st.binary(max_size=150), parts=st.lists(st.binary(max_size=300), max_size=4))
def test_keyed_sha1_matches_hmac(key: bytes, parts: list[bytes]) -> None:
    assert acl._KeyedSha1(key).digest(*parts) == hmac.digest(key, b"".join(parts), "sha1")


def test_body_is_signed_in_place_as_if_appended() -> None:
    fields = {"a": "1", "b": "2", ACCESS_KEY: "AK"}
    body = memoryview(b"0123456789")[2:8]
    assert acl._signature(b"12AK", body, "SK").decode() == calc_signature(b"12AK234567", "SK")
    signed = sign_fields(fields, bytes(body), "AK", "SK")
    assert verify(signed, body, "SK") and verify(signed, bytearray(body), "SK")
    assert verify(signed, memoryview(b"-2-3-4-5-6-7")[1::2], "SK")  # not contiguous: copied
