"""ClientService: producers and consumers known to the broker, in domain
terms (what HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
CHECK_CLIENT_CONFIG, LOCK_BATCH_MQ and UNLOCK_BATCH_MQ do, without the
remoting: broker/client_manage_processor.py is their adapter), and who is
told that a consumer group's members changed.

A client is known by its channel: an opaque handle its transport gives (a
remoting connection; a gRPC session next), kept in the producer and consumer
tables beside the client id and compared by identity. The service asks a
channel one thing, whether it is closed (``ClientChannel``); the type
parameter lets a transport's own ``Notifier`` take its own channel type.

Rules:

- A heart-beat registers every producer group it names, then each consumer
  group: one that does not exist, or that broadcasts where the group does
  not allow it, is refused (the others are registered all the same, and the
  answer is ``REFUSED`` naming each refusal); a clustering group's retry
  topic is created on its first heart-beat (with the group's
  ``retryQueueNums``, at least one queue), so that it has a route before the
  group's first failure.
- A consumer group whose membership changes (a new member, an unregister, a
  closed channel, a member silent past ``channelExpiredTimeout``) is
  notified: each member whose channel is open is told through the
  transport's ``Notifier``; a notice the transport could not queue (a member
  that reads nothing, owed more than its write high-water mark) is dropped
  and counted (``notifications_dropped``): that member rebalances on its own
  timer.
- CHECK_CLIENT_CONFIG: a tag subscription is always served; SQL92 only with
  ``enablePropertyFilter`` and only an expression that compiles.
- Queue locks (ordered consumption): the caller needs SUB on the group and on
  every topic of the queues it names (``lock_needs``); the transport decides
  (an ``Authorize`` callback) since it alone knows who asks. A lock not
  renewed for 60 s is free (broker/client_manager.py).

Times are passed in (seconds on any monotonic clock); nothing here awaits.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import structlog

from acl.plain import Need, Perm, group_resource
from protocol.client_data import HeartbeatData
from protocol.filter_sql import SQL92, SqlParseError, compile_sql, is_tag_type, unsupported_remark
from protocol.names import InvalidNameError, retry_topic, shown
from protocol.route import PERM_RW, TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig

# (topic, broker name, queue id): a queue as lock requests name it
Queue = tuple[str, str, int]


class ClientStatus(enum.Enum):
    """What a client request came to; the transport maps each to its code."""

    OK = "OK"
    REFUSED = "REFUSED"  # a heart-beat's consumer group missing or not allowed to broadcast
    NO_PERMISSION = "NO_PERMISSION"  # ACL: no SUB on a lock request's group or topics
    NO_CONSUMER = "NO_CONSUMER"  # the group has no member online
    FILTER_UNSUPPORTED = "FILTER_UNSUPPORTED"  # an expression type not run here
    FILTER_PARSE_FAILED = "FILTER_PARSE_FAILED"  # SQL92 that does not compile


@dataclass(slots=True)
class ClientOutcome:
    """An answer: its status, a remark saying why when it is not OK, the
    group's client ids (``consumer_ids``) or the queues now held (``lock_batch``)."""

    status: ClientStatus
    remark: str | None = None
    client_ids: list[str] = field(default_factory=list)
    locked: list[Queue] = field(default_factory=list)



@dataclass(slots=True)
class Unregister:
    """A client leaving: its producer group and/or consumer group (None: none)."""

    client_id: str
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(slots=True)
class QueueLockRequest:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: ``client_id`` of ``group`` on ``queues``."""

    group: str
    client_id: str
    queues: list[Queue] = field(default_factory=list)


class ClientChannel(Protocol):
    """What the service asks of a client's channel (the transport's handle)."""

    @property
    def closed(self) -> bool: ...


ChannelT = TypeVar("ChannelT", bound=ClientChannel)
ChannelT_contra = TypeVar("ChannelT_contra", bound=ClientChannel, contravariant=True)


class Notifier(Protocol[ChannelT_contra]):
    """The transport's side of a group change notice."""

    def consumer_ids_changed(self, channel: ChannelT_contra, group: str) -> bool:
        """Tell the member on ``channel`` that ``group``'s members changed
        (without waiting for it); False when the notice could not be queued."""
        ...


