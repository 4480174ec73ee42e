"""Broker2ClientService: what an admin has the broker do with a consumer
group's online members, in domain terms (INVOKE_BROKER_TO_RESET_OFFSET and
GET_CONSUMER_RUNNING_INFO without the remoting: broker/broker_to_client.py is
their adapter and the ``ConsumerLink`` below).

An offset reset (mqadmin resetOffsetByTime, skipAccumulatedMessage):

- a master's work: a slave refuses (``NOT_ON_SLAVE``); a topic this broker
  does not have is ``TOPIC_NOT_EXIST``;
- each readable queue of the topic gets a target: the first message stored at
  or after ``timestamp`` (ms), or with ``SKIP_ALL`` (-1) the queue's max
  offset (everything accumulated is skipped); never below 0;
- the group's offset becomes the target when ``force``, when the group has no
  offset there, or when the target is below it (without ``force`` an offset
  only moves back: RocketMQ's rollback); ``new_offset`` is the rule and
  ``reset_plan`` applies it to a topic's queues, both pure;
- every offset that moves is committed as an admin's reset (counted: slaves
  take it even backwards, see ConsumerOffsetManager);
- then every online member of the group is told, without waiting, the new
  offsets of this broker's queues (``ConsumerLink.tell_reset``), so that it
  takes them instead of writing its old ones back; a member whose channel
  takes nothing now is not told (logged). RocketMQ's broker only tells the
  members and refuses an offline group; here an offline group is reset too.

A running-info relay (mqadmin consumerStatus) asks one member over its
channel and hands its answer back, bounded: at most ``MAX_RELAYS`` at a time
(``BUSY`` beyond), a member whose channel does not take requests now is not
asked (``NOT_READING``), ``RELAY_TIMEOUT_S`` for it to answer (``TIMEOUT``;
the wait for room to send counts), an answer of more than
``MAX_RELAYED_BODY`` bytes is refused (``TOO_LARGE``), one the member
refused is handed back as it is (``REFUSED``: the transport keeps its code).
A gRPC client (its channel a ``SessionChannel``) is never asked:
``UNSUPPORTED``, "not supported for gRPC clients"; an offset reset commits its
group's offsets all the same (POP reads them) and tells only remoting members.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import structlog
import trio

from broker.service.types import GroupMembers, LiveRole, SessionChannel
from protocol.message import MessageQueue
from protocol.names import shown
from protocol.route import TopicConfig

RELAY_TIMEOUT_S = 5.0  # RocketMQ's callClient timeout
MAX_RELAYS = 4
MAX_RELAYED_BODY = 4 * 1024 * 1024
SKIP_ALL = -1  # a reset's timestamp meaning "past the last message"


# ---- offset resets: the rules, pure ---------------------------------------------------


def new_offset(current: int, target: int, force: bool) -> int:
    """A queue's offset after a reset toward ``target`` (``current`` -1: the
    group has none there): the target when forced, when there is no offset
    or when it goes back; else unchanged. A negative target counts as 0."""
    target = max(target, 0)
    return target if force or current < 0 or target < current else current


def reset_plan(current: Mapping[int, int], targets: Mapping[int, int], force: bool
               ) -> dict[int, int]:
    """Each queue of ``targets`` -> its offset after the reset (``current``:
    the group's offsets, a queue missing: none)."""
    return {q: new_offset(current.get(q, -1), t, force) for q, t in targets.items()}


class ResetStatus(enum.Enum):
    OK = "OK"
    TOPIC_NOT_EXIST = "TOPIC_NOT_EXIST"
    NOT_ON_SLAVE = "NOT_ON_SLAVE"


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """Move ``group``'s offsets of ``topic`` to ``timestamp`` (ms; SKIP_ALL:
    past the last message); without ``force`` only backwards."""

    topic: str
    group: str
    timestamp: int
    force: bool = True


@dataclass(slots=True)
class ResetOutcome:
    """The group's offsets of the topic's queues on this broker after the
    reset, and how many online members were told."""

    status: ResetStatus
    remark: str | None = None
    offsets: dict[MessageQueue, int] = field(default_factory=dict)
    told: int = 0


@dataclass(frozen=True, slots=True)
class ResetNotice:
    """What a member is told: the request and the new offsets."""

    request: ResetRequest
    offsets: dict[MessageQueue, int]


@dataclass(frozen=True, slots=True)
class RunningInfoAsk:
    """A member's running info: ``client_id`` of ``group``; ``jstack``: with
    its tasks' stacks."""

    group: str
    client_id: str
    jstack: bool = False


class RelayStatus(enum.Enum):
    OK = "OK"  # the member's answer
    NOT_ONLINE = "NOT_ONLINE"  # no such member
    BUSY = "BUSY"  # MAX_RELAYS in flight
    NOT_READING = "NOT_READING"  # its channel takes no request now
    REFUSED = "REFUSED"  # the member answered an error: handed back as it is
    TOO_LARGE = "TOO_LARGE"  # an answer over MAX_RELAYED_BODY
    FAILED = "FAILED"  # the channel failed
    UNSUPPORTED = "UNSUPPORTED"  # a gRPC client: the broker has no channel to ask it over
    TIMEOUT = "TIMEOUT"  # no answer within RELAY_TIMEOUT_S


class RelayFailed(Exception):
    """The transport could not ask the member (its channel closed, ...)."""


class RelayTimeout(Exception):
    """The transport gave up waiting for the member's answer."""


class Reply(Protocol):
    """A member's answer as its transport holds it."""

    @property
    def ok(self) -> bool: ...
    @property
    def size(self) -> int: ...


ReplyT = TypeVar("ReplyT", bound=Reply)
ReplyT_co = TypeVar("ReplyT_co", bound=Reply, covariant=True)


@dataclass(slots=True)
class RelayOutcome(Generic[ReplyT]):
    status: RelayStatus
    remark: str | None = None
    reply: ReplyT | None = None  # OK and REFUSED: the member's answer


class ConsumerLink(Protocol[ReplyT_co]):
    """The transport's side: what it sends to a member over its channel."""

    def tell_reset(self, channel: Any, notice: ResetNotice) -> bool:
        """Tell the member the new offsets without waiting; False when its
        channel takes nothing now (nothing queued)."""
        ...

    def takes_requests(self, channel: Any) -> bool:
        """Whether to start a request toward the member now."""
        ...

    async def running_info(self, channel: Any, ask: RunningInfoAsk, timeout: float
                           ) -> ReplyT_co:
        """The member's answer; RelayTimeout or RelayFailed."""
        ...


class ConsumerOffsets(Protocol):
    """ConsumerOffsetManager's part the resets use."""

    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...
    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...


class QueueOffsets(Protocol):
    """The store's part the resets use."""

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int
                                    ) -> int: ...


