"""StoreConfig: the settings the message store reads, and nothing else.

Built from the broker's config by ``StoreConfig.from_broker``; the store
(``DefaultMessageStore``) never sees the whole BrokerConfig. Frozen: a
setting that changes while the broker runs (an UPDATE_BROKER_CONFIG of a
runtime key, the address records carry once an ephemeral port is bound)
reaches the store as a whole new StoreConfig through
``DefaultMessageStore.reconfigure``, which takes only a change of the
``LIVE_FIELDS``. The broker's role is not here: the store knows a role only
through its write fence, which the broker sets.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from broker.config import BrokerConfig


@dataclass(frozen=True, slots=True)
class StoreConfig:
    # identity: log context, and the address records carry (storeHost; offset msgIds)
    broker_name: str
    store_host: str
    # where each part lives (storePathRootDir, storePathCommitLog, ...)
    root_dir: Path
    commit_log_path: Path
    consume_queue_path: Path
    index_path: Path
    checkpoint_path: Path
    abort_path: Path
    # files
    maped_file_size_commit_log: int
    maped_file_size_consume_queue: int
    warm_maped_file_enable: bool
    # records
    max_message_size: int
    delay_levels: tuple[int, ...]  # ms of delay level 1, 2, ... (messageDelayLevel)
    # index
    message_index_enable: bool
    max_hash_slot_num: int
    max_index_num: int
    # reads
    max_transfer_bytes_on_message_in_memory: int
    max_transfer_count_on_message_in_memory: int
    access_message_in_memory_max_ratio: int
    # disk space and clean-up
    disk_space_warning_level_ratio: int
    disk_max_used_space_ratio: int
    disk_space_clean_forcibly_ratio: int
    delete_when: str
    file_reserved_time: int
    delete_files_batch_max: int
    # controller mode (enableControllerMode): dispatch waits for the confirm offset
    enable_controller_mode: bool = False

    # what may differ in the StoreConfig a running store is handed (reconfigure):
    # BrokerConfig's runtime keys the store reads (broker/config_load.py
    # RUNTIME_KEYS), and the store host (an ephemeral listen port, bound at start)
    LIVE_FIELDS: ClassVar[frozenset[str]] = frozenset({
        "store_host", "max_message_size", "access_message_in_memory_max_ratio",
        "disk_max_used_space_ratio", "delete_when", "file_reserved_time",
    })

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> StoreConfig:
        """The store's part of ``config`` (ConfigError for a bad messageDelayLevel)."""
        table = config.delay_level_table()
        return cls(
            broker_name=config.broker_name,
            store_host=config.broker_addr,
            root_dir=Path(config.store_path_root_dir),
            commit_log_path=config.commit_log_path,
            consume_queue_path=config.consume_queue_path,
            index_path=config.index_path,
            checkpoint_path=config.checkpoint_path,
            abort_path=config.abort_path,
            maped_file_size_commit_log=config.maped_file_size_commit_log,
            maped_file_size_consume_queue=config.maped_file_size_consume_queue,
            warm_maped_file_enable=config.warm_maped_file_enable,
            max_message_size=config.max_message_size,
            delay_levels=tuple(table[level] for level in sorted(table)),
            message_index_enable=config.message_index_enable,
            max_hash_slot_num=config.max_hash_slot_num,
            max_index_num=config.max_index_num,
            max_transfer_bytes_on_message_in_memory=config.max_transfer_bytes_on_message_in_memory,
            max_transfer_count_on_message_in_memory=config.max_transfer_count_on_message_in_memory,
            access_message_in_memory_max_ratio=config.access_message_in_memory_max_ratio,
            disk_space_warning_level_ratio=config.disk_space_warning_level_ratio,
            disk_max_used_space_ratio=config.disk_max_used_space_ratio,
            disk_space_clean_forcibly_ratio=config.disk_space_clean_forcibly_ratio,
            delete_when=config.delete_when,
            file_reserved_time=config.file_reserved_time,
            delete_files_batch_max=config.delete_files_batch_max,
            enable_controller_mode=config.enable_controller_mode,
        )

    def delay_level_table(self) -> dict[int, int]:
        """Delay level (1-based) -> milliseconds."""
        return dict(enumerate(self.delay_levels, 1))

    def fixed_changes(self, other: StoreConfig) -> list[str]:
        """The fields that differ in ``other`` but cannot change while the store runs."""
        return [f.name for f in fields(self)
                if f.name not in self.LIVE_FIELDS
                and getattr(self, f.name) != getattr(other, f.name)]


__all__ = ["StoreConfig"]
