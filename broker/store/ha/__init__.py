"""Master/slave replication of the commit log: the pure cores.

``transfer`` is the wire (bytes only); ``ha_connection.HAConnection`` is the
master's view of one slave (its acknowledged offset, what to send next);
``ha_client.HAClient`` is the slave's side (apply a transfer, when to report).
Neither touches sockets, clocks or trio: the broker's HA service drives them.
"""

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
    "HAProtocolError",
    "ReportDecoder",
    "TransferDecoder",
    "encode_report",
    "encode_transfer",
]
