"""What several broker services share (kept tiny)."""

from __future__ import annotations

from typing import Protocol


class LiveRole(Protocol):
    """The broker's live role (broker/role.py RoleState): read on every
    request, never the config's ``brokerRole``."""

    is_slave: bool
    sync_master: bool
