"""What a connection may hold before it is trusted (ACL on; issue 48). Pure, no I/O.

With ``aclEnable=true`` a served connection is *authenticated* once a request on it
passed the ACL check (its signature verified, or its peer on a white address): the
daemon's guard calls ``RemotingConnection.authenticate``. Until then:

- **header first**: the header of each frame is judged as soon as it is in, before
  the body is read (``PreAuth.judge_partial``). A request that carries no
  ``AccessKey`` and ``Signature`` cannot pass whatever its body holds: it is
  answered NO_PERMISSION with the remark the ACL gives an unsigned request
  today, and the connection is closed, its body never read. A signed one is read
  on (the signature covers the body, so it is verified once the body is in).
- **a frame cap**: a signed frame that declares more than ``max_frame_bytes``
  (``aclPreAuthMaxFrameBytes``) is refused once its header is in (SYSTEM_ERROR
  saying so, the connection closed), its body never read.
- **a shared budget**: the partial frames of all connections not yet
  authenticated together are bounded by ``budget``
  (``aclPreAuthReadBudgetBytes``): past it those connections stop reading,
  except one at a time that completes the frame it holds part of
  (``SharedBudget.may_finish``), as for the daemon's whole budget.

``HeaderGate`` is the daemon's ACL seen from here (acl/guard.py
``HeaderGate``; the name server's in namesrv/acl.py): whether a peer address is
trusted outright (a global white address), and the verdict on one request's header.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from protocol.acl import ACCESS_KEY, SIGNATURE
from protocol.codecs import detect
from protocol.codecs.base import MAX_HEADER_BYTES, Codec
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.trio.limits import MiB, SharedBudget

# aclPreAuthMaxFrameBytes beyond the largest body a daemon takes: the header
# (MAX_HEADER_BYTES) and the few bytes around it (length words, msgpack's
# array and bin headers, the version)
PRE_AUTH_FRAME_SLACK = 64 * 1024
# aclPreAuthReadBudgetBytes: eight first requests of a 4 MiB message at once, or
# thousands of heart-beats, from clients not yet authenticated
DEFAULT_PRE_AUTH_BUDGET = 32 * MiB


# the largest request body of a name server taken as its "message size": RocketMQ's
# default maxMessageSize (a broker's compressed registration of ~200,000 topics)
NAMESRV_PRE_AUTH_BODY = 4 * MiB


def pre_auth_frame_cap(max_body: int) -> int:
    """The default aclPreAuthMaxFrameBytes for a daemon whose largest request body
    is ``max_body`` bytes (a broker: maxMessageSize)."""
    return MAX_HEADER_BYTES + max_body + PRE_AUTH_FRAME_SLACK


class PreAuthKeys(Protocol):
    """The pre-auth keys of a daemon's config (broker and name server alike)."""

    acl_pre_auth_max_frame_bytes: int  # 0: pre_auth_frame_cap of the daemon's largest body
    acl_pre_auth_read_budget_bytes: int
    max_frame_size: int


def pre_auth_problem(config: PreAuthKeys) -> str | None:
    """What is wrong with a config's pre-auth keys (None: nothing)."""
    cap = config.acl_pre_auth_max_frame_bytes
    if cap and not MAX_HEADER_BYTES <= cap <= config.max_frame_size:
        return (f"aclPreAuthMaxFrameBytes must be 0 (the header limit + the largest "
                f"body + {PRE_AUTH_FRAME_SLACK // 1024} KiB) or within {MAX_HEADER_BYTES}.."
                f"maxFrameSize ({config.max_frame_size}), not {cap}")
    if config.acl_pre_auth_read_budget_bytes <= 0:
        return ("aclPreAuthReadBudgetBytes must be positive, not "
                f"{config.acl_pre_auth_read_budget_bytes}")
    return None


def pre_auth_of(config: PreAuthKeys, gate: HeaderGate, max_body: int) -> PreAuth:
    """A daemon config's pre-auth keys with its ACL's ``gate``; ``max_body``: the
    daemon's largest request body (what aclPreAuthMaxFrameBytes=0 makes room for)."""
    cap = config.acl_pre_auth_max_frame_bytes or pre_auth_frame_cap(max_body)
    return PreAuth(gate, min(cap, config.max_frame_size),
                   SharedBudget(config.acl_pre_auth_read_budget_bytes))


