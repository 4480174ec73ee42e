"""Client SDK on trio: producer, transaction producer, push / pull / lite-pull
consumers, and their blocking facade (``client.blocking``) for plain Python."""

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
from client.transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
from protocol.message import Message, MessageExt, MessageQueue

__all__ = [
    "AclCredentials",
    "AllocateByConsistentHash",
    "ClientMetrics",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "LitePullConsumer",
    "LocalTransactionState",
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendFuture",
    "SendResult",
    "SendStatus",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "allocate_by_consistent_hash",
]
