"""ConfigService: the broker's config as operators read and change it, in domain
terms (GET_BROKER_CONFIG, UPDATE_BROKER_CONFIG without the remoting:
broker/ops_processor.py is their adapter).

``shown()`` is the effective config, every secret's value masked. ``update``
checks the changes (broker/config_load.py ``check_runtime_changes``: only
``RUNTIME_KEYS``, a secret refused by name, nothing applied on any error),
writes them (atomically, in a worker thread) into the config file the broker
was started from, or without one into ``<storePathRootDir>/broker.conf.runtime``
(which ``load_broker_config`` applies at the next start), then applies them to
the live config and tells ``on_applied`` (the broker hands the store its new
StoreConfig, re-registers on a brokerPermission change). Updates are
serialized.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
import trio

from broker.config_load import LoadedConfig, check_runtime_changes, render_properties, runtime_path
from broker.persist import atomic_write_bytes
from protocol.config import rewrite_properties


class ConfigService:
    def __init__(self, loaded: LoadedConfig,
                 on_applied: Callable[[dict[str, str]], None] = lambda changes: None,
                 log: Any = None) -> None:
        self.config = loaded.config
        self.config_file = loaded.config_file
        # what the overlay file holds (read at start, then every change written to it)
        self.overlay: dict[str, str] = dict(loaded.overlay)
        self.on_applied = on_applied
        self.log = log if log is not None else structlog.get_logger("broker.config")
        self._lock = trio.Lock()

    def shown(self) -> str:
        """The effective config as properties text, secrets masked (``-p`` prints the same)."""
        return self.config.render() + "\n"

    @property
    def written_to(self) -> Path:
        """The file a change is written into."""
        return self.config_file if self.config_file is not None else runtime_path(self.config)

    async def update(self, props: Mapping[str, str]) -> dict[str, str]:
        """Check, persist and apply ``props``; returns the changes under their
        RocketMQ names. ConfigError (bad key or value) or OSError (the file
        cannot be written): nothing applied."""
        async with self._lock:
            changes = check_runtime_changes(self.config, props)
            path = self.written_to
            if self.config_file is not None:
                config_file = self.config_file

                def write() -> None:
                    text = config_file.read_text()
                    atomic_write_bytes(config_file, rewrite_properties(text, changes).encode())

                await trio.to_thread.run_sync(write)
            else:
                merged = {**self.overlay, **changes}
                data = render_properties(merged).encode()
                await trio.to_thread.run_sync(atomic_write_bytes, path, data)
                self.overlay = merged
            self.config.update(changes)
            self.log.info("broker config changed at run time", path=str(path), **changes)
            self.on_applied(changes)
        return changes


__all__ = ["ConfigService"]
