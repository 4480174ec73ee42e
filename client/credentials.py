"""ACL credentials: with them every request the client sends is signed (RocketMQ's
AclClientRPCHook), for brokers started with ``aclEnable=true``."""

from __future__ import annotations

from dataclasses import dataclass

from client.errors import MQClientError


@dataclass(frozen=True)
class AclCredentials:
    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:  # never show the secret
        return f"AclCredentials(access_key={self.access_key!r}, secret_key='***')"


def resolve_credentials(credentials: AclCredentials | None = None,
                        access_key: str | None = None,
                        secret_key: str | None = None,
                        security_token: str | None = None) -> AclCredentials | None:
    """``credentials``, or ones built from the keywords; None when neither is given."""
    if credentials is not None:
        if access_key is not None or secret_key is not None:
            raise MQClientError("give credentials or access_key/secret_key, not both")
        return credentials
    if access_key is None and secret_key is None:
        return None
    if not access_key or not secret_key:
        raise MQClientError("access_key and secret_key go together")
    return AclCredentials(access_key, secret_key, security_token)
