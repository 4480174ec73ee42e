"""Request signatures of RocketMQ's plain ACL (sans-IO).

RocketMQ's ``AclClientRPCHook`` signs a request this way (``AclUtils.combineRequestContent``,
``AclSigner.calSignature``):

1. the ext fields as the wire carries them (every header value as a string, null ones left out),
   plus ``AccessKey`` and, when there is one, ``SecurityToken``;
2. sorted by key (a Java ``TreeMap``: ``String.compareTo``, UTF-16 code unit order);
3. the VALUES concatenated, keys left out, ``Signature`` skipped, encoded as UTF-8;
4. the raw body appended;
5. HMAC-SHA1 with the secret key (UTF-8), then base64 (standard alphabet, padded).

The broker rebuilds the same bytes from the ext fields it received and compares signatures
(``PlainPermissionManager.validate``, ``MessageDigest.isEqual``).

Beyond RocketMQ, ``sign_request`` also signs the request code, a time and a nonce as
three more ext fields (``SignedRequestCode``, ``SignedTimestamp``, ``SignedNonce``), so a
captured request cannot be sent with another code or later; acl/binding.py checks
them (docs/security/signature-binding.md).
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import os
import time
from collections.abc import Collection, Mapping
from functools import lru_cache
from typing import NamedTuple

# SessionCredentials' ext-field names
ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"  # a key of the credentials file, never sent
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"


def _wire_text(key: str, value: object) -> str:
    """``value`` as RocketMQ's ``makeCustomHeaderToNet`` writes it (``toString()``)."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    raise TypeError(f"header field {key!r} holds a {type(value).__name__}")


def _java_utf8(text: str) -> bytes:
    """``text.getBytes(UTF_8)`` as Java does it: a surrogate pair is one character, an
    unpaired surrogate becomes ``?`` (Python's strict encoder would raise)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return joined.encode("utf-8", "replace")


def _java_order(key: str) -> bytes:
    """Sort key giving Java's ``String.compareTo`` order (UTF-16 code units, unsigned)."""
    return key.encode("utf-16-be", "surrogatepass")


def _signed_text(fields: Mapping[str, object], skip: Collection[str] = ()) -> bytes:
    """The header part of what RocketMQ signs: the values of ``fields`` sorted by key
    (see ``signature_content``), as UTF-8."""
    keys = sorted(fields)
    try:
        joined = "".join(keys)
    except TypeError:  # a key that is not a str
        raise TypeError("header field names must be strings") from None
    # Python's order is Java's for names below U+D800 (ASCII ones, always here)
    if not joined.isascii() and max(joined) >= "\ud800":
        keys.sort(key=_java_order)
    if not skip:
        try:  # every value a str (a signed request of this project's SDK): one join in C
            return _java_utf8("".join([fields[key] for key in keys  # type: ignore[misc]
                                       if key != SIGNATURE]))
        except TypeError:
            pass  # None, bool or int values: the loop below says which it keeps
    texts: list[str] = []
    add = texts.append
    for key in keys:
        value = fields[key]
        if value is None or key == SIGNATURE or key in skip:
            continue
        add(value if type(value) is str else _wire_text(key, value))
    return _java_utf8("".join(texts))


def signature_content(
    fields: Mapping[str, object], body: bytes | None, *, skip: Collection[str] = ()
) -> bytes:
    """The bytes RocketMQ signs: the values of ``fields`` sorted by key, then ``body``.

    Values become strings as on RocketMQ's wire (str as is, bool "true"/"false", int in
    decimal); None values are left out, as are the ``Signature`` field and the keys in
    ``skip`` (a broker verifying a client of version <= V4_9_3 skips ``_UNIQUE_KEY_QUERY``,
    which those clients did not sign). Other value types raise TypeError.
    """
    return _signed_text(fields, skip) + (body or b"")


