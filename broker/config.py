"""BrokerConfig: one typed object for every broker and store setting.

Keys are RocketMQ's (``brokerName``, ``mapedFileSizeCommitLog``, ...). Loaded
from a RocketMQ-style properties file; attribute names are the snake_case
forms of the keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from protocol import names
from protocol.config import ConfigError, PropertiesConfig, load_properties
from protocol.route import DEFAULT_MAX_QUEUE_NUMS

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


@dataclass(slots=True)
class BrokerConfig(PropertiesConfig):
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
    compressed_register: bool = False  # always compress (bodies over 1 MiB always are)
    # topics
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 4
    max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS  # most read/write queues one topic may have
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
    # index
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    # cleanup
    delete_when: str = "04"  # hour(s) of the day to delete expired files, e.g. "04" or "04;05"
    file_reserved_time: int = 72  # hours a commit-log file is kept
    disk_max_used_space_ratio: int = 75  # % used: past this, expired files go at once
    disk_space_clean_forcibly_ratio: int = 85  # % used: past this, oldest files go even if young
    disk_space_warning_level_ratio: int = 90  # % used: past this, writes are refused
    clean_resource_interval: int = 10_000  # ms between cleanup runs
    delete_files_batch_max: int = 10  # files deleted per run at most
    # delay and retry
    schedule_tick_millis: int = 100
    max_reconsume_times: int = 16
    # consumer offsets
    flush_consumer_offset_interval: int = 5000
    # pull
    long_polling_enable: bool = True
    long_polling_max_suspend_millis: int = 15_000
    # housekeeping
    channel_expired_timeout: int = 120_000

    def validate(self) -> None:
        """Names and addresses follow protocol.names; raises ConfigError naming the key."""
        checks = [
            ("brokerName", names.broker_name_problem(self.broker_name)),
            ("brokerClusterName", names.cluster_name_problem(self.broker_cluster_name)),
            ("brokerIP1", names.addr_problem(f"{self.broker_ip1}:{self.listen_port}")),
        ]
        checks += [("namesrvAddr", names.addr_problem(a)) for a in self.namesrv_addr_list]
        for key, problem in checks:
            if problem is not None:
                raise ConfigError(f"{key}: {problem}")
        if not 0 < self.max_queue_nums <= 65535:
            raise ConfigError("maxQueueNums must be within 1..65535")
        if not 0 < self.default_topic_queue_nums <= self.max_queue_nums:
            raise ConfigError("defaultTopicQueueNums must be within 1..maxQueueNums")

    def delay_level_table(self) -> dict[int, int]:
        """Delay level (1-based) -> milliseconds, from ``messageDelayLevel``.

        Raises ConfigError for an entry that is not a number with s/m/h/d.
        """
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        table = {}
        for level, item in enumerate(self.message_delay_level.split(), 1):
            unit = units.get(item[-1:])
            if unit is None or not item[:-1].isdigit():
                raise ConfigError(f"bad messageDelayLevel entry {item!r}")
            table[level] = int(item[:-1]) * unit
        return table

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def namesrv_addr_list(self) -> list[str]:
        return [a.strip() for a in re.split(r"[;,]", self.namesrv_addr) if a.strip()]

    def store_path(self, *parts: str) -> Path:
        return Path(self.store_path_root_dir).joinpath(*parts)


__all__ = ["BrokerConfig", "BrokerRole", "ConfigError", "FlushDiskType", "load_properties"]
