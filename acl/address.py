"""Remote address patterns of RocketMQ's plain ACL (``RemoteAddressStrategyFactory``).

Forms, as RocketMQ accepts them in ``globalWhiteRemoteAddresses`` and an
account's ``whiteRemoteAddress``:

==========================================  =========================================
pattern                                     matches
==========================================  =========================================
blank (missing, ``""``)                     nothing
``*``, ``*.*.*.*``, ``*:*:*:*:*:*:*:*``     every address
``192.168.1.1``, ``::1``                    that one address (IPv6 in any spelling)
``192.168.*.*``, ``192.168.1.*``            a wildcard octet and every octet after it
``192.168.1.1-10``, ``192.168.1-10.*``      an inclusive octet range (then wildcards)
``192.168.1.{1,2}``, ``fe80::{1,2}``        the prefix followed by each listed tail
``10.0.0.1,192.168.1.*``                    any of the comma-separated patterns
``1050::5:600:300c:*``                      IPv6: the last group any (``*`` only at the end)
``1050::5:600:300c:1-200``                  IPv6: the last group in a hex range
``2::ac5:78:1-200:*``                       IPv6: group 7 in a hex range, group 8 any
==========================================  =========================================

``RemoteAddressStrategy.parse`` raises ValueError naming the pattern and what is
wrong with it. ``matches`` takes a host (no port; ``[v6]`` brackets are
accepted) and never raises: something that is not an IP address matches only
``*``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
ANY_PATTERNS = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


@lru_cache(maxsize=4096)  # asked once per request: peers' addresses repeat
def parse_host(host: str) -> IPAddress | None:
    """The address of ``host`` (an IPv4-mapped IPv6 address as its IPv4 one), or None."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if "%" in text:  # a zone index names a link, not an address
        text = text.split("%", 1)[0]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _one_address(text: str, pattern: str) -> IPAddress:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        raise ValueError(
            f"address pattern {pattern!r}: {text.strip()!r} is not an IPv4 or IPv6 address"
        ) from None


class RemoteAddressStrategy:
    """One parsed pattern; ``parse`` picks the strategy, as RocketMQ's factory."""

    pattern: str

    @staticmethod
    def parse(pattern: str | None) -> RemoteAddressStrategy:
        if pattern is None or not pattern.strip():
            return NoAddress(pattern or "")
        text = pattern.strip()
        if text in ANY_PATTERNS:
            return AnyAddress(text)
        if text.endswith("}"):
            return _parse_braces(text)
        if "," in text:
            items = [item.strip() for item in text.split(",") if item.strip()]
            if not items:
                raise ValueError(f"address pattern {text!r} lists no address")
            parts: list[RemoteAddressStrategy] = []
            for item in items:
                if "{" in item or "}" in item:
                    raise ValueError(
                        f"address pattern {text!r}: a {{...}} list is allowed only at the end"
                    )
                try:
                    parts.append(RemoteAddressStrategy.parse(item))
                except ValueError as e:
                    inner = str(e).removeprefix("address pattern ")
                    raise ValueError(f"address pattern {text!r}: in the list, {inner}") from None
            return AnyOf(text, tuple(parts))
        if "*" in text or "-" in text:
            if ":" in text:
                return _parse_v6_range(text)
            return _parse_v4_range(text)
        return Exact(text, frozenset({_one_address(text, text)}))

    def matches(self, host: str) -> bool:
        addr = parse_host(host)
        return addr is not None and self.matches_address(addr)

    def matches_address(self, addr: IPAddress) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pattern!r})"


@dataclass(frozen=True, repr=False)
class NoAddress(RemoteAddressStrategy):
    """A blank pattern: RocketMQ's BlankRemoteAddressStrategy, matching nothing."""

    pattern: str

    def matches(self, host: str) -> bool:
        return False

    def matches_address(self, addr: IPAddress) -> bool:
        return False


@dataclass(frozen=True, repr=False)
class AnyAddress(RemoteAddressStrategy):
    """``*``: RocketMQ's NullRemoteAddressStrategy, matching every peer."""

    pattern: str

    def matches(self, host: str) -> bool:
        return True

    def matches_address(self, addr: IPAddress) -> bool:
        return True


@dataclass(frozen=True, repr=False)
class Exact(RemoteAddressStrategy):
    """One address or a set of them (RocketMQ's One- and MultipleRemoteAddressStrategy)."""

    pattern: str
    addresses: frozenset[IPAddress]

    def matches_address(self, addr: IPAddress) -> bool:
        return addr in self.addresses


@dataclass(frozen=True, repr=False)
class Range(RemoteAddressStrategy):
    """Fixed leading parts, one part in ``lo..hi``, any parts after it
    (RocketMQ's RangeRemoteAddressStrategy). Parts are octets for IPv4 and
    16-bit groups for IPv6."""

    pattern: str
    version: int
    prefix: tuple[int, ...]
    lo: int
    hi: int

    def matches_address(self, addr: IPAddress) -> bool:
        if addr.version != self.version:
            return False
        parts = _parts(addr)
        n = len(self.prefix)
        return parts[:n] == self.prefix and self.lo <= parts[n] <= self.hi


