"""Access control as RocketMQ's plain ACL (issue 18): accounts from ``plain_acl.yml``
and the decision on each request. Pure code; the broker wires it in later."""

from broker.acl.address import RemoteAddressStrategy
from broker.acl.plain import (
    ADMIN_CODES,
    Account,
    AclConfig,
    AclWatcher,
    Decision,
    Perm,
    parse_plain_acl,
    required_resources,
)

__all__ = [
    "ADMIN_CODES", "Account", "AclConfig", "AclWatcher", "Decision", "Perm",
    "RemoteAddressStrategy", "parse_plain_acl", "required_resources",
]
