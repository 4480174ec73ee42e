"""Client SDK on trio: producer, pull consumer, and their blocking facade
(``client.blocking``) for plain Python."""

from client.errors import MQBrokerError, MQClientError
from client.producer import Producer
from client.pull_consumer import PullConsumer
from client.pull_result import PullResult, PullStatus
from client.send_future import SendFuture
from client.send_result import SendResult, SendStatus
from protocol.message import Message, MessageExt, MessageQueue

__all__ = [
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "SendFuture",
    "SendResult",
    "SendStatus",
]