class ClientTable(Protocol[ChannelT]):
    """A group -> members table (broker/client_manager.py ClientGroups)."""

    def register(self, group: str, client_id: str, conn: ChannelT, now: float,
                 info: dict[str, Any] | None = None) -> bool: ...
    def unregister(self, group: str, client_id: str) -> bool: ...
    def connection_closed(self, conn: ChannelT) -> set[str]: ...
    def scan_not_active(self, now: float, expired_after: float) -> set[str]: ...
    def client_ids(self, group: str) -> list[str]: ...
    def connections(self, group: str) -> list[ChannelT]: ...


class SubscriptionGroups(Protocol):
    def find(self, group: str) -> SubscriptionGroupConfig | None: ...


class RetryTopics(Protocol):
    """The topic table's part the service uses: a group's retry topic."""

    def get(self, topic: str) -> TopicConfig | None: ...
    def create_topic_in_send_back(self, topic: str, queue_nums: int, perm: int
                                  ) -> TopicConfig: ...


class QueueLocks(Protocol):
    """broker/client_manager.py RebalanceLockManager."""

    def try_lock_batch(self, group: str, mqs: list[Queue], client_id: str,
                       now: float) -> list[Queue]: ...
    def unlock_batch(self, group: str, mqs: list[Queue], client_id: str) -> None: ...


class FilterSettings(Protocol):
    """Read on each request: an admin may change it while the broker runs."""

    @property
    def enable_property_filter(self) -> bool: ...


# The transport's answer to "may the caller hold these?": None, or why not.
Authorize = Callable[[Sequence[Need]], str | None]


def lock_needs(req: QueueLockRequest) -> list[Need]:
    """What locking or freeing ``req``'s queues takes: SUB on the group and
    on each topic named (once each), so that one group cannot lock or free
    another's ordered queues."""
    needs = [Need(group_resource(req.group), Perm.SUB)]
    needs += [Need(t, Perm.SUB) for t in dict.fromkeys(t for t, _, _ in req.queues)]
    return needs


