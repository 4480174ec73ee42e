"""TopicValidator: topic name rules and the system topics."""

from __future__ import annotations

from protocol.names import (  # noqa: F401  (re-exported)
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TOPIC_MAX_LENGTH,
    TRANS_CHECK_MAX_TIME_TOPIC,
    shown,
    topic_problem,
)

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
RMQ_SYS_BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"

SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SELF_TEST_TOPIC,
        RMQ_SYS_SCHEDULE_TOPIC,
        RMQ_SYS_TRANS_HALF_TOPIC,
        RMQ_SYS_TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        RMQ_SYS_TRACE_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

SYSTEM_TOPIC_PREFIX = "rmq_sys_"


def validate_topic(topic: str) -> str | None:
    """None if ``topic`` is a legal name, else the reason it is not (protocol.names)."""
    return topic_problem(topic)


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def check_user_topic(topic: str) -> str | None:
    """Reason a producer may not send to ``topic``, or None."""
    reason = validate_topic(topic)
    if reason is None and is_system_topic(topic):
        reason = f"the topic {shown(topic)} is a reserved system topic"
    return reason
