"""Master/slave replication of the commit log: the pure cores.

``transfer`` is the wire (bytes only); ``ha_connection.HAConnection`` is the
master's view of one slave (its acknowledged offset, what to send next);
``ha_client.HAClient`` is the slave's side (apply a transfer, when to report);
``slots.Slots`` bounds the master's HA connections.
Neither touches sockets, clocks or trio: the broker's HA service drives them.
Every error a peer can cause is a HAProtocolError (a RemoteProtocolError):
log it and close the connection; the slave reconnects and resumes from its end.
"""

from broker.store.ha.ha_client import HAClient, ReplicaAppendError, TransferOffsetError
from broker.store.ha.ha_connection import (
    HAConnection,
    SlaveInvalidError,
    is_slave_ok,
    push_to_slave_max_offset,
)
from broker.store.ha.transfer import (
    DEFAULT_MAX_TRANSFER_SIZE,
    REPORT,
    TRANSFER_HEADER,
    HAProtocolError,
    ReportDecoder,
    TransferDecoder,
    encode_report,
    encode_transfer,
)

__all__ = [
    "DEFAULT_MAX_TRANSFER_SIZE",
    "REPORT",
    "TRANSFER_HEADER",
    "HAClient",
    "HAConnection",
    "HAProtocolError",
    "ReplicaAppendError",
    "ReportDecoder",
    "SlaveInvalidError",
    "TransferDecoder",
    "TransferOffsetError",
    "encode_report",
    "encode_transfer",
    "is_slave_ok",
    "push_to_slave_max_offset",
]