class ClientService(Generic[ChannelT]):
    """Heart-beats, client tables, group change notices and queue locks."""

    def __init__(self, *, producers: ClientTable[ChannelT], consumers: ClientTable[ChannelT],
                 groups: SubscriptionGroups, topics: RetryTopics, locks: QueueLocks,
                 settings: FilterSettings, notifier: Notifier[ChannelT],
                 on_topics_changed: Callable[[], None] = lambda: None,
                 log: Any = None) -> None:
        self.producers = producers
        self.consumers = consumers
        self.groups = groups
        self.topics = topics
        self.locks = locks
        self.settings = settings
        self.notifier = notifier
        self.on_topics_changed = on_topics_changed
        self.log = log if log is not None else structlog.get_logger("broker.clients")
        self.notifications_dropped = 0  # notices to members that read nothing

    # ---- heart-beats and membership ---------------------------------------------

    def heart_beat(self, channel: ChannelT, hb: HeartbeatData, now: float) -> ClientOutcome:
        """Register the heart-beat's producer groups, then its consumer groups
        (each checked; see the module's doc). ``hb`` is whole and valid: the
        transport decoded all of it before anything is registered."""
        cid = hb.client_id
        for group in hb.producer_groups:
            self.producers.register(group, cid, channel, now)
        refused: list[str] = []
        for d in hb.consumers:
            group = d.group_name
            problem = self._consumer_refusal(group, d.message_model)
            if problem is not None:
                refused.append(problem)
                continue
            if self.consumers.register(group, cid, channel, now, d.to_dict()):
                self.notify_consumer_ids_changed(group)
        if refused:
            return ClientOutcome(ClientStatus.REFUSED, "; ".join(refused))
        return ClientOutcome(ClientStatus.OK)

    def _consumer_refusal(self, group: str, message_model: str) -> str | None:
        """Why ``group`` may not join (None: it may); a clustering group's
        retry topic exists once it may."""
        sub_cfg = self.groups.find(group)
        if sub_cfg is None:
            return f"subscription group {group} does not exist"
        if message_model == "BROADCASTING" and not sub_cfg.consume_broadcast_enable:
            return f"subscription group {group} does not allow broadcasting"
        if message_model == "CLUSTERING":
            try:
                retry = retry_topic(group)
            except InvalidNameError as exc:
                return str(exc)
            if self.topics.get(retry) is None:
                self.topics.create_topic_in_send_back(
                    retry, max(1, sub_cfg.retry_queue_nums), PERM_RW)
                self.on_topics_changed()
        return None

    def unregister(self, req: Unregister) -> ClientOutcome:
        """The client leaves its groups (one it was not in: nothing happens)."""
        if req.producer_group is not None:
            self.producers.unregister(req.producer_group, req.client_id)
        if req.consumer_group is not None and self.consumers.unregister(
                req.consumer_group, req.client_id):
            self.notify_consumer_ids_changed(req.consumer_group)
        return ClientOutcome(ClientStatus.OK)

    def channel_closed(self, channel: ChannelT) -> None:
        """The transport lost ``channel``: its clients leave every group."""
        self.producers.connection_closed(channel)
        for group in self.consumers.connection_closed(channel):
            self.notify_consumer_ids_changed(group)

    def expire(self, now: float, expired_after: float) -> set[str]:
        """Drop producers and consumers silent for more than ``expired_after``
        seconds; the consumer groups that changed are notified (a failure to
        notify one is logged and the others are still told). Returns them."""
        self.producers.scan_not_active(now, expired_after)
        changed = self.consumers.scan_not_active(now, expired_after)
        for group in changed:
            try:
                self.notify_consumer_ids_changed(group)
            except Exception as exc:
                self.log.warning("notifying a group's consumers failed", group=shown(group),
                                 error=f"{type(exc).__name__}: {shown(str(exc))}")
        return changed

    def consumer_ids(self, group: str) -> ClientOutcome:
        """The client ids of ``group``'s members (sorted); NO_CONSUMER with none."""
        ids = self.consumers.client_ids(group)
        if not ids:
            return ClientOutcome(ClientStatus.NO_CONSUMER, f"no consumer of group {group} online")
        return ClientOutcome(ClientStatus.OK, client_ids=ids)

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Tell every member of ``group`` whose channel is open to rebalance;
        a notice the transport could not queue is dropped and counted."""
        notifier = self.notifier
        for channel in self.consumers.connections(group):
            if not channel.closed and not notifier.consumer_ids_changed(channel, group):
                self.notifications_dropped += 1

    # ---- CHECK_CLIENT_CONFIG ----------------------------------------------------

    def check_filter(self, expression_type: str, expression: str) -> ClientOutcome:
        """Whether the broker filters by this subscription (a consumer asks
        before it starts): tags always; SQL92 with ``enablePropertyFilter``,
        when it compiles (the remark says where it is wrong)."""
        if is_tag_type(expression_type):
            return ClientOutcome(ClientStatus.OK)
        if expression_type != SQL92 or not self.settings.enable_property_filter:
            return ClientOutcome(ClientStatus.FILTER_UNSUPPORTED,
                                 unsupported_remark(expression_type))
        try:
            compile_sql(expression)
        except SqlParseError as exc:
            return ClientOutcome(ClientStatus.FILTER_PARSE_FAILED, str(exc))
        return ClientOutcome(ClientStatus.OK)

    # ---- queue locks --------------------------------------------------------------

    def lock_batch(self, req: QueueLockRequest, now: float,
                   authorize: Authorize | None = None) -> ClientOutcome:
        """Lock (or renew) what is free or already the client's; ``locked``
        lists the queues it holds now. ``authorize`` None: no access control."""
        refused = None if authorize is None else authorize(lock_needs(req))
        if refused is not None:
            return ClientOutcome(ClientStatus.NO_PERMISSION, refused)
        held = self.locks.try_lock_batch(req.group, req.queues, req.client_id, now)
        return ClientOutcome(ClientStatus.OK, locked=held)

    def unlock_batch(self, req: QueueLockRequest,
                     authorize: Authorize | None = None) -> ClientOutcome:
        """Free the queues the client holds (others' locks are left alone)."""
        refused = None if authorize is None else authorize(lock_needs(req))
        if refused is not None:
            return ClientOutcome(ClientStatus.NO_PERMISSION, refused)
        self.locks.unlock_batch(req.group, req.queues, req.client_id)
        return ClientOutcome(ClientStatus.OK)