@dataclass(frozen=True, repr=False)
class AnyOf(RemoteAddressStrategy):
    """A comma-separated list: any of its patterns."""

    pattern: str
    parts: tuple[RemoteAddressStrategy, ...]

    def matches_address(self, addr: IPAddress) -> bool:
        return any(p.matches_address(addr) for p in self.parts)


def _parts(addr: IPAddress) -> tuple[int, ...]:
    raw = addr.packed
    if addr.version == 4:
        return tuple(raw)
    return tuple(int.from_bytes(raw[i:i + 2], "big") for i in range(0, 16, 2))


def _parse_braces(text: str) -> RemoteAddressStrategy:
    """``prefix{a,b,...}``: the addresses prefix+a, prefix+b, ..."""
    start = text.find("{")
    sep = ":" if ":" in text else "."
    if start < 0 or text.count("{") != 1 or (start > 0 and text[start - 1] != sep):
        raise ValueError(
            f"address pattern {text!r}: a {{...}} list must be the whole last "
            f"{'group' if sep == ':' else 'octet'}"
        )
    if sep == "." and text.count(".") != 3:
        raise ValueError(f"address pattern {text!r}: an IPv4 address has 4 octets")
    prefix = text[:start]
    tails = [t.strip() for t in text[start + 1:-1].split(",") if t.strip()]
    if not tails:
        raise ValueError(f"address pattern {text!r}: the {{...}} list is empty")
    return Exact(text, frozenset(_one_address(prefix + t, text) for t in tails))


def _range(value: str, base: int, top: int, pattern: str) -> tuple[int, int]:
    """``*`` or ``a-b`` (decimal for IPv4, hex for IPv6) as inclusive bounds."""
    if value == "*":
        return 0, top
    lo_text, sep, hi_text = value.partition("-")
    digits = "0123456789abcdefABCDEF"[: 10 if base == 10 else 22]
    ok = (sep and lo_text and hi_text and len(lo_text) <= 4 and len(hi_text) <= 4
          and all(c in digits for c in lo_text + hi_text))
    if not ok:
        raise ValueError(
            f"address pattern {pattern!r}: {value!r} is neither '*' nor a range like "
            f"{'1-10' if base == 10 else '1-ff'}"
        )
    lo, hi = int(lo_text, base), int(hi_text, base)
    if not lo <= hi <= top:
        raise ValueError(
            f"address pattern {pattern!r}: the range {value!r} must go up, within 0..{top}"
        )
    return lo, hi


def _parse_v4_range(text: str) -> Range:
    octets = [o.strip() for o in text.split(".")]
    if len(octets) != 4:
        raise ValueError(f"address pattern {text!r}: an IPv4 address has 4 octets")
    at = next(i for i, o in enumerate(octets) if "*" in o or "-" in o)
    if at == 0:
        raise ValueError(f"address pattern {text!r}: the first octet cannot be a wildcard "
                         f"or a range (use '*' for every address)")
    if any(o != "*" for o in octets[at + 1:]):
        raise ValueError(
            f"address pattern {text!r}: every octet after a wildcard or a range must be '*'"
        )
    prefix = []
    for o in octets[:at]:
        if not (o.isascii() and o.isdigit() and len(o) <= 3 and int(o) <= 255
                and (o == "0" or not o.startswith("0"))):
            raise ValueError(f"address pattern {text!r}: {o!r} is not an octet (0..255)")
        prefix.append(int(o))
    lo, hi = _range(octets[at], 10, 255, text)
    return Range(text, 4, tuple(prefix), lo, hi)


def _parse_v6_range(text: str) -> Range:
    """``P:*``, ``P:a-b`` or ``P:a-b:*``, where P is the start of an address
    (RocketMQ's IPv6AddressCheck: ``*`` only at the end, a range in the last
    group or the one before a final ``*``)."""
    groups = text.split(":")
    if groups[-1] == "*" and "-" in groups[-2]:
        ranged, wild = groups[-2], 1
        head = groups[:-2]
    elif groups[-1] == "*" or "-" in groups[-1]:
        ranged, wild = groups[-1], 0
        head = groups[:-1]
    else:
        raise ValueError(
            f"address pattern {text!r}: in IPv6, '*' may only be the last group and a range "
            f"only the last group or the one before a final '*'"
        )
    if any("*" in g or "-" in g for g in head):
        raise ValueError(
            f"address pattern {text!r}: in IPv6, '*' may only be the last group and a range "
            f"only the last group or the one before a final '*'"
        )
    lo, hi = _range(ranged, 16, 0xFFFF, text)
    # the pattern with its ranged/wild groups as 0 must spell a whole address
    sample = ":".join(head + ["0"] * (1 + wild))
    addr = _one_address(sample, text)
    if not isinstance(addr, ipaddress.IPv6Address):
        raise ValueError(f"address pattern {text!r} is not an IPv6 pattern")
    position = 7 - wild
    return Range(text, 6, _parts(addr)[:position], lo, hi)