class Topics(Protocol):
    def get(self, topic: str) -> TopicConfig | None: ...


class Broker2ClientService(Generic[ReplyT]):
    def __init__(self, *, broker_name: str, role: LiveRole, topics: Topics,
                 offsets: ConsumerOffsets, queues: QueueOffsets, consumers: GroupMembers,
                 link: ConsumerLink[ReplyT], log: Any = None) -> None:
        self.broker_name = broker_name
        self.role = role
        self.topics = topics
        self.offsets = offsets
        self.queues = queues
        self.consumers = consumers
        self.link = link
        self.log = log if log is not None else structlog.get_logger("broker.broker2client")
        self.relays = 0  # running-info requests in flight

    # ---- offset resets --------------------------------------------------------------

    def reset_offset(self, req: ResetRequest) -> ResetOutcome:
        """Reset, commit and tell the online members (see the module's doc)."""
        if self.role.is_slave:
            return ResetOutcome(ResetStatus.NOT_ON_SLAVE,
                                "a slave does not reset offsets: ask its master")
        cfg = self.topics.get(req.topic)
        if cfg is None:
            return ResetOutcome(ResetStatus.TOPIC_NOT_EXIST,
                                f"[reset-offset] no topic {shown(req.topic)} on this broker")
        topic, group = req.topic, req.group
        qids = range(cfg.read_queue_nums)
        current = {q: o for q in qids if (o := self.offsets.query_offset(group, topic, q)) >= 0}
        plan = reset_plan(current, {q: self._target(topic, q, req.timestamp) for q in qids},
                          req.force)
        for q, offset in plan.items():
            if offset != current.get(q, -1):
                self.offsets.reset_offset(group, topic, q, offset)
        offsets = {MessageQueue(topic, self.broker_name, q): o for q, o in plan.items()}
        told = self._tell_members(ResetNotice(req, offsets))
        self.log.info("offsets reset by an admin", group=shown(group), topic=shown(topic),
                      timestamp=req.timestamp, force=req.force, consumers_told=told,
                      offsets=plan)
        return ResetOutcome(ResetStatus.OK, offsets=offsets, told=told)

    def _target(self, topic: str, queue_id: int, timestamp: int) -> int:
        if timestamp == SKIP_ALL:
            return self.queues.get_max_offset_in_queue(topic, queue_id)
        return self.queues.get_offset_in_queue_by_time(topic, queue_id, timestamp)

    def _tell_members(self, notice: ResetNotice) -> int:
        group = notice.request.group
        info = self.consumers.groups.get(group)
        told = 0
        for ch in list(info.clients.values()) if info is not None else []:
            if isinstance(ch.conn, SessionChannel):
                # not called back: a gRPC consumer pops from the offsets just committed
                self.log.info("gRPC consumer not told of the offset reset (not supported "
                              "for gRPC clients; its pops start at the new offsets)",
                              group=shown(group), client_id=shown(ch.client_id))
                continue
            if self.link.tell_reset(ch.conn, notice):
                told += 1
            else:
                self.log.warning("consumer not told of the offset reset (not reading)",
                                 group=shown(group), client_id=shown(ch.client_id))
        return told

    # ---- a member's running info -----------------------------------------------------

    async def running_info(self, ask: RunningInfoAsk) -> RelayOutcome[ReplyT]:
        """Ask the member and hand its answer back, bounded (see the module's doc)."""
        info = self.consumers.groups.get(ask.group)
        ch = info.clients.get(ask.client_id) if info is not None else None
        who = f"<{ask.group}> <{ask.client_id}>"
        if ch is None:
            return RelayOutcome(RelayStatus.NOT_ONLINE, f"The Consumer {who} not online")
        if isinstance(ch.conn, SessionChannel):
            return RelayOutcome(RelayStatus.UNSUPPORTED,
                                f"consumer {who} is a gRPC client: consumer running info is "
                                "not supported for gRPC clients")
        if self.relays >= MAX_RELAYS:
            return RelayOutcome(RelayStatus.BUSY,
                                f"{self.relays} running-info requests in flight; try again")
        if not self.link.takes_requests(ch.conn):
            return RelayOutcome(RelayStatus.NOT_READING,
                                f"consumer {who} does not read what it is sent")
        self.relays += 1
        try:
            with trio.move_on_after(RELAY_TIMEOUT_S):  # the send may first wait for room
                reply = await self.link.running_info(ch.conn, ask, RELAY_TIMEOUT_S)
                return self._checked(reply, who)
        except RelayTimeout:
            pass
        except RelayFailed as exc:
            return RelayOutcome(RelayStatus.FAILED, f"invoke consumer {who} failed: {exc}")
        finally:
            self.relays -= 1
        return RelayOutcome(RelayStatus.TIMEOUT,
                            f"consumer {who} did not answer within {RELAY_TIMEOUT_S:.0f} s")

    @staticmethod
    def _checked(reply: ReplyT, who: str) -> RelayOutcome[ReplyT]:
        if not reply.ok:
            return RelayOutcome(RelayStatus.REFUSED, reply=reply)
        if reply.size > MAX_RELAYED_BODY:
            return RelayOutcome(RelayStatus.TOO_LARGE,
                                f"consumer {who} answered {reply.size} bytes, more than "
                                f"{MAX_RELAYED_BODY} are not relayed")
        return RelayOutcome(RelayStatus.OK, reply=reply)


__all__ = [
    "MAX_RELAYED_BODY", "MAX_RELAYS", "RELAY_TIMEOUT_S", "SKIP_ALL", "Broker2ClientService",
    "ConsumerLink", "RelayFailed", "RelayOutcome", "RelayStatus", "RelayTimeout", "Reply",
    "ResetNotice", "ResetOutcome", "ResetRequest", "ResetStatus", "RunningInfoAsk",
    "new_offset", "reset_plan",
]
