"""BrokerConfig: one typed object for every broker and store setting.

Keys are RocketMQ's (``brokerName``, ``mapedFileSizeCommitLog``, ...). Loaded
from a RocketMQ-style properties file; attribute names are the snake_case
forms of the keys.
"""

from __future__ import annotations

import dataclasses
import re
import socket
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class FlushDiskType(StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class ConfigError(ValueError):
    """A configuration key or value is not valid."""


def _default_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


@dataclass(slots=True)
class BrokerConfig:
    # identity
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    broker_ip1: str = "127.0.0.1"
    listen_port: int = 10911
    namesrv_addr: str = ""
    # registration
    register_broker_interval_ms: int = 30_000
    register_broker_timeout_ms: int = 6_000
    # topics
    auto_create_topic_enable: bool = True
    default_topic_queue_nums: int = 4
    broker_permission: int = 6
    # messages
    max_message_size: int = 4 * MiB
    max_frame_size: int = 16 * MiB
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    # store
    store_path_root_dir: str = field(default_factory=lambda: str(Path.home() / "store"))
    maped_file_size_commit_log: int = 1 * GiB
    maped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_interval_consume_queue: int = 1000
    sync_flush_timeout: int = 5000
    max_transfer_bytes_on_message_in_memory: int = 256 * KiB
    max_transfer_count_on_message_in_memory: int = 32
    # cleanup
    delete_when: str = "04"
    file_reserved_time: int = 72
    disk_max_used_space_ratio: int = 75
    # consumer offsets
    flush_consumer_offset_interval: int = 5000
    # pull
    long_polling_enable: bool = True
    # housekeeping
    channel_expired_timeout: int = 120_000

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def namesrv_addr_list(self) -> list[str]:
        return [a.strip() for a in re.split(r"[;,]", self.namesrv_addr) if a.strip()]

    def store_path(self, *parts: str) -> Path:
        return Path(self.store_path_root_dir).joinpath(*parts)

    # ---- properties files ------------------------------------------------

    @staticmethod
    def key_of(attr: str) -> str:
        head, *rest = attr.split("_")
        return head + "".join(p[:1].upper() + p[1:] for p in rest)

    def to_properties(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Enum):
                value = value.value
            elif isinstance(value, bool):
                value = "true" if value else "false"
            out[self.key_of(f.name)] = str(value)
        return out

    def update(self, props: dict[str, Any]) -> None:
        """Apply RocketMQ keys (camelCase) or attribute names. Raises ConfigError."""
        by_key = {self.key_of(f.name): f for f in dataclasses.fields(self)}
        by_attr = {f.name: f for f in dataclasses.fields(self)}
        for key, raw in props.items():
            f = by_key.get(key) or by_attr.get(key)
            if f is None:
                raise ConfigError(f"unknown broker config key: {key}")
            setattr(self, f.name, _convert(f.name, getattr(self, f.name), raw))

    @classmethod
    def from_properties(cls, props: dict[str, Any]) -> BrokerConfig:
        cfg = cls()
        cfg.update(props)
        return cfg


def _convert(name: str, current: Any, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    try:
        if isinstance(current, Enum):
            return type(current)(text)
        if isinstance(current, bool):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if isinstance(current, int):
            return int(text)
    except ValueError as exc:
        raise ConfigError(f"bad value for {name}: {raw!r}") from exc
    return text


def load_properties(path: str | Path) -> dict[str, str]:
    """Parse a Java-style properties file (``key=value``, ``#`` comments)."""
    props: dict[str, str] = {}
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)$", line)
        if not m:
            raise ConfigError(f"{path}:{lineno}: cannot parse {line!r}")
        props[m.group(1)] = m.group(2)
    return props
