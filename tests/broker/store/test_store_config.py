"""StoreConfig (broker/store/config.py): the store's settings, built from the broker's
config by one function, every field read by the store; a running store takes a new one
through reconfigure, which refuses a change of anything but the live fields."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.store import PutMessageStatus, StoreConfig
from protocol.record import pack_host
from tests.broker.store.helpers import inner, make_config, open_store

STORE_SOURCES = Path(__file__).resolve().parents[3] / "broker" / "store"


def test_from_broker_takes_the_stores_part(tmp_path: Path) -> None:
    cfg = BrokerConfig.from_properties({
        "storePathRootDir": str(tmp_path), "storePathIndex": str(tmp_path / "fast" / "idx"),
        "brokerIP1": "10.0.0.5", "listenPort": "20911", "messageDelayLevel": "1s 2m 1h",
        "maxMessageSize": "1000", "fileReservedTime": "12", "deleteWhen": "03;04",
    })
    sc = StoreConfig.from_broker(cfg)
    assert (sc.root_dir, sc.commit_log_path, sc.consume_queue_path, sc.index_path,
            sc.checkpoint_path, sc.abort_path) == (
        tmp_path, tmp_path / "commitlog", tmp_path / "consumequeue", tmp_path / "fast" / "idx",
        tmp_path / "checkpoint", tmp_path / "abort")
    assert sc.store_host == "10.0.0.5:20911" and sc.broker_name == cfg.broker_name
    assert sc.delay_levels == (1000, 120_000, 3_600_000)
    assert sc.delay_level_table() == cfg.delay_level_table()
    assert (sc.max_message_size, sc.file_reserved_time, sc.delete_when) == (1000, 12, "03;04")
    # every other field has the broker's key of the same name
    for f in dataclasses.fields(StoreConfig):
        if hasattr(cfg, f.name):
            assert getattr(sc, f.name) == getattr(cfg, f.name), f.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        sc.max_message_size = 1  # type: ignore[misc]


def test_every_field_is_read_by_the_store() -> None:
    """StoreConfig holds what the store reads, nothing more: each field is read
    (``config.<field>``) somewhere under broker/store/ besides its own module."""
    text = "\n".join(p.read_text() for p in STORE_SOURCES.rglob("*.py") if p.name != "config.py")
    read_through = {"delay_levels": "delay_level_table"}  # the table made from it
    unread = [f.name for f in dataclasses.fields(StoreConfig)
              if not re.search(rf"\bconfig\.{read_through.get(f.name, f.name)}\b", text)]
    assert unread == []
    assert StoreConfig.LIVE_FIELDS <= {f.name for f in dataclasses.fields(StoreConfig)}


def test_reconfigure_takes_live_fields_and_refuses_the_rest(tmp_path: Path) -> None:
    store = open_store(make_config(tmp_path))
    try:
        before = store.config
        big = inner("T", 0, b"x" * 3000)  # past make_config's maxMessageSize (2048)
        assert store.put_message(big).put_message_status is PutMessageStatus.MESSAGE_ILLEGAL
        store.reconfigure(dataclasses.replace(before, max_message_size=4096, file_reserved_time=1,
                                              store_host="10.9.8.7:4321"))
        put = store.put_message(big)
        assert put.put_message_status is PutMessageStatus.PUT_OK
        assert put.append_result is not None
        assert put.append_result.msg_id.startswith(pack_host("10.9.8.7:4321").hex().upper())
        assert store.config.file_reserved_time == 1
        live = store.config
        for change in ({"maped_file_size_commit_log": 8192},
                       {"index_path": tmp_path / "elsewhere", "max_index_num": 1}):
            with pytest.raises(ValueError, match="cannot change while the store runs: "
                               + ", ".join(change)):
                store.reconfigure(dataclasses.replace(live, max_message_size=1, **change))
            assert store.config is live and store.commit_log.max_message_size == 4096
    finally:
        store.shutdown()
