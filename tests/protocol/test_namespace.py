"""Namespaced names (protocol/namespace.py): RocketMQ's NamespaceUtil rules."""

from __future__ import annotations

import pytest

from protocol.namespace import in_namespace, namespace_problem, unwrap, wrap


@pytest.mark.parametrize("name,wrapped", [
    ("TopicA", "app1%TopicA"),
    ("GID_a", "app1%GID_a"),
    ("%RETRY%GID_a", "%RETRY%app1%GID_a"),
    ("%DLQ%GID_a", "%DLQ%app1%GID_a"),
    ("app1%TopicA", "app1%TopicA"),  # already in it: once only
    ("%RETRY%app1%GID_a", "%RETRY%app1%GID_a"),
    ("TBW102", "TBW102"),  # system topics and groups are shared
    ("RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC"),
    ("rmq_sys_wheel", "rmq_sys_wheel"),
    ("CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_TRANS"),
    ("", ""),
    ("app2%TopicA", "app1%app2%TopicA"),  # another namespace's name is a plain name here
])
def test_wrap_and_back(name: str, wrapped: str) -> None:
    assert wrap("app1", name) == wrapped
    if name.startswith("app1%") or "%app1%" in name:
        assert unwrap("app1", wrapped) == name.replace("app1%", "", 1)
    else:
        assert unwrap("app1", wrapped) == name


def test_no_namespace_changes_nothing() -> None:
    assert wrap("", "TopicA") == "TopicA"
    assert unwrap("", "app1%TopicA") == "app1%TopicA"


def test_unwrap_leaves_other_names() -> None:
    assert unwrap("app1", "app2%TopicA") == "app2%TopicA"
    assert unwrap("app1", "TopicA") == "TopicA"
    assert unwrap("app1", "%RETRY%app1%G") == "%RETRY%G"
    assert unwrap("app1", "%DLQ%app1%G") == "%DLQ%G"
    assert not in_namespace("app10%TopicA", "app1")


@pytest.mark.parametrize("namespace,ok", [
    ("", True), ("app1", True), ("a-b_C9", True), ("a%b", False), ("a b", False),
    ("x" * 64, True), ("x" * 65, False),
])
def test_namespace_problem(namespace: str, ok: bool) -> None:
    assert (namespace_problem(namespace) is None) == ok
