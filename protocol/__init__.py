"""Sans-IO protocol: frames, RemotingCommand, codes, headers, message records, routes.

Nothing here does I/O (sockets, files) or runs trio except the ``protocol.trio``
subpackage (tests/test_layout.py checks it).
"""

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import (
    CorruptRecordError,
    FrameTooLargeError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
)
from protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame
from protocol.message import Message, MessageConst, MessageExt, MessageQueue
from protocol.route import BrokerData, QueueData, TopicConfig, TopicRouteData

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "BrokerData",
    "CorruptRecordError",
    "FrameDecoder",
    "FrameTooLargeError",
    "LocalProtocolError",
    "Message",
    "MessageConst",
    "MessageExt",
    "MessageQueue",
    "ProtocolError",
    "QueueData",
    "RemoteProtocolError",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "TopicConfig",
    "TopicRouteData",
    "encode_frame",
]
