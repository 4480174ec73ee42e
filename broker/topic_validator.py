"""TopicValidator: topic name rules and the system topics."""

from __future__ import annotations

from protocol.names import (  # noqa: F401  (re-exported)
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    OFFSET_MOVED_EVENT,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_BENCHMARK_TOPIC,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRACE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    SELF_TEST_TOPIC,
    SEND_ALLOWED_SYSTEM_TOPICS,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TOPIC_MAX_LENGTH,
    TRANS_CHECK_MAX_TIME_TOPIC,
    is_system_topic,
    shown,
    topic_problem,
)


def validate_topic(topic: str) -> str | None:
    """None if ``topic`` is a legal name, else the reason it is not (protocol.names)."""
    return topic_problem(topic)


def check_user_topic(topic: str) -> str | None:
    """Reason a producer may not send to ``topic``, or None. Of the system
    topics only the trace topic takes sends (RocketMQ's isNotAllowedSendTopic)."""
    reason = validate_topic(topic)
    if reason is None and is_system_topic(topic) and topic not in SEND_ALLOWED_SYSTEM_TOPICS:
        reason = f"the topic {shown(topic)} is a reserved system topic"
    return reason
