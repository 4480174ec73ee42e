"""SendService in process: a fake store, the real topic and group tables, no
controller, no sockets; and the remoting adapter's table from its statuses to
the codes RocketMQ's clients read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig, BrokerRole
from broker.message_rewrite import DELAY, PGROUP, REAL_TOPIC, RETRY_TOPIC, TRAN_MSG
from broker.role import RoleState
from broker.send_processor import PUT_STATUS_TO_CODE, SEND_STATUS_TO_CODE
from broker.service.send import SendOutcome, SendService, SendStatus
from broker.store import MessageExtBrokerInner, PutMessageResult, PutMessageStatus
from broker.store.commit_log import SCHEDULE_TOPIC
from broker.store.offset_waiters import OffsetWaiters, Waiter
from broker.store.status import AppendMessageResult, AppendMessageStatus
from broker.subscription_group_manager import SubscriptionGroupManager
from broker.topic_config_manager import TopicConfigManager
from protocol.batch import encode_batch
from protocol.codes import ResponseCode
from protocol.errors import RemoteProtocolError
from protocol.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from protocol.message import MessageExt, properties_to_string, string_to_properties
from protocol.record import TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE
from protocol.route import PERM_INHERIT, PERM_READ, PERM_RW, TopicConfig
from protocol.subscription_group import SubscriptionGroupConfig

HOST = "10.0.0.7:50000"
STORED_AT = 4096  # the fake store's first write offset


class FakeStore:
    """Answers every put with ``status`` (``detail`` its reason); a stored
    put gets the next offsets. ``fast`` False: the batch ways decline (None),
    as the real store does for anything out of the ordinary."""

    def __init__(self) -> None:
        self.status = PutMessageStatus.PUT_OK
        self.detail = ""
        self.disk_full = False
        self.fast = True
        self.puts: list[tuple[str, str, int, Any]] = []  # (way, topic, queue, what)
        self.offset = STORED_AT
        self.dispatched = 0
        self.messages: dict[int, MessageExt] = {}

    def _put(self, way: str, topic: str, queue_id: int, what: Any, n: int) -> PutMessageResult:
        if self.status not in (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                               PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                               PutMessageStatus.SLAVE_NOT_AVAILABLE):
            return PutMessageResult(self.status, None, self.detail)
        self.puts.append((way, topic, queue_id, what))
        ar = AppendMessageResult(AppendMessageStatus.PUT_OK, self.offset, 100 * n,
                                 f"MSGID{self.offset}", 0, len(self.puts) - 1, n)
        self.offset += 100 * n
        return PutMessageResult(self.status, ar)

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        return self._put("message", msg.topic, msg.queue_id, msg, 1)

    def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult:
        return self._put("messages", msgs[0].topic, msgs[0].queue_id, msgs, len(msgs))

    def put_batch(self, topic: str, queue_id: int, items: list[tuple[int, bytes, str]], *,
                  sys_flag: int, born_timestamp: int, born_host: str, reconsume_times: int,
                  defer: bool = False) -> PutMessageResult | None:
        assert defer and born_host == HOST
        return self._put("batch", topic, queue_id, items, len(items)) if self.fast else None

    def put_batch_body(self, topic: str, queue_id: int, data: bytes, *, sys_flag: int,
                       born_timestamp: int, born_host: str, reconsume_times: int,
                       defer: bool = False) -> PutMessageResult | None:
        assert defer and born_host == HOST
        return self._put("body", topic, queue_id, data, 2) if self.fast else None

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        return self.messages.get(commit_log_offset)

    def dispatch_deferred(self) -> None:
        self.dispatched += 1


class FakeHalf:
    def __init__(self) -> None:
        self.busy: str | None = None
        self.prepared: list[tuple[MessageExtBrokerInner, str]] = []
        self.store: FakeStore | None = None

    def pending_refusal(self, group: str) -> str | None:
        return self.busy

    def prepare(self, inner: MessageExtBrokerInner, props: dict[str, str],
                group: str) -> PutMessageResult:
        self.prepared.append((inner, group))
        assert self.store is not None
        return self.store.put_message(inner)


class Delays:
    max_level = 18


class Harness:
    def __init__(self, tmp: Path, sync_flush: bool = False, **config: Any) -> None:
        self.config = BrokerConfig(store_path_root_dir=str(tmp), broker_name="b1", **config)
        self.store = FakeStore()
        self.topics = TopicConfigManager(self.config)
        self.topics.update(TopicConfig("T", 4, 4, PERM_RW), durable=False)
        self.topics.update(TopicConfig("TBW102", 8, 8, PERM_RW | PERM_INHERIT), durable=False)
        self.groups = SubscriptionGroupManager(self.config)
        self.groups.update(SubscriptionGroupConfig("G", retry_max_times=3))
        self.half = FakeHalf()
        self.half.store = self.store
        self.registered = 0
        self.counted: list[tuple[str, int, int]] = []
        self.latencies: list[float] = []
        self.flushes = OffsetWaiters(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        self.slaves = OffsetWaiters(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self.role = RoleState(self.config.broker_role, 1 if self.config.is_slave else 0)
        self.service = SendService(
            self.config, self.role, self.store, self.topics, self.groups, self.half, Delays(),
            on_topics_changed=self._registered,
            record_put=lambda t, n, b: self.counted.append((t, n, b)),
            observe_put=self.latencies.append,
            wait_flush=self._wait_flush if sync_flush else None,
            wait_slave=lambda end: self.slaves.add(end, 10.0))

    def _registered(self) -> None:
        self.registered += 1

    def _wait_flush(self, end: int) -> Waiter:
        return self.flushes.add(end, 10.0)

    def send(self, topic: str = "T", body: bytes | None = b"hello", **header: Any) -> SendOutcome:
        header.setdefault("queue_id", 1)
        return self.service.send(SendMessageRequestHeader("PG", topic, **header), body, HOST)


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def refused(out: SendOutcome, status: SendStatus) -> str:
    """The remark of a refusal that stored nothing."""
    assert (out.status, out.msg_id, out.put) == (status, None, False), out
    assert out.remark is not None
    return out.remark


# ---- single sends ----------------------------------------------------------------------


def test_a_plain_send_is_stored_as_a_batch_of_one(h: Harness) -> None:
    props = properties_to_string({"TAGS": "a"})
    out = h.send(properties=props, flag=3)
    assert out == SendOutcome(SendStatus.OK, None, f"MSGID{STORED_AT}", 1, 0, None, None, True)
    assert h.store.puts == [("batch", "T", 1, [(3, b"hello", props)])]
    assert h.counted == [("T", 1, 100)] and len(h.latencies) == 1


def test_the_queue_is_drawn_when_the_producer_leaves_it(h: Harness) -> None:
    queues = {h.send(queue_id=-1).queue_id for _ in range(60)}
    assert queues <= {0, 1, 2, 3} and len(queues) > 1


def test_a_missing_topic_is_created_from_the_default_topic(h: Harness) -> None:
    out = h.send("NEW", default_topic_queue_nums=2, queue_id=0)
    assert out.status is SendStatus.OK
    cfg = h.topics.get("NEW")
    assert cfg is not None and cfg.write_queue_nums == 2 and not cfg.perm & PERM_INHERIT
    assert h.registered == 1


def test_a_missing_topic_without_auto_creation_is_refused(tmp_path: Path) -> None:
    h = Harness(tmp_path, auto_create_topic_enable=False)
    remark = refused(h.send("NEW"), SendStatus.TOPIC_NOT_EXIST)
    assert remark == "topic[NEW] not exist, apply first please!"
    assert h.topics.get("NEW") is None and h.registered == 0


def test_a_default_topic_that_does_not_inherit_creates_nothing(h: Harness) -> None:
    refused(h.send("NEW", default_topic="T"), SendStatus.TOPIC_NOT_EXIST)


def test_a_topic_not_writable_refuses(h: Harness) -> None:
    h.topics.update(TopicConfig("T", 4, 4, PERM_READ), durable=False)
    assert refused(h.send(), SendStatus.NO_PERMISSION) == \
        "the topic[T] sending message is forbidden"
    assert h.store.puts == []


def test_a_broker_not_writable_refuses(h: Harness) -> None:
    h.config.broker_permission = PERM_READ
    assert refused(h.send(), SendStatus.NO_PERMISSION) == \
        "the broker[b1] sending message is forbidden"


def test_a_slave_refuses_before_creating_anything(tmp_path: Path) -> None:
    h = Harness(tmp_path, broker_role=BrokerRole.SLAVE)
    assert "is a slave" in refused(h.send("NEW"), SendStatus.NO_PERMISSION)
    assert h.topics.get("NEW") is None
    assert "is a slave" in refused(h.service.send_back(ConsumerSendMsgBackRequestHeader(
        0, "G", 0)), SendStatus.NO_PERMISSION)


def test_the_live_role_decides_not_the_config(tmp_path: Path) -> None:
    h = Harness(tmp_path, sync_flush=False)
    assert h.send().waiters is None
    new = h.role.next(BrokerRole.SYNC_MASTER, 0)
    assert new is not None
    h.role.apply(new)  # now each send waits for a slave
    out = h.send()
    assert out.waiters is not None and len(out.waiters) == 1 and len(h.slaves) == 1
    new = h.role.next(BrokerRole.SLAVE, 1)
    assert new is not None
    h.role.apply(new)
    assert "is a slave" in refused(h.send(), SendStatus.NO_PERMISSION)
    assert h.config.broker_role is BrokerRole.ASYNC_MASTER  # the config never moved


def test_bad_topics_queues_and_bodies_are_illegal(h: Harness) -> None:
    refused(h.send("bad topic!"), SendStatus.MESSAGE_ILLEGAL)
    assert "queueId[4] is illegal" in refused(h.send(queue_id=4), SendStatus.SYSTEM_ERROR)
    assert refused(h.send(body=b""), SendStatus.MESSAGE_ILLEGAL) == "the message body is empty"
    refused(h.send(body=None), SendStatus.MESSAGE_ILLEGAL)
    h.config.max_message_size = 4
    assert "exceeds maxMessageSize 4" in refused(h.send(), SendStatus.MESSAGE_ILLEGAL)
    assert h.store.puts == []


def test_a_delayed_send_goes_to_the_schedule_topic(h: Harness) -> None:
    out = h.send(properties=properties_to_string({DELAY: "3"}))
    assert out.status is SendStatus.OK and out.queue_id == 1
    [(way, topic, queue_id, inner)] = h.store.puts
    assert (way, topic, queue_id) == ("message", SCHEDULE_TOPIC, 2)  # level 3: queue 2
    assert string_to_properties(inner.properties_string)[REAL_TOPIC] == "T"


def test_a_bad_delay_level_is_illegal(h: Harness) -> None:
    refused(h.send(properties=properties_to_string({DELAY: "x1"})), SendStatus.MESSAGE_ILLEGAL)


# ---- half messages ---------------------------------------------------------------------


def test_a_prepared_message_is_stored_half(h: Harness) -> None:
    props = properties_to_string({TRAN_MSG: "true", PGROUP: "PG", "UNIQ_KEY": "U1"})
    out = h.send(properties=props, sys_flag=TRANSACTION_PREPARED_TYPE)
    assert out.status is SendStatus.OK and out.transaction_id == "U1"
    [(inner, group)] = h.half.prepared
    assert group == "PG" and inner.topic == "T"  # the half service rewrites it


def test_half_messages_refused_when_busy_rejected_or_delayed(h: Harness) -> None:
    props = {TRAN_MSG: "true", PGROUP: "PG"}
    h.half.busy = "too many"
    assert refused(h.send(properties=properties_to_string(props)), SendStatus.BUSY) == "too many"
    h.config.reject_transaction_message = True
    assert "transaction message is forbidden" in refused(
        h.send(properties=properties_to_string(props)), SendStatus.NO_PERMISSION)
    h.config.reject_transaction_message = False
    assert refused(h.send(properties=properties_to_string({**props, DELAY: "2"})),
                   SendStatus.MESSAGE_ILLEGAL) == "a delayed message cannot be transactional"
    assert refused(h.send(sys_flag=TRANSACTION_COMMIT_TYPE), SendStatus.MESSAGE_ILLEGAL) == \
        "a commit or rollback sysFlag is the broker's to set"
    assert h.half.prepared == [] and h.store.puts == []


# ---- retry topics and dead letters -----------------------------------------------------


def test_a_retry_send_under_the_limit_stays_in_the_retry_topic(h: Harness) -> None:
    h.topics.update(TopicConfig("%RETRY%G", 1, 1, PERM_RW), durable=False)
    out = h.send("%RETRY%G", queue_id=0, reconsume_times=2)
    assert out.status is SendStatus.OK and h.store.puts[0][1] == "%RETRY%G"


def test_a_retry_send_past_the_limit_is_a_dead_letter(h: Harness) -> None:
    h.topics.update(TopicConfig("%RETRY%G", 1, 1, PERM_RW), durable=False)
    props = properties_to_string({DELAY: "3", "KEYS": "k"})
    out = h.send("%RETRY%G", queue_id=0, reconsume_times=3, properties=props)
    assert (out.status, out.queue_id) == (SendStatus.OK, 0)
    [(way, topic, queue_id, items)] = h.store.puts
    assert (way, topic, queue_id) == ("batch", "%DLQ%G", 0)  # the delay dropped
    assert items == [(0, b"hello", properties_to_string({"KEYS": "k"}))]
    assert h.registered == 1  # the dead-letter topic is new
    # the header's maxReconsumeTimes decides over the group's
    h.send("%RETRY%G", queue_id=0, reconsume_times=3, max_reconsume_times=5)
    assert h.store.puts[1][1] == "%RETRY%G"


def test_a_retry_send_of_an_unknown_group_is_refused(tmp_path: Path) -> None:
    h = Harness(tmp_path, auto_create_subscription_group=False)
    h.topics.update(TopicConfig("%RETRY%X", 1, 1, PERM_RW), durable=False)
    assert refused(h.send("%RETRY%X", queue_id=0), SendStatus.GROUP_NOT_EXIST) == \
        "subscription group 'X' does not exist"


def given_back(h: Harness, reconsume_times: int = 0, topic: str = "T") -> MessageExt:
    msg = MessageExt(topic, b"body", {"KEYS": "k"}, queue_id=1, commit_log_offset=77,
                     reconsume_times=reconsume_times)
    h.store.messages[77] = msg
    return msg


def test_send_back_goes_to_the_retry_topic_with_a_delay(h: Harness) -> None:
    given_back(h, reconsume_times=1)
    out = h.service.send_back(ConsumerSendMsgBackRequestHeader(77, "G", 0, "ORIG"))
    assert out.status is SendStatus.OK
    [(way, topic, _, inner)] = h.store.puts
    assert (way, topic) == ("message", SCHEDULE_TOPIC)
    props = string_to_properties(inner.properties_string)
    assert props[REAL_TOPIC] == "%RETRY%G" and props[DELAY] == "4"
    assert props[RETRY_TOPIC] == "T" and inner.reconsume_times == 2
    assert h.topics.get("%RETRY%G") is not None


def test_send_back_past_the_limit_or_asked_goes_to_the_dead_letters(h: Harness) -> None:
    given_back(h, reconsume_times=3)
    assert h.service.send_back(ConsumerSendMsgBackRequestHeader(77, "G", 0)).queue_id == 0
    given_back(h, reconsume_times=0)
    h.service.send_back(ConsumerSendMsgBackRequestHeader(77, "G", -1))
    assert [(p[0], p[1], p[2]) for p in h.store.puts] == [("message", "%DLQ%G", 0)] * 2


def test_send_back_refusals(tmp_path: Path) -> None:
    h = Harness(tmp_path, auto_create_subscription_group=False)
    assert refused(h.service.send_back(ConsumerSendMsgBackRequestHeader(5, "G", 0)),
                   SendStatus.SYSTEM_ERROR) == "look message by offset failed, 5"
    given_back(h)
    asked: list[str] = []

    def no(msg: MessageExt) -> str:
        asked.append(msg.topic)
        return "no SUB on T"

    assert refused(h.service.send_back(ConsumerSendMsgBackRequestHeader(77, "G", 0), no),
                   SendStatus.NO_PERMISSION) == "no SUB on T"
    assert refused(h.service.send_back(ConsumerSendMsgBackRequestHeader(77, "X", 0)),
                   SendStatus.GROUP_NOT_EXIST) == "subscription group 'X' does not exist"
    given_back(h, topic="%RETRY%G")  # the group's own retry topic: not asked
    assert h.service.send_back(ConsumerSendMsgBackRequestHeader(77, "G", 0), no).status \
        is SendStatus.OK
    assert asked == ["T"]


# ---- batches ---------------------------------------------------------------------------


def test_a_batch_goes_from_its_body_into_the_log(h: Harness) -> None:
    body = encode_batch([(0, b"a", ""), (0, b"b", "")])
    out = h.send(body=body, batch=True)
    assert out.status is SendStatus.OK
    assert h.store.puts == [("body", "T", 1, body)] and h.counted == [("T", 2, 200)]


def test_a_batch_the_compiled_loops_decline_is_decoded_and_checked(h: Harness) -> None:
    h.store.fast = False
    body = encode_batch([(0, b"a", ""), (0, b"", "")])
    refused(h.send(body=body, batch=True), SendStatus.MESSAGE_ILLEGAL)
    prepared = encode_batch([(0, b"a", properties_to_string({TRAN_MSG: "true"}))])
    assert "cannot be transactional" in refused(h.send(body=prepared, batch=True),
                                                SendStatus.MESSAGE_ILLEGAL)
    ok = encode_batch([(0, b"a", ""), (0, b"b", "")])
    assert h.send(body=ok, batch=True).status is SendStatus.OK
    [(way, topic, _, msgs)] = h.store.puts
    assert (way, topic) == ("messages", "T") and [m.body for m in msgs] == [b"a", b"b"]


def test_batch_refusals(h: Harness) -> None:
    assert "batch request does not support retry group" in refused(
        h.send("%RETRY%G", body=b"x", batch=True, queue_id=0), SendStatus.MESSAGE_ILLEGAL)
    refused(h.send(body=b"x", batch=True, sys_flag=TRANSACTION_PREPARED_TYPE),
            SendStatus.MESSAGE_ILLEGAL)
    with pytest.raises(RemoteProtocolError):
        h.send(body=b"", batch=True)


def test_a_batch_with_a_timer_is_refused_not_put_as_due_now(h: Harness) -> None:
    timer = properties_to_string({"TIMER_DELIVER_MS": "99999999999999"})
    body = encode_batch([(0, b"a", ""), (0, b"b", timer)])
    assert "timer messages cannot be batched" in refused(h.send(body=body, batch=True),
                                                         SendStatus.MESSAGE_ILLEGAL)
    # the probe's bytes in a body (not a property) decide nothing
    ok = encode_batch([(0, b"TIMER_DELIVER_MS", ""), (0, b"b", "")])
    assert h.send(body=ok, batch=True).status is SendStatus.OK
    assert [way for way, *_ in h.store.puts] == ["body"]


# ---- what the store says ---------------------------------------------------------------


@pytest.mark.parametrize("status", [PutMessageStatus.FLUSH_DISK_TIMEOUT,
                                    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                                    PutMessageStatus.SLAVE_NOT_AVAILABLE])
def test_stored_but_late_statuses_keep_the_result(h: Harness, status: PutMessageStatus) -> None:
    h.store.status = status
    out = h.send()
    assert out.status.name == status.name and out.msg_id == f"MSGID{STORED_AT}"
    assert out.waiters is None and out.put and out.remark is not None
    assert h.counted == []  # counted only when stored in time


def test_a_full_disk_says_so(h: Harness) -> None:
    h.store.status, h.store.detail = PutMessageStatus.DISK_FULL, "no room"
    out = h.send()
    assert (out.status, out.msg_id, out.put) == (SendStatus.SERVICE_NOT_AVAILABLE, None, True)
    assert out.remark is not None and out.remark.endswith(": no room")
    h.store.disk_full = True
    assert h.send().remark == (f"the broker[b1] disk is full (over "
                               f"{h.config.disk_space_warning_level_ratio}% used): "
                               "writes refused, reads served")


def test_sync_flush_and_sync_master_answers_wait(tmp_path: Path) -> None:
    h = Harness(tmp_path, sync_flush=True, broker_role=BrokerRole.SYNC_MASTER)
    out = h.send()
    assert out.status is SendStatus.OK and out.waiters is not None
    flush, slave = out.waiters
    assert flush.next_offset == slave.next_offset == STORED_AT + 100
    assert len(h.flushes) == len(h.slaves) == 1
    h.flushes.advance(STORED_AT + 100)
    [late] = h.slaves.expire(11.0)
    assert flush.status is PutMessageStatus.PUT_OK
    assert late.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    # a refusal waits for nothing
    assert h.send("bad topic!").waiters is None and len(h.flushes) == 0


def test_async_master_answers_at_once(h: Harness) -> None:
    assert h.send().waiters is None and len(h.slaves) == 0


# ---- the remoting adapter's table ------------------------------------------------------


def test_every_status_has_its_rocketmq_code() -> None:
    assert set(SEND_STATUS_TO_CODE) == set(SendStatus)
    assert {p: c for p, (c, _) in PUT_STATUS_TO_CODE.items()} == {
        PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
        PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
        PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.SYSTEM_ERROR,
        PutMessageStatus.CREATE_MAPEDFILE_FAILED: ResponseCode.SYSTEM_ERROR,
        PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
        PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
        PutMessageStatus.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_BUSY,
        PutMessageStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
        PutMessageStatus.DISK_FULL: ResponseCode.SERVICE_NOT_AVAILABLE,
        PutMessageStatus.DISPATCH_BEHIND: ResponseCode.SERVICE_NOT_AVAILABLE,
    }
