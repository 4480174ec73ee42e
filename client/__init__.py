"""Client SDK on trio: producer, transaction producer, push / pull / lite-pull
consumers, and their blocking facade (``client.blocking``) for plain Python.

The names below are imported on first use (PEP 562): a process that needs one
module of the SDK (Spark's data-source processes need a few) does not import
them all, and trio with them."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from client.consumer_types import (
        ConsumeConcurrentlyContext,
        ConsumeConcurrentlyStatus,
        ConsumeFromWhere,
        ConsumeOrderlyContext,
        ConsumeOrderlyStatus,
        MessageModel,
    )
    from client.credentials import AclCredentials
    from client.errors import MQBrokerError, MQClientError
    from client.lite_pull_consumer import LitePullConsumer
    from client.metrics import ClientMetrics
    from client.producer import Producer
    from client.pull_consumer import PullConsumer
    from client.pull_result import PullResult, PullStatus
    from client.push_consumer import PushConsumer
    from client.rebalance import (
        AllocateByConsistentHash,
        allocate_averagely,
        allocate_averagely_by_circle,
        allocate_by_consistent_hash,
    )
    from client.send_future import SendFuture
    from client.send_result import SendResult, SendStatus
    from client.simple_consumer import InvalidReceiptHandle, ReceivedMessage, SimpleConsumer
    from client.subscription import MessageSelector
    from client.transaction import (
        LocalTransactionState,
        TransactionListener,
        TransactionProducer,
        TransactionSendResult,
    )
    from protocol.message import Message, MessageExt, MessageQueue

_EXPORTS = {
    "AclCredentials": "client.credentials",
    "AllocateByConsistentHash": "client.rebalance",
    "ClientMetrics": "client.metrics",
    "ConsumeConcurrentlyContext": "client.consumer_types",
    "ConsumeConcurrentlyStatus": "client.consumer_types",
    "ConsumeFromWhere": "client.consumer_types",
    "ConsumeOrderlyContext": "client.consumer_types",
    "ConsumeOrderlyStatus": "client.consumer_types",
    "LitePullConsumer": "client.lite_pull_consumer",
    "LocalTransactionState": "client.transaction",
    "InvalidReceiptHandle": "client.simple_consumer",
    "MQBrokerError": "client.errors",
    "MQClientError": "client.errors",
    "Message": "protocol.message",
    "MessageExt": "protocol.message",
    "MessageModel": "client.consumer_types",
    "MessageQueue": "protocol.message",
    "MessageSelector": "client.subscription",
    "Producer": "client.producer",
    "PullConsumer": "client.pull_consumer",
    "PullResult": "client.pull_result",
    "PullStatus": "client.pull_result",
    "PushConsumer": "client.push_consumer",
    "ReceivedMessage": "client.simple_consumer",
    "SendFuture": "client.send_future",
    "SendResult": "client.send_result",
    "SendStatus": "client.send_result",
    "SimpleConsumer": "client.simple_consumer",
    "TransactionListener": "client.transaction",
    "TransactionProducer": "client.transaction",
    "TransactionSendResult": "client.transaction",
    "allocate_averagely": "client.rebalance",
    "allocate_averagely_by_circle": "client.rebalance",
    "allocate_by_consistent_hash": "client.rebalance",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later uses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
