"""What several broker services share (kept tiny)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from broker.client_manager import ConsumerGroupInfo


class LiveRole(Protocol):
    """The broker's live role (broker/role.py RoleState): read on every
    request, never the config's ``brokerRole``."""

    is_slave: bool
    sync_master: bool


class GroupMembers(Protocol):
    """A group -> members table (broker/client_manager.py ClientGroups): each
    member's client id and its transport's channel."""

    @property
    def groups(self) -> Mapping[str, ConsumerGroupInfo]: ...
