"""InstanceUser: the lifecycle shared by the SDK's consumers that keep no
background work of their own (PullConsumer, SimpleConsumer).

Such a consumer only borrows the process's shared ``MQClientInstance`` for the
name server it talks to: ``start`` acquires it, ``shutdown`` releases it, and
every call in between asks for it through ``_running_instance``, which raises
``MQClientError`` outside the running state. A consumer is started once:
CREATED -> RUNNING -> SHUTDOWN; ``shutdown`` is idempotent and safe from a
cancelled task.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Self

import trio

from client.config import ClientConfig
from client.errors import MQClientError
from client.instance import MQClientInstance


class LifecycleState(Enum):
    CREATED = "created"
    RUNNING = "running"
    SHUTDOWN = "shutdown"


class InstanceUser:
    """Subclasses set ``config``, ``namesrv_addr``, ``request_timeout``,
    ``poll_name_server_interval`` and ``_log`` in their ``__init__`` and call
    ``super().__init__()``; ``KIND`` names them in logs and errors."""

    KIND = "consumer"

    config: ClientConfig
    namesrv_addr: str
    request_timeout: float
    poll_name_server_interval: float
    _log: Any

    def __init__(self) -> None:
        self._state = LifecycleState.CREATED
        self._instance: MQClientInstance | None = None

    async def start(self) -> None:
        """Acquire the shared client instance. Raises MQClientError if already
        started or the name-server address is invalid."""
        if self._state is not LifecycleState.CREATED:
            raise MQClientError(f"the consumer is {self._state.value}; it can be started once")
        instance = await MQClientInstance.acquire(
            self.namesrv_addr, request_timeout=self.request_timeout,
            poll_name_server_interval=self.poll_name_server_interval,
            credentials=self.config.credentials, tls=self.config.client_tls(),
            instance_name=self.config.instance_name)
        self._instance = instance
        self._on_started(instance)
        self._state = LifecycleState.RUNNING
        self._log.info(f"{self.KIND} started")

    def _on_started(self, instance: MQClientInstance) -> None:
        """What a subclass builds on the acquired instance (nothing by default)."""

    async def shutdown(self) -> None:
        """Release the client instance. Idempotent; safe from a cancelled task."""
        if self._state is not LifecycleState.RUNNING:
            self._state = LifecycleState.SHUTDOWN
            return
        self._state = LifecycleState.SHUTDOWN
        if self._instance is not None:
            with trio.CancelScope(shield=True):
                await self._instance.release()
        self._log.info(f"{self.KIND} shut down")

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def _running_instance(self) -> MQClientInstance:
        if self._state is not LifecycleState.RUNNING or self._instance is None:
            raise MQClientError(f"the consumer is not running ({self._state.value})")
        return self._instance
