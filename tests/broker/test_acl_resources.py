"""Issue 48: every request code names its resource.

The table (acl/resources.py) against the handlers the broker and the name
server register, plain.ADMIN_CODES, plain.required_resources and the docs; then
the handlers that find their resources beyond the header, through an ACL-guarded
broker (BrokerController with aclEnable=true, handlers called without sockets):
VIEW_MESSAGE_BY_ID and QUERY_MESSAGE (row 3), CONSUMER_SEND_MSG_BACK (row 4),
LOCK/UNLOCK_BATCH_MQ (row 5), END_TRANSACTION (row 6), HEART_BEAT's producer
groups and the transaction checks (row 7), refusal remarks (row 17).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acl.plain import (
    ADMIN_CODES,
    OTHER_TOPICS_HOLDERS,
    SIGNATURE_REFUSED,
    Need,
    group_resource,
    parse_plain_acl,
    required_resources,
)
from acl.resources import BROKER_RULES, NAMESRV_RULES, Access, render_markdown
from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.message_rewrite import PGROUP, TRAN_MSG, EndState, build_inner
from broker.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC
from broker.transaction_book import Verdict
from broker.transaction_service import Asked, CheckRequest, PassReport
from controller.acl import CONTROLLER_PERMISSIONS
from namesrv.acl import NAMESRV_ADMIN_CODES
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from protocol.acl import sign_fields
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import CheckTransactionStateRequestHeader
from protocol.record import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from protocol.route import TopicConfig
from protocol.trio.connection import HandlerTable
from tests.broker.fakes import FakeConn
from tests.broker.store.helpers import inner

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security" / "acl-resources.md"


def _codes(table: HandlerTable) -> set[int]:
    return set(table._sync) | set(table._async)


# ---------------------------------------------------------------- the table


def test_every_broker_code_has_a_row(tmp_path: Path) -> None:
    for acl in (False, True):  # the ACL admin handlers are registered either way
        c = BrokerController(BrokerConfig(store_path_root_dir=str(tmp_path / str(acl)),
                                          listen_port=0, acl_enable=acl))
        served = _codes(c.server.handlers)
        missing = sorted(RequestCode(x).name for x in served - set(BROKER_RULES))
        assert not missing, f"request codes with no row in acl/resources.py: {missing}"
        assert set(BROKER_RULES) == served, "rows for codes the broker does not serve"


def test_every_namesrv_code_has_a_row(tmp_path: Path) -> None:
    config = NamesrvConfig(listen_port=0)  # with the controller inside (its codes too)
    config.update({"enableControllerInNamesrv": "true", "controllerStorePath": str(tmp_path)})
    served = _codes(NamesrvController(config).server.handlers)
    missing = sorted(RequestCode(x).name for x in served - set(NAMESRV_RULES))
    assert not missing, f"request codes with no row in acl/resources.py: {missing}"
    assert set(NAMESRV_RULES) == served


def test_admin_rows_are_the_admin_codes() -> None:
    for code, rule in BROKER_RULES.items():
        assert (rule.access is Access.ADMIN) == (code in ADMIN_CODES), RequestCode(code).name
    for code, rule in NAMESRV_RULES.items():
        controller_need = CONTROLLER_PERMISSIONS.get(code)
        admin = code in NAMESRV_ADMIN_CODES or code in ADMIN_CODES or (
            controller_need is not None and controller_need.admin)
        assert (rule.access is Access.ADMIN) == admin, RequestCode(code).name


# every header field a request may name a resource in
ALL_FIELDS = {"topic": "SomeTopic", "b": "SomeTopic", "group": "SomeGroup",
              "consumerGroup": "SomeGroup", "producerGroup": "SomeGroup"}


@pytest.mark.parametrize("code", sorted(BROKER_RULES | NAMESRV_RULES))
def test_header_rows_are_what_the_guard_checks(code: int) -> None:
    rule = BROKER_RULES.get(code) or NAMESRV_RULES[code]
    if code == RequestCode.HEART_BEAT:  # its resources are in the body (test_acl_plain)
        assert not rule.header
        return
    if not rule.header:
        assert required_resources(code, ALL_FIELDS, None) == [], RequestCode(code).name
        assert rule.access is not Access.RESOURCES or rule.handler, RequestCode(code).name
        return
    fields = {n.field: f"R{i}name" for i, n in enumerate(rule.header)}
    expected = {Need(group_resource(fields[n.field]) if n.kind == "group" else fields[n.field],
                     n.perm) for n in rule.header}
    assert set(required_resources(code, fields, None)) == expected, RequestCode(code).name


def test_docs_show_the_table() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert render_markdown() in text, (
        f"{DOCS} is out of date: paste the output of `python -m acl.resources`")


# ---------------------------------------------------------------- an ACL-guarded broker

VICTIM = ("victim01", "victimsecret")
ATTACKER = ("attack01", "attacksecret")
V_TOPIC, V_GROUP, V_PRODUCERS = "VictimTopic", "VictimGroup", "VictimProducers"
A_TOPIC, A_GROUP = "AttackTopic", "AttackGroup"
ACL = f"""accounts:
  - accessKey: {VICTIM[0]}
    secretKey: {VICTIM[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{V_TOPIC}=PUB|SUB]
    groupPerms: [{V_GROUP}=SUB]
  - accessKey: {ATTACKER[0]}
    secretKey: {ATTACKER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{A_TOPIC}=PUB|SUB]
    groupPerms: [{A_GROUP}=SUB]
"""


class Conn(FakeConn):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: dict[str, Any] = {}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerController]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    c = BrokerController(BrokerConfig(
        store_path_root_dir=str(tmp_path / "store"), listen_port=0, acl_enable=True,
        acl_plain_file=str(acl), maped_file_size_commit_log=1 << 20,
        maped_file_size_consume_queue=100 * 20, max_hash_slot_num=64, max_index_num=256))
    assert c.acl_file is not None
    c.acl_file.load_at_start()
    c._load()
    for t in (V_TOPIC, A_TOPIC):
        c.topic_config_manager.update(TopicConfig(t, 1, 1))
    try:
        yield c
    finally:
        c._persist_and_close()


def request(c: BrokerController, who: tuple[str, str], code: int, fields: dict[str, Any],
            body: Any = None, conn: FakeConn | None = None) -> RemotingCommand:
    """A signed request through the broker's guarded handler table."""
    raw = RemotingCommand.request(code).encode_body(body) if body is not None else None
    cmd = RemotingCommand.request(code, sign_fields(fields, raw, *who), raw)
    sync, async_ = c.server.handlers.lookup(code)
    assert sync is not None and async_ is None
    conn = conn or Conn()
    response = sync(conn, cmd)  # type: ignore[arg-type]
    if response is None:
        assert len(conn.sent) == 1
        response = conn.sent[-1]
    return response


def put(c: BrokerController, topic: str, body: bytes, keys: str | None = None) -> int:
    """A stored message's commit-log offset."""
    result = c.message_store.put_message(inner(topic, 0, body, keys=keys))
    assert result.append_result is not None
    return result.append_result.wrote_offset


def test_view_message_by_id_needs_sub_on_the_messages_topic(broker: BrokerController) -> None:
    offset = put(broker, V_TOPIC, b"secret")
    resp = request(broker, ATTACKER, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
    assert resp.code == ResponseCode.NO_PERMISSION
    assert V_TOPIC not in (resp.remark or "") and "SUB" in (resp.remark or "")
    assert b"secret" not in (resp.body or b"")
    # counted as the guard's refusals are
    assert broker.stats.acl_refusals == {(RequestCode.VIEW_MESSAGE_BY_ID, "permission"): 1}
    resp = request(broker, VICTIM, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
    assert resp.code == ResponseCode.SUCCESS and b"secret" in (resp.body or b"")


def test_query_message_leaves_out_real_topics_not_readable(broker: BrokerController) -> None:
    """A half message is indexed under the half topic; an account reading that
    topic (here the default SUB) does not read other accounts' half messages."""
    broker.acl_file.watcher.load(ACL.replace(  # type: ignore[union-attr]
        f"topicPerms: [{A_TOPIC}=PUB|SUB]",
        f"topicPerms: [{A_TOPIC}=PUB|SUB, {RMQ_SYS_TRANS_HALF_TOPIC}=SUB]"), 1.0)
    prepare(broker, b"half-body", keys="k1")
    fields = {"topic": RMQ_SYS_TRANS_HALF_TOPIC, "key": "k1", "maxNum": 32,
              "beginTimestamp": 0, "endTimestamp": 2**62}
    resp = request(broker, ATTACKER, RequestCode.QUERY_MESSAGE, fields)
    assert resp.code == ResponseCode.QUERY_NOT_FOUND and not resp.body


def test_send_back_needs_sub_on_the_messages_topic(broker: BrokerController) -> None:
    offset = put(broker, V_TOPIC, b"secret")
    fields = {"offset": offset, "group": A_GROUP, "delayLevel": 0}
    resp = request(broker, ATTACKER, RequestCode.CONSUMER_SEND_MSG_BACK, fields)
    assert resp.code == ResponseCode.NO_PERMISSION
    assert V_TOPIC not in (resp.remark or "")
    assert broker.message_store.get_max_offset_in_queue(f"%RETRY%{A_GROUP}", 0) == 0
    assert broker.topic_config_manager.get(f"%RETRY%{A_GROUP}") is None
    # the victim's own group gives it back; its retry message is given back again
    resp = request(broker, VICTIM, RequestCode.CONSUMER_SEND_MSG_BACK,
                   {"offset": offset, "group": V_GROUP, "delayLevel": -1})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    # the attacker's own messages and retry messages are its to give back
    own = put(broker, A_TOPIC, b"mine")
    resp = request(broker, ATTACKER, RequestCode.CONSUMER_SEND_MSG_BACK,
                   {"offset": own, "group": A_GROUP, "delayLevel": -1})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    retry = put(broker, f"%RETRY%{A_GROUP}", b"again")
    resp = request(broker, ATTACKER, RequestCode.CONSUMER_SEND_MSG_BACK,
                   {"offset": retry, "group": A_GROUP, "delayLevel": -1})
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def test_lock_and_unlock_need_sub_on_the_bodys_group_and_topics(
        broker: BrokerController) -> None:
    def body(group: str, cid: str, topic: str = V_TOPIC) -> dict[str, Any]:
        return {"consumerGroup": group, "clientId": cid,
                "mqSet": [{"topic": topic, "brokerName": broker.config.broker_name,
                           "queueId": 0}]}

    resp = request(broker, VICTIM, RequestCode.LOCK_BATCH_MQ, {}, body(V_GROUP, "victim-cid"))
    assert resp.code == ResponseCode.SUCCESS
    held = broker.lock_manager.try_lock_batch
    for code in (RequestCode.UNLOCK_BATCH_MQ, RequestCode.LOCK_BATCH_MQ):
        resp = request(broker, ATTACKER, code, {}, body(V_GROUP, "attack-cid"))
        assert resp.code == ResponseCode.NO_PERMISSION, RequestCode(code).name
        assert f"group={V_GROUP}" in (resp.remark or "")
    # its own group with the victim's topic: the topic is refused
    resp = request(broker, ATTACKER, RequestCode.LOCK_BATCH_MQ, {}, body(A_GROUP, "attack-cid"))
    assert resp.code == ResponseCode.NO_PERMISSION and f"topic={V_TOPIC}" in (resp.remark or "")
    # the victim still holds its queue
    mq = (V_TOPIC, broker.config.broker_name, 0)
    assert held(V_GROUP, [mq], "other-cid", 0.0) == []
    assert held(V_GROUP, [mq], "victim-cid", 0.0) == [mq]


def prepare(c: BrokerController, body: bytes, keys: str | None = None) -> tuple[int, int]:
    """The victim's prepared message: (half queue offset, commit-log offset)."""
    props = {"UNIQ_KEY": body.decode(), TRAN_MSG: "true", PGROUP: V_PRODUCERS}
    if keys:
        props["KEYS"] = keys
    msg = build_inner(V_TOPIC, 0, body, props, sys_flag=TRANSACTION_PREPARED_TYPE,
                      born_timestamp=1, born_host="10.0.0.1:1234")
    result = c.transaction_service.prepare(msg, props, V_PRODUCERS)
    assert result.append_result is not None
    return result.append_result.logics_offset, result.append_result.wrote_offset


def test_end_transaction_needs_pub_on_the_half_messages_topic(
        broker: BrokerController) -> None:
    queue_offset, offset = prepare(broker, b"tx")
    fields = {"producerGroup": V_PRODUCERS, "tranStateTableOffset": queue_offset,
              "commitLogOffset": offset, "commitOrRollback": TRANSACTION_ROLLBACK_TYPE}
    resp = request(broker, ATTACKER, RequestCode.END_TRANSACTION, fields)
    assert resp.code == ResponseCode.NO_PERMISSION
    assert V_TOPIC not in (resp.remark or "")
    assert broker.transaction_service.book.verdict(queue_offset, EndState.ROLLBACK) \
        is Verdict.APPLY  # still pending
    resp = request(broker, VICTIM, RequestCode.END_TRANSACTION, fields)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert broker.transaction_service.rolled_back == 1


def _heart_beat(c: BrokerController, who: tuple[str, str], cid: str) -> Conn:
    conn = Conn()
    resp = request(c, who, RequestCode.HEART_BEAT, {},
                   {"clientID": cid, "producerDataSet": [{"groupName": V_PRODUCERS}],
                    "consumerDataSet": []}, conn)
    assert resp.code == ResponseCode.SUCCESS
    return conn


async def test_transaction_checks_go_only_to_producers_that_may_pub(
        broker: BrokerController) -> None:
    prepare(broker, b"tx")
    attacker = _heart_beat(broker, ATTACKER, "attack-cid")  # joining is allowed ...
    assert broker.producer_manager.client_ids(V_PRODUCERS) == ["attack-cid"]

    def check_pass() -> PassReport:
        report = PassReport()
        stop = broker.message_store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0)
        broker.transaction_service.check_chunk(2**50, stop, broker.ask_producer, report)
        return report

    report = check_pass()  # ... hearing the group's checks is not
    assert report.checked == 1 and report.no_producer == 1
    assert attacker.sent == []
    victim = _heart_beat(broker, VICTIM, "victim-cid")
    report = check_pass()
    assert report.checked == 1 and report.no_producer == 0
    assert attacker.sent == []
    (check,) = victim.sent
    assert check.code == RequestCode.CHECK_TRANSACTION_STATE and b"tx" in (check.body or b"")


def test_ask_producer_without_acl_asks_any_member(tmp_path: Path) -> None:
    c = BrokerController(BrokerConfig(store_path_root_dir=str(tmp_path), listen_port=0))
    conn = Conn()
    c.producer_manager.register(V_PRODUCERS, "cid", conn, 0.0)
    header = CheckTransactionStateRequestHeader(0, 0, "m", "m", "o")
    asked = c.ask_producer(V_PRODUCERS, lambda: CheckRequest(V_PRODUCERS, header, b"x", V_TOPIC))
    assert asked is Asked.SENT
    assert len(conn.sent) == 1


def test_unknown_key_and_bad_signature_get_one_remark(broker: BrokerController) -> None:
    fields = {"offset": 0}
    unknown = request(broker, ("nobody99", "whatever1"), RequestCode.VIEW_MESSAGE_BY_ID, fields)
    bad = request(broker, (VICTIM[0], "wrongsecret"), RequestCode.VIEW_MESSAGE_BY_ID, fields)
    assert unknown.code == bad.code == ResponseCode.NO_PERMISSION
    assert unknown.remark == bad.remark == SIGNATURE_REFUSED
    assert "nobody99" not in SIGNATURE_REFUSED


def test_refusal_details_stay_in_the_decision() -> None:
    config = parse_plain_acl(ACL)
    unknown = config.decide(RequestCode.SEND_MESSAGE_V2, {"AccessKey": "nobody99", "b": "T"},
                            None, "10.0.0.1", lambda secret: False)
    bad = config.decide(RequestCode.SEND_MESSAGE_V2, {"AccessKey": VICTIM[0], "b": "T"},
                        None, "10.0.0.1", lambda secret: False)
    assert unknown.remark == bad.remark
    assert unknown.reason != bad.reason  # the metrics still tell them apart
    assert "No acl config for accessKey=nobody99" in unknown.detail
    assert f"Check signature failed for accessKey={VICTIM[0]}" in bad.detail


@pytest.mark.parametrize("holder", sorted(OTHER_TOPICS_HOLDERS))
def test_default_topic_perm_does_not_reach_other_topics_holders(holder: str) -> None:
    """An account reading any topic by default does not read every producer's half,
    delayed or given-up messages by pulling the system topic that holds them."""
    config = parse_plain_acl(
        "accounts:\n  - accessKey: reader01\n    secretKey: readersecret\n"
        "    defaultTopicPerm: PUB|SUB\n    defaultGroupPerm: SUB\n"
        "  - accessKey: tools001\n    secretKey: toolssecret\n"
        f"    defaultTopicPerm: DENY\n    defaultGroupPerm: SUB\n    topicPerms: [{holder}=SUB]\n")

    def pull(key: str) -> bool:
        fields = {"AccessKey": key, "topic": holder, "consumerGroup": "G"}
        return config.decide(RequestCode.PULL_MESSAGE, fields, None, "10.0.0.1",
                             lambda secret: True).allowed

    assert not pull("reader01")
    assert pull("tools001")  # an explicit topicPerms entry grants it
    assert config.decide(RequestCode.PULL_MESSAGE, {"AccessKey": "reader01", "topic": "Any",
                                                    "consumerGroup": "G"},
                         None, "10.0.0.1", lambda secret: True).allowed
