"""Signatures bound to what they authorise (beyond RocketMQ; pure, the clock handed in).

RocketMQ's signature covers a request's ext fields and body, not its code nor a time,
so a captured signed request can be sent again at any later time, or with another code
(GET_TOPIC_STATS_INFO's ``{topic}`` signed once serves a DELETE_TOPIC_IN_BROKER of that
topic). This project's SDK and mqadmin also sign the request code, a timestamp and a
nonce (protocol/acl.py ``sign_request``); after a request's signature verified, the
broker and the name server check them here:

- ``check``: when the binding fields are there, the signed code must be the request's
  code and the signed time within ``window_ms`` of the server's clock; a request whose
  code is in ``BOUND_CODES`` (admin and destructive requests), or any request with
  ``strict``, needs them. Other requests, the data path of RocketMQ 4.x clients (send,
  pull, heartbeat, offsets, transactions), keep RocketMQ's plain signature.
- ``remember``: an allowed bound request's signature goes into a replay cache until its
  time leaves the window; the same signature again is refused. Bounded: ``BOUND_CODES``
  requests in a cache of ``ADMIN_REPLAY_ENTRIES`` that refuses more when full (only
  accounts allowed to make such requests fill it), the others in one of
  ``replay_entries`` that forgets the entry nearest to expiry when full (best effort on
  the data path: a flood of signed requests shortens their protection, never memory).

Refusals name the reason (unbound, other code, expired, replayed): they come only after
the signature verified, so they tell nothing about which access keys exist.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from acl.plain import ADMIN_CODES
from protocol.acl import (
    BINDING_FIELDS,
    SIGNATURE,
    SIGNED_CODE,
    SIGNED_TIME,
    Binding,
    read_binding,
)
from protocol.codes import RequestCode

# RocketMQ 4.x's name server config requests (mqadmin getNamesrvConfig /
# updateNamesrvConfig): reading or changing the name server's config is admin-only.
UPDATE_NAMESRV_CONFIG = RequestCode.UPDATE_NAMESRV_CONFIG
GET_NAMESRV_CONFIG = RequestCode.GET_NAMESRV_CONFIG

# The name server's admin-only requests (namesrv/acl.py): those that change what it
# answers, or read its configuration. Here, where both daemons' guards find it.
NAMESRV_ADMIN_CODES: frozenset[int] = frozenset({
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.PUT_KV_CONFIG,
    RequestCode.DELETE_KV_CONFIG,
    UPDATE_NAMESRV_CONFIG,
    GET_NAMESRV_CONFIG,
    # the controller inside the name server (enableControllerInNamesrv): what changes
    # its state or its settings; brokers send these with their admin accounts
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
    RequestCode.CONTROLLER_ELECT_MASTER,
    RequestCode.CONTROLLER_REGISTER_BROKER,
    RequestCode.CONTROLLER_APPLY_BROKER_ID,
    RequestCode.CLEAN_BROKER_DATA,
    RequestCode.UPDATE_CONTROLLER_CONFIG,
    RequestCode.GET_CONTROLLER_CONFIG,
})

# Destructive RocketMQ 4.9 request codes in neither admin list (none is served here
# today; listed so that a handler added later is covered from the start).
OTHER_DESTRUCTIVE_CODES: frozenset[int] = frozenset({
    209,  # SUSPEND_CONSUMER
    210,  # RESUME_CONSUMER
    211,  # RESET_CONSUMER_OFFSET_IN_CONSUMER
    212,  # RESET_CONSUMER_OFFSET_IN_BROKER
    213,  # ADJUST_CONSUMER_THREAD_POOL
    218,  # DELETE_KV_CONFIG_BY_VALUE
    220,  # RESET_CONSUMER_CLIENT_OFFSET
    306,  # CLEAN_EXPIRED_CONSUMEQUEUE
    309,  # CONSUME_MESSAGE_DIRECTLY
    316,  # CLEAN_UNUSED_TOPIC
    323,  # RESUME_CHECK_HALF_MESSAGE
})

# The one list of requests accepted only with a bound signature: the broker's admin
# requests (topic, group, ACL, config and permission changes, deletes, offset resets;
# acl/plain.py ADMIN_CODES), the name server's and the other destructive ones.
BOUND_CODES: frozenset[int] = ADMIN_CODES | NAMESRV_ADMIN_CODES | OTHER_DESTRUCTIVE_CODES

# ±60 s: covers the clock difference of NTP-synchronised hosts many times over and a
# request's time in queues and retries, while a captured request is useless a minute later.
DEFAULT_WINDOW_MS = 60_000
# Replay cache of data-path requests: ~220 bytes an entry (the signature, its expiry and
# their heap and dict slots; measured with tracemalloc), so 100,000 entries hold ~22 MB
# at most; at 1,600 bound requests/s or fewer each is remembered for its whole window.
DEFAULT_REPLAY_ENTRIES = 100_000
# Replay cache of BOUND_CODES requests (~2.2 MB at most): 10,000 in a window of a minute
# is 160 admin requests a second, far beyond what operators and brokers' registrations make.
ADMIN_REPLAY_ENTRIES = 10_000

FRESH = "fresh"
REPLAYED = "replayed"
FULL = "full"


def code_name(code: int) -> str:
    try:
        return f"{code} ({RequestCode(code).name})"
    except ValueError:
        return str(code)


class _Unread:
    """``check`` and ``remember`` were not handed the request's read_binding."""


