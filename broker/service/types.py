"""What several broker services share (kept tiny)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

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


@dataclass(eq=False, slots=True)
class SessionChannel:
    """The channel of a client the broker cannot call back: a gRPC client
    (RocketMQ 5's SDKs) is known by its client id and its heart-beats, with no
    remoting connection to send requests over. The client tables keep it as
    they keep a remoting connection (compared by identity); what would call a
    member back (group change notices, an offset reset's notice, a running-info
    relay, a transaction check) asks ``isinstance(channel, SessionChannel)``
    first and answers that gRPC clients are not called back."""

    client_id: str
    remote_addr: str
    transport: str = "gRPC"
    # what GET_PRODUCER_CONNECTION_LIST reports (as a remoting connection's attrs)
    attrs: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