_SHA1_BLOCK = 64
_IPAD = bytes(b ^ 0x36 for b in range(256))
_OPAD = bytes(b ^ 0x5C for b in range(256))


class _KeyedSha1:
    """HMAC-SHA1 (RFC 2104) with the key's inner and outer pads hashed once: a signature
    copies two SHA-1 states (0.3 µs) instead of keying a new HMAC (``hmac.digest``,
    3 µs) or copying a keyed one (``HMAC.copy``, a Python object around an OpenSSL
    context, 1.2 µs). Gives ``hmac.digest(key, msg, "sha1")`` (tests/protocol/
    test_acl_signature.py checks it for keys shorter and longer than a block)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > _SHA1_BLOCK:
            key = hashlib.sha1(key).digest()
        key = key.ljust(_SHA1_BLOCK, b"\0")
        self._inner = hashlib.sha1(key.translate(_IPAD))
        self._outer = hashlib.sha1(key.translate(_OPAD))

    def digest(self, *parts: bytes | bytearray | memoryview) -> bytes:
        """The HMAC of ``parts`` one after the other, none of them copied."""
        inner = self._inner.copy()
        for part in parts:
            inner.update(part)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


@lru_cache(maxsize=256)
def _keyed_sha1(secret_key: str) -> _KeyedSha1:
    """The HMAC-SHA1 of ``secret_key``, one per secret key a process signs or verifies
    with: its credentials, the accounts of its ``plain_acl.yml`` (never a key a peer
    sends)."""
    return _KeyedSha1(_java_utf8(secret_key))


def _signature(text: bytes, body: bytes | bytearray | memoryview | None,
               secret_key: str) -> bytes:
    """Base64 (ASCII bytes) of the HMAC-SHA1 of ``text`` then ``body``: the body is
    hashed where it lies, not copied after the text."""
    mac = _keyed_sha1(secret_key)
    digest = mac.digest(text, body) if body else mac.digest(text)
    return binascii.b2a_base64(digest, newline=False)


def calc_signature(content: bytes, secret_key: str) -> str:
    """Base64 of the HMAC-SHA1 of ``content`` keyed with ``secret_key`` (UTF-8)."""
    return _signature(content, None, secret_key).decode("ascii")


def _sign_text_fields(out: dict[str, str], body: bytes | None, access_key: str,
                      secret_key: str, security_token: str | None) -> dict[str, str]:
    """``out`` (str values only, no None) with AccessKey, SecurityToken and Signature."""
    out.pop(SIGNATURE, None)
    out[ACCESS_KEY] = access_key
    if security_token is not None:
        out[SECURITY_TOKEN] = security_token
    out[SIGNATURE] = _signature(_signed_text(out), body, secret_key).decode("ascii")
    return out


def _text_fields(fields: Mapping[str, object]) -> dict[str, str]:
    """``fields`` as the wire carries them: values as strings, None ones left out."""
    return {key: value if type(value) is str else str(value) if type(value) is int
            else _wire_text(key, value) for key, value in fields.items() if value is not None}


def sign_fields(
    fields: Mapping[str, object],
    body: bytes | None,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
) -> dict[str, str]:
    """The ext fields to send: ``fields`` as strings (None ones left out) with ``AccessKey``,
    ``SecurityToken`` (when given) and ``Signature`` added, as ``AclClientRPCHook`` does.
    A ``Signature`` already in ``fields`` is replaced."""
    return _sign_text_fields(_text_fields(fields), body, access_key, secret_key,
                             security_token)


def verify(
    fields: Mapping[str, object],
    body: bytes | bytearray | memoryview | None,
    secret_key: str,
    *,
    skip: Collection[str] = (),
) -> bool:
    """Whether ``fields[Signature]`` signs ``fields`` (less the keys in ``skip``) and ``body``
    with ``secret_key``.

    Compares in constant time; garbage (no Signature, a non-str one, values of other types,
    a non-str key) gives False, never an exception.
    """
    try:
        claimed = fields.get(SIGNATURE)
        if not isinstance(claimed, str) or not isinstance(secret_key, str):
            return False
        if body is not None and not isinstance(body, bytes):
            if not isinstance(body, bytearray | memoryview):
                return False
            body = bytes(body)  # a memoryview need not be contiguous
        expected = _signature(_signed_text(fields, skip), body, secret_key)
    except (TypeError, ValueError, AttributeError):
        return False
    return hmac.compare_digest(expected, _java_utf8(claimed))


# ---------------------------------------------------------------- binding (beyond RocketMQ)
#
# RocketMQ's signature covers the ext fields and the body, but neither the request code
# (it is in the frame header, not an ext field) nor a time: a captured signed request can
# be sent again later, or with another code (GET_TOPIC_STATS_INFO's {topic} fields signed
# once serve a DELETE_TOPIC_IN_BROKER of that topic). This project's clients add three
# ext fields, signed as every other ext field is (so a RocketMQ broker verifies them as
# today, and a RocketMQ client, which sends none, still verifies here):

SIGNED_CODE = "SignedRequestCode"  # the request code, decimal
SIGNED_TIME = "SignedTimestamp"  # ms since the epoch, decimal, the signer's clock
SIGNED_NONCE = "SignedNonce"  # random hex, so two equal requests in one ms sign differently
BINDING_FIELDS = (SIGNED_CODE, SIGNED_TIME, SIGNED_NONCE)
NONCE_MAX_LENGTH = 64  # a longer nonce is malformed (ours has 16 hex digits)


def sign_request(
    fields: Mapping[str, object],
    body: bytes | None,
    code: int,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
    *,
    now_ms: int | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """``sign_fields`` with the request's ``code``, the time (``now_ms``, default the
    wall clock) and a random ``nonce`` added to the signed fields."""
    out = _text_fields(fields)
    out[SIGNED_CODE] = str(code)
    out[SIGNED_TIME] = str(int(time.time() * 1000) if now_ms is None else now_ms)
    out[SIGNED_NONCE] = os.urandom(8).hex() if nonce is None else nonce  # secrets.token_hex
    return _sign_text_fields(out, body, access_key, secret_key, security_token)


class Binding(NamedTuple):
    """The binding fields of a request, read (not yet checked against anything).
    A tuple: one is read for every signed request, and a tuple is quicker to make
    than a frozen dataclass."""

    code: int
    time_ms: int
    nonce: str


def read_binding(fields: Mapping[str, object]) -> Binding | None | str:
    """The request's Binding; None when it carries none of the binding fields; a
    problem (str) when it carries some but not all, or a malformed one."""
    code, stamp, nonce = fields.get(SIGNED_CODE), fields.get(SIGNED_TIME), fields.get(SIGNED_NONCE)
    if code is None and stamp is None and nonce is None:
        return None
    if code is None or stamp is None or nonce is None:
        missing = [name for name in BINDING_FIELDS if fields.get(name) is None]
        return f"the signature binding lacks {', '.join(missing)}"
    if type(code) is not str:
        code = _text_or_none(code)
    if type(stamp) is not str:
        stamp = _text_or_none(stamp)
    if type(nonce) is not str:
        nonce = _text_or_none(nonce)
    if code is None or len(code) > 10 or not (code.isascii() and code.isdigit()):
        return f"{SIGNED_CODE} is not a request code"
    if stamp is None or len(stamp) > 15 or not (stamp.isascii() and stamp.isdigit()):
        return f"{SIGNED_TIME} is not a time in ms"
    if not nonce or len(nonce) > NONCE_MAX_LENGTH:
        return f"{SIGNED_NONCE} is empty or longer than {NONCE_MAX_LENGTH} characters"
    return Binding(int(code), int(stamp), nonce)


def _text_or_none(value: object) -> str | None:
    try:
        return _wire_text("", value)
    except TypeError:
        return None
