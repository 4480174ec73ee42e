"""What the Spark source's readers and the sink's writers both set up in a Python
worker: the client's ClientConfig from their options, and quiet client logs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client.config import ClientConfig


def client_config(namesrv: str, access_key: str | None, secret_key: str | None,
                  use_tls: bool, tls_ca_path: str | None, tls_cert_path: str | None,
                  tls_key_path: str | None) -> ClientConfig:
    """The source's or the sink's options (already checked) as the ClientConfig of
    their consumers or producers. Raises MQClientError for a bad name-server address."""
    from client.config import ClientConfig  # the client loads in read(), not at import
    from client.credentials import AclCredentials

    creds = None if access_key is None or secret_key is None else \
        AclCredentials(access_key, secret_key)
    return ClientConfig(namesrv_addr=namesrv, credentials=creds, use_tls=use_tls,
                        tls_ca_path=tls_ca_path, tls_cert_path=tls_cert_path,
                        tls_key_path=tls_key_path)


def quiet_client_logs() -> None:
    """Unless the process configured structlog itself, log the client at
    ``$ROCKETMQ_SPARK_LOG_LEVEL`` (WARNING): Spark's Python workers would print
    every client start and stop of every task otherwise."""
    import structlog

    if not structlog.is_configured():
        from protocol.trio.logs import configure_logging

        configure_logging(os.environ.get("ROCKETMQ_SPARK_LOG_LEVEL", "WARNING"))


__all__ = ["client_config", "quiet_client_logs"]