class Verdict(Enum):
    MORE = "more"  # the header is not all in: read on
    READ = "read"  # signed: the body is needed to verify it, read it within the limits
    TRUST = "trust"  # allowed on its header (a white address): the connection is authenticated
    REFUSE = "refuse"  # refused on its header: answered (a oneway is not), connection closed
    CLOSE = "close"  # nothing to answer (too large, undecodable, a stray response): closed


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    answer: RemotingCommand | None = None  # REFUSE: what to answer (None for a oneway)
    reason: str = ""  # CLOSE (and a REFUSE not the ACL's): why, for the log


MORE = Judgement(Verdict.MORE)
READ = Judgement(Verdict.READ)
TRUST = Judgement(Verdict.TRUST)


def carries_signature(fields: Mapping[str, object] | None) -> bool:
    """Whether a header carries what a signed request has: ``AccessKey`` and
    ``Signature``, non-empty strings. Without them no body changes the ACL's
    answer, so the body need not be read."""
    if not fields:
        return False
    key, signature = fields.get(ACCESS_KEY), fields.get(SIGNATURE)
    return isinstance(key, str) and bool(key) and isinstance(signature, str) and bool(signature)


class HeaderGate(Protocol):
    """A daemon's ACL, asked about a connection not yet authenticated."""

    def trusts(self, remote_addr: str) -> bool:
        """Whether every request from ``remote_addr`` passes whatever it carries
        (a global white address): the connection is authenticated at once."""

    def judge(self, conn: Any, cmd: RemotingCommand) -> Judgement:
        """The verdict on a request whose header (``cmd``, its body perhaps not
        in) came on ``conn``: READ when the body is needed (a signed request),
        TRUST when it passes on its header, REFUSE (with the answer, logged and
        counted as any refusal) when it cannot pass."""


@dataclass(slots=True)
class PreAuth:
    """The pre-authentication limits of a server's connections (one per server)."""

    gate: HeaderGate
    max_frame_bytes: int
    budget: SharedBudget

    def judge_frame(self, conn: Any, cmd: RemotingCommand,
                    expects: Callable[[int], bool]) -> Judgement:
        """The verdict on a frame's command (whole, or its header alone) on a
        connection not yet authenticated. ``expects(opaque)``: whether this
        side waits for the answer ``opaque`` (a response to anything else is
        not read)."""
        if cmd.is_response:
            if expects(cmd.opaque):
                return READ
            return Judgement(Verdict.CLOSE, reason="a response to no request of this side's")
        if self.gate.trusts(conn.remote_addr):
            return TRUST
        return self.gate.judge(conn, cmd)

    def judge_partial(self, conn: Any, declared: int | None, head: bytes, codec: Codec | None,
                      expects: Callable[[int], bool]) -> Judgement:
        """The verdict on the frame a connection not yet authenticated holds
        part of: ``declared`` its length (None: its length prefix is not all
        in), ``head`` its first payload bytes received (up to a little past
        MAX_HEADER_BYTES), ``codec`` the connection's (None: read from
        ``head``). The header is judged first, so that an unsigned request
        of any size is told why it is refused; a frame the ACL would read
        that declares more than ``max_frame_bytes`` is then refused too."""
        if declared is None:
            return MORE
        if self.gate.trusts(conn.remote_addr):
            return TRUST
        if not head:
            return MORE
        try:
            cmd = (codec or detect(head)).decode_header(head)
        except RemoteProtocolError as exc:
            return Judgement(Verdict.CLOSE,
                             reason=f"undecodable header before authentication: {exc}")
        if cmd is None:
            return MORE
        judgement = self.judge_frame(conn, cmd, expects)
        if judgement.verdict is not Verdict.READ or declared <= self.max_frame_bytes:
            return judgement
        reason = (f"a frame of {declared} bytes before authentication is above "
                  f"aclPreAuthMaxFrameBytes ({self.max_frame_bytes}): a connection's first "
                  "request must be smaller")
        if cmd.is_response or cmd.is_oneway:
            return Judgement(Verdict.CLOSE, reason=reason)
        return Judgement(Verdict.REFUSE, cmd.response(ResponseCode.SYSTEM_ERROR, reason),
                         reason)
