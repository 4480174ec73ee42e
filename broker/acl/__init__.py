"""Access control as RocketMQ's plain ACL (issue 18): accounts from ``plain_acl.yml``
and the decision on each request (plain.py), changes made by admin requests
(admin.py); the trio edges are guard.py (the check around served handlers, the
file's reloads and atomic rewrites) and admin_processor.py (the admin requests).
resources.py is the table of what every served request code needs (issue 48);
stored.py the check handlers make of resources found beyond the header."""

from broker.acl.address import RemoteAddressStrategy
from broker.acl.admin import AccessConfig, AclAdminError, AclDocument, AclVersion
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
    "ADMIN_CODES", "AccessConfig", "Account", "AclAdminError", "AclConfig", "AclDocument",
    "AclVersion", "AclWatcher", "Decision", "Perm",
    "RemoteAddressStrategy", "parse_plain_acl", "required_resources",
]
