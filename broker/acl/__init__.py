"""The broker's own parts of access control: admin_processor.py serves the ACL admin
requests (RocketMQ's ``UPDATE_AND_CREATE_ACL_CONFIG``...), stored.py is the check handlers
make of resources found beyond the header (a message's topic, a stored message's group).
Accounts, decisions, signatures' binding and the guard around handlers are shared with the
name server: the top-level ``acl`` package."""
