"""Access control as RocketMQ's plain ACL (issue 18), shared by the broker and the name
server: accounts from ``plain_acl.yml`` and the decision on each request (plain.py, with
address.py's remote address patterns), changes made by admin requests (admin.py),
signatures bound to their request code and time (binding.py), and the table of what every
served request code needs (resources.py, issue 48). guard.py is the trio edge: the check
around served handlers, the file's reloads and atomic rewrites.

The broker's own parts are in broker/acl/ (its ACL admin requests, the check of resources
found beyond the header); the name server's in namesrv/acl.py.
"""

from acl.address import RemoteAddressStrategy
from acl.admin import AccessConfig, AclAdminError, AclDocument, AclVersion
from acl.plain import (
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
