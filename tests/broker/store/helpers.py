from __future__ import annotations

from pathlib import Path

from broker.config import BrokerConfig
from broker.store import DefaultMessageStore, MessageExtBrokerInner, StoreConfig
from protocol.hashing import tags_hash_code
from protocol.message import properties_to_string


def make_config(root: Path, cl_size: int = 4096, cq_entries: int = 10) -> BrokerConfig:
    return BrokerConfig(
        store_path_root_dir=str(root),
        maped_file_size_commit_log=cl_size,
        maped_file_size_consume_queue=cq_entries * 20,
        max_message_size=2048,
        # index files are allocated for real: keep them small
        max_hash_slot_num=1000,
        max_index_num=4000,
    )


def open_store(config: BrokerConfig | StoreConfig) -> DefaultMessageStore:
    """A loaded, started store (a BrokerConfig: its StoreConfig.from_broker)."""
    if isinstance(config, BrokerConfig):
        config = StoreConfig.from_broker(config)
    store = DefaultMessageStore(config)
    assert store.load()
    store.start()
    return store


def inner(topic: str, queue_id: int, body: bytes, tags: str | None = None,
          keys: str | None = None, properties: dict[str, str] | None = None
          ) -> MessageExtBrokerInner:
    props: dict[str, str] = dict(properties or {})
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    return MessageExtBrokerInner(
        topic=topic, queue_id=queue_id, flag=0, body=body,
        properties_string=properties_to_string(props), tags_code=tags_hash_code(tags),
        keys=keys, born_timestamp=1, born_host="10.0.0.1:1234",
    )
