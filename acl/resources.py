"""Every request code the broker and the name server serve, and what ACL asks of it.

One row per served request code (issue 48: "every request code names its
resource"). With ``aclEnable=true`` every request first needs a known access
key with a valid signature (or a white address); then its row says what more:

- ``admin``: an ``admin: true`` account (plain.ADMIN_CODES; the name server's
  namesrv.acl.NAMESRV_ADMIN_CODES too, and the controller's codes whose
  controller.acl.CONTROLLER_PERMISSIONS row is not LOOKUP);
- ``resources``: the permission on each resource named, in the header (checked
  by the guard before the handler runs: plain.required_resources) and/or in
  the body or the stored data (checked by the handler: broker/acl/stored.py);
- ``account``: any known account; ``why`` says why no resource is asked for.

tests/broker/test_acl_resources.py fails when a served code has no row, when a
row disagrees with plain.ADMIN_CODES or plain.required_resources, or when
docs/security/acl-resources.md differs from ``render_markdown()``
(``python -m acl.resources`` prints it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from acl.plain import Perm, perm_name
from protocol.codes import RequestCode as C


class Access(enum.Enum):
    ADMIN = "admin"
    RESOURCES = "resources"
    ACCOUNT = "account"


@dataclass(frozen=True)
class HeaderNeed:
    """A header field naming a resource: a topic, or a group (``%RETRY%<group>``)."""

    field: str
    kind: str  # "topic" or "group"
    perm: Perm

    def __str__(self) -> str:
        return f"{perm_name(self.perm)} on {self.kind} `{self.field}`"


def topic(name: str, perm: Perm = Perm.SUB) -> HeaderNeed:
    return HeaderNeed(name, "topic", perm)


def group(name: str) -> HeaderNeed:
    return HeaderNeed(name, "group", Perm.SUB)


@dataclass(frozen=True)
class Rule:
    access: Access
    header: tuple[HeaderNeed, ...] = ()
    # resources the handler finds in the body or the stored data, and checks itself
    handler: str = ""
    why: str = ""


def _admin(why: str = "") -> Rule:
    return Rule(Access.ADMIN, why=why)


def _account(why: str) -> Rule:
    return Rule(Access.ACCOUNT, why=why)


def _res(*header: HeaderNeed, handler: str = "", why: str = "") -> Rule:
    return Rule(Access.RESOURCES, header, handler, why)


_LISTING = ("broker-wide read-only listing (slaves' sync, dashboard, tools); names no "
            "single resource")

BROKER_RULES: dict[int, Rule] = {
    C.SEND_MESSAGE: _res(topic("topic", Perm.PUB),
                         why="a send to `%RETRY%<group>` (a consumer's retry) needs SUB on "
                             "the group instead"),
    C.SEND_MESSAGE_V2: _res(topic("b", Perm.PUB), why="as SEND_MESSAGE"),
    C.SEND_BATCH_MESSAGE: _res(topic("topic", Perm.PUB), why="as SEND_MESSAGE"),
    C.RECALL_MESSAGE: _res(topic("topic", Perm.PUB), why="cancels a send: as SEND_MESSAGE"),
    C.CONSUMER_SEND_MSG_BACK: _res(
        group("group"),
        handler="SUB on the topic of the message at `offset` (and on its REAL_TOPIC), "
                "unless it is the group's own `%RETRY%<group>`"),
    C.END_TRANSACTION: _res(
        handler="PUB on the real topic of the half message at `commitLogOffset`",
        why="a producer group is no ACL resource: the half message's topic is"),
    C.PULL_MESSAGE: _res(topic("topic"), group("consumerGroup")),
    C.POP_MESSAGE: _res(topic("topic"), group("consumerGroup")),
    C.ACK_MESSAGE: _res(topic("topic"), group("consumerGroup"),
                        why="the receipt handle is signed for the group: no other topic"),
    C.CHANGE_MESSAGE_INVISIBLETIME: _res(topic("topic"), group("consumerGroup"),
                                         why="as ACK_MESSAGE"),
    C.BATCH_ACK_MESSAGE: _res(topic("topic"), group("consumerGroup"),
                              why="as ACK_MESSAGE: every handle of the body is checked "
                                  "against the header's group and topic"),
    C.QUERY_CONSUMER_OFFSET: _res(group("consumerGroup"), topic("topic")),
    C.UPDATE_CONSUMER_OFFSET: _res(group("consumerGroup"), topic("topic")),
    C.GET_MAX_OFFSET: _res(topic("topic")),
    C.GET_MIN_OFFSET: _res(topic("topic")),
    C.SEARCH_OFFSET_BY_TIMESTAMP: _res(topic("topic")),
    C.UPDATE_AND_CREATE_TOPIC: _admin(),
    C.DELETE_TOPIC_IN_BROKER: _admin(),
    C.GET_TOPIC_STATS_INFO: _res(topic("topic")),
    C.GET_ALL_TOPIC_CONFIG: _account(_LISTING),
    C.GET_ALL_CONSUMER_OFFSET: _account(_LISTING),
    C.GET_BROKER_RUNTIME_INFO: _account("broker-wide figures; names no resource"),
    C.GET_ALL_DELAY_OFFSET: _account(_LISTING),
    C.GET_TIMER_CHECK_POINT: _account(_LISTING),
    C.GET_CONSUME_STATS: _res(group("consumerGroup"), topic("topic")),
    C.GET_CONSUMER_CONNECTION_LIST: _res(group("consumerGroup")),
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _admin(),
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _account(_LISTING),
    C.DELETE_SUBSCRIPTIONGROUP: _admin(),
    C.HEART_BEAT: _res(
        handler="SUB on each consumer group and each subscribed topic of the body (the "
                "guard decodes it); producer groups: joining takes no right, but "
                "CHECK_TRANSACTION_STATE goes only to a producer whose heart-beat's account "
                "may PUB on the half message's real topic",
        why="a producer group is no ACL resource"),
    C.UNREGISTER_CLIENT: _res(group("consumerGroup"),
                              why="a producer group is no ACL resource (as RocketMQ)"),
    C.GET_CONSUMER_LIST_BY_GROUP: _res(group("consumerGroup")),
    C.CHECK_CLIENT_CONFIG: _account(
        "compiles the body's subscription expression and says whether the broker filters "
        "by it; reads and changes nothing (as RocketMQ)"),
    C.LOCK_BATCH_MQ: _res(handler="SUB on the body's `consumerGroup` and on the topic of "
                                  "each queue of `mqSet`"),
    C.UNLOCK_BATCH_MQ: _res(handler="as LOCK_BATCH_MQ"),
    C.VIEW_MESSAGE_BY_ID: _res(handler="SUB on the topic of the message at `offset` (and on "
                                       "its REAL_TOPIC)"),
    C.QUERY_MESSAGE: _res(topic("topic"),
                          handler="messages with a REAL_TOPIC (half, delayed) are left out "
                                  "without SUB on it"),
    C.VIEW_BROKER_STATS_DATA: _account("counters of a statistic by key; the message "
                                       "counts of a topic or group, no messages"),
    C.QUERY_TOPIC_CONSUME_BY_WHO: _res(topic("topic")),
    C.GET_PRODUCER_CONNECTION_LIST: _account("a producer group is no ACL resource; "
                                             "lists client ids and addresses"),
    C.GET_BROKER_CONFIG: _admin("the broker's settings, secrets masked"),
    C.UPDATE_BROKER_CONFIG: _admin(),
    C.GET_TOPIC_CONFIG: _res(topic("topic")),
    C.QUERY_CONSUME_QUEUE: _res(topic("topic"), group("consumerGroup"),
                                why="the group (optional) shows its subscription"),
    C.CLEAN_EXPIRED_CONSUMEQUEUE: _admin("removes consume queues"),
    C.CLEAN_UNUSED_TOPIC: _admin("removes consume queues"),
    C.UPDATE_AND_CREATE_ACL_CONFIG: _admin(),
    C.DELETE_ACL_CONFIG: _admin(),
    C.GET_BROKER_CLUSTER_ACL_INFO: _admin(),
    C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: _admin(),
    C.GET_BROKER_CLUSTER_ACL_CONFIG: _admin(),
    C.INVOKE_BROKER_TO_RESET_OFFSET: _admin("moves a group's offsets and tells its consumers"),
    C.GET_CONSUMER_RUNNING_INFO: _res(group("consumerGroup"),
                                      why="relayed to the consumer, which answers its state"),
    # controller mode (broker/replicas_manager.py)
    C.NOTIFY_BROKER_ROLE_CHANGED: _account(
        "the broker asks the controller and acts on its answer only: a notification "
        "changes nothing by itself"),
    C.GET_BROKER_EPOCH_CACHE: _account("the broker's epoch entries and max offset"),
}

NAMESRV_RULES: dict[int, Rule] = {
    C.REGISTER_BROKER: _admin("brokers register with an admin account"),
    C.UNREGISTER_BROKER: _admin(),
    C.GET_ROUTEINFO_BY_TOPIC: _account("producers and consumers alike need routes; a "
                                       "route holds broker addresses and queue counts"),
    C.GET_BROKER_CLUSTER_INFO: _account("broker names and addresses"),
    C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _account("topic names, as tools list them"),
    C.WIPE_WRITE_PERM_OF_BROKER: _admin(),
    C.ADD_WRITE_PERM_OF_BROKER: _admin(),
    C.DELETE_TOPIC_IN_NAMESRV: _admin(),
    C.PUT_KV_CONFIG: _admin(),
    C.GET_KV_CONFIG: _account("clients read ORDER_TOPIC_CONFIG"),
    C.DELETE_KV_CONFIG: _admin(),
    C.GET_KVLIST_BY_NAMESPACE: _account("as GET_KV_CONFIG"),
    C.UPDATE_NAMESRV_CONFIG: _admin("secrets are refused: set in the config file"),
    C.GET_NAMESRV_CONFIG: _admin("the name server's settings, secrets masked"),
    # the controller inside the name server (enableControllerInNamesrv), and
    # mqcontroller alike (controller/acl.py CONTROLLER_PERMISSIONS)
    C.BROKER_HEARTBEAT: _admin(
        "a broker's account: a forged heart-beat (epoch, max offset) would sway an election "
        "or keep a dead master alive; RocketMQ's plain signature is enough (one a second "
        "from every replica: bound ones would fill the admin replay cache)"),
    C.CONTROLLER_ALTER_SYNC_STATE_SET: _admin("a master changes its SyncStateSet"),
    C.CONTROLLER_ELECT_MASTER: _admin("a replica, or an operator, asks for an election"),
    C.CONTROLLER_REGISTER_BROKER: _admin("brokers register with an admin account"),
    C.CONTROLLER_GET_REPLICA_INFO: _account("a broker name's master and SyncStateSet"),
    C.CONTROLLER_GET_METADATA_INFO: _account("whether this controller leads"),
    C.CONTROLLER_GET_SYNC_STATE_DATA: _account("broker names' replicas and epochs"),
    C.UPDATE_CONTROLLER_CONFIG: _admin(),
    C.GET_CONTROLLER_CONFIG: _admin("the controller's settings"),
    C.CLEAN_BROKER_DATA: _admin("forgets replicas"),
    C.CONTROLLER_GET_NEXT_BROKER_ID: _account("the id a new replica would apply for"),
    C.CONTROLLER_APPLY_BROKER_ID: _admin("a broker takes an id"),
}


def _name(code: int) -> str:
    try:
        return C(code).name
    except ValueError:
        return str(code)


def render_table(rules: dict[int, Rule]) -> str:
    lines = ["| Code | Request | Access | Header (checked by the guard) | "
             "Body or stored data (checked by the handler) | Why |",
             "|---:|---|---|---|---|---|"]
    for code in sorted(rules):
        r = rules[code]
        header = ", ".join(str(n) for n in r.header) or "-"
        lines.append(f"| {code} | {_name(code)} | {r.access.value} | {header} | "
                     f"{r.handler or '-'} | {r.why or '-'} |")
    return "\n".join(lines) + "\n"


def render_markdown() -> str:
    """The two tables of docs/security/acl-resources.md."""
    return ("### Broker\n\n" + render_table(BROKER_RULES)
            + "\n### Name server\n\n" + render_table(NAMESRV_RULES))


if __name__ == "__main__":
    print(render_markdown(), end="")