_UNREAD = _Unread()


@dataclass
class ReplayCache:
    """Keys seen, each until its expiry (ms); at most ``max_entries`` of them."""

    max_entries: int
    _expiry: dict[str, int] = field(default_factory=dict)
    _heap: list[tuple[int, str]] = field(default_factory=list)
    evicted: int = 0  # entries forgotten before their expiry (a full cache that evicts)

    def __len__(self) -> int:
        return len(self._expiry)

    def add(self, key: str, expires_ms: int, now_ms: int, *, evict: bool) -> str:
        """FRESH (now remembered), REPLAYED (already there), or FULL (not remembered:
        the cache is full and ``evict`` is False)."""
        heap, expiry = self._heap, self._expiry
        while heap and heap[0][0] <= now_ms:
            del expiry[heapq.heappop(heap)[1]]
        if key in expiry:
            return REPLAYED
        if len(expiry) >= self.max_entries:
            if not evict or not heap:
                return FULL
            del expiry[heapq.heappop(heap)[1]]  # the one nearest to its expiry
            self.evicted += 1
        expiry[key] = expires_ms
        heapq.heappush(heap, (expires_ms, key))
        return FRESH


@dataclass
class SignatureBinding:
    """The binding check of one daemon (aclSignatureWindow, aclStrictSignature,
    aclReplayCacheSize) and its replay caches."""

    window_ms: int = DEFAULT_WINDOW_MS
    strict: bool = False
    replay_entries: int = DEFAULT_REPLAY_ENTRIES
    clock: Callable[[], float] = time.time  # the wall clock: signers' times are theirs
    admin_seen: ReplayCache = field(init=False)
    data_seen: ReplayCache = field(init=False)

    def __post_init__(self) -> None:
        self.admin_seen = ReplayCache(ADMIN_REPLAY_ENTRIES)
        self.data_seen = ReplayCache(self.replay_entries)

    def required(self, code: int) -> bool:
        return self.strict or code in BOUND_CODES

    def check(self, code: int, fields: Mapping[str, object],
              binding: Binding | None | str | _Unread = _UNREAD) -> str | None:
        """Why a request whose signature verified is refused (None: it is not)."""
        if isinstance(binding, _Unread):  # the caller's read_binding, else ours
            binding = read_binding(fields)
        if binding is None:
            if not self.required(code):
                return None
            why = ("aclStrictSignature=true: every request needs it" if code not in BOUND_CODES
                   else "RocketMQ's plain signature is accepted for data requests only")
            return (f"Unbound signature refused for request code={code_name(code)}: admin and "
                    f"destructive requests need {', '.join(BINDING_FIELDS)} signed with the "
                    f"other fields, as this project's SDK and mqadmin send them ({why})")
        if isinstance(binding, str):
            return f"Malformed signature binding for request code={code_name(code)}: {binding}"
        if binding.code != code:
            return (f"Signature bound to request code={code_name(binding.code)} refused for "
                    f"request code={code_name(code)}")
        skew = binding.time_ms - int(self.clock() * 1000)
        if abs(skew) > self.window_ms:
            when = "before" if skew < 0 else "after"
            return (f"Expired signature refused for request code={code_name(code)}: "
                    f"{SIGNED_TIME} is {abs(skew) / 1000:.1f} s {when} the server's clock, "
                    f"beyond aclSignatureWindow={self.window_ms} ms (a replay, or the "
                    f"clocks differ)")
        return None

    def remember(self, code: int, fields: Mapping[str, object],
                 binding: Binding | None | str | _Unread = _UNREAD) -> str | None:
        """Note an allowed request's bound signature; why it is refused when it was
        seen before (or cannot be remembered), else None."""
        if isinstance(binding, _Unread):  # the caller's read_binding, else ours
            binding = read_binding(fields)
        signature = fields.get(SIGNATURE)
        if binding is None or isinstance(binding, str) or not isinstance(signature, str):
            return None  # unbound (a plain RocketMQ signature): nothing to remember
        admin = code in BOUND_CODES
        cache = self.admin_seen if admin else self.data_seen
        now_ms = int(self.clock() * 1000)
        seen = cache.add(signature, binding.time_ms + self.window_ms, now_ms, evict=not admin)
        if seen == REPLAYED:
            return (f"Replayed signature refused for request code={code_name(code)}: this "
                    f"signed request ({SIGNED_CODE}={binding.code}, {SIGNED_TIME}="
                    f"{binding.time_ms}) was already served")
        if seen == FULL:
            return (f"Too many signed admin requests within aclSignatureWindow (the "
                    f"{ADMIN_REPLAY_ENTRIES} remembered against replays): request code="
                    f"{code_name(code)} refused, retry later")
        return None


class BindingSettings(Protocol):
    """The keys of a daemon's config (BrokerConfig, NamesrvConfig) the binding takes."""

    acl_signature_window: int
    acl_strict_signature: bool
    acl_replay_cache_size: int


def signature_binding(config: BindingSettings) -> SignatureBinding:
    return SignatureBinding(window_ms=config.acl_signature_window,
                            strict=config.acl_strict_signature,
                            replay_entries=config.acl_replay_cache_size)
