from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.config import BrokerConfig, BrokerRole, ConfigError, FlushDiskType
from broker.consumer_offset_manager import ConsumerOffsetManager
from broker.topic_config_manager import TopicConfigManager
from broker.topic_validator import check_user_topic, validate_topic
from protocol.route import PERM_READ, PERM_RW, TopicConfig


def test_topic_names() -> None:
    assert validate_topic("Order_Topic-1%|x") is None
    assert "empty" in (validate_topic("") or "")
    assert "127" in (validate_topic("a" * 128) or "")
    assert validate_topic("a" * 127) is None
    assert "characters" in (validate_topic("bad topic") or "")
    assert "reserved" in (check_user_topic("SCHEDULE_TOPIC_XXXX") or "")
    assert "reserved" in (check_user_topic("TBW102") or "")
    assert check_user_topic("%RETRY%group") is None


def test_config_keys_and_types(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# comment\nbrokerName=b1\nbrokerIP1=10.1.2.3\nlistenPort = 12000\n"
                    "flushDiskType=SYNC_FLUSH\nbrokerRole=SLAVE\nbrokerId=1\nautoCreateTopicEnable=false\n"
                    "namesrvAddr=a:1;b:2\n")
    from protocol.trio.daemon import load_properties
    cfg = BrokerConfig.from_properties(load_properties(conf))
    assert (cfg.broker_name, cfg.broker_ip1, cfg.listen_port) == ("b1", "10.1.2.3", 12000)
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH and cfg.broker_role is BrokerRole.SLAVE
    assert cfg.auto_create_topic_enable is False and cfg.namesrv_addr_list == ["a:1", "b:2"]
    assert cfg.to_properties()["brokerIP1"] == "10.1.2.3"
    with pytest.raises(ConfigError):
        BrokerConfig.from_properties({"noSuchKey": "1"})
    with pytest.raises(ConfigError):
        BrokerConfig.from_properties({"listenPort": "many"})
    with pytest.raises(ConfigError):
        BrokerConfig.from_properties({"flushDiskType": "SOMETIMES"})


def test_topic_config_manager_persists_atomically(tmp_path: Path) -> None:
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path))
    mgr = TopicConfigManager(cfg)
    version = mgr.data_version.counter
    mgr.update(TopicConfig("A", 8, 8))
    mgr.update(TopicConfig("B", 2, 2, PERM_READ))
    assert mgr.data_version.counter == version + 2
    path = tmp_path / "config" / "topics.json"
    assert json.loads(path.read_text())["topicConfigTable"]["B"]["perm"] == PERM_READ
    assert (tmp_path / "config" / "topics.json.bak").exists()
    assert mgr.delete("A") and not mgr.delete("A")

    again = TopicConfigManager(cfg)
    again.load()
    assert again.get("B") == TopicConfig("B", 2, 2, PERM_READ) and again.get("A") is None
    # a torn main file falls back to the backup
    path.write_text("{not json")
    third = TopicConfigManager(cfg)
    third.load()
    assert third.get("A") is not None


def test_auto_create_from_default_topic(tmp_path: Path) -> None:
    mgr = TopicConfigManager(BrokerConfig(store_path_root_dir=str(tmp_path), default_topic_queue_nums=4))
    created = mgr.create_topic_in_send_message_method("New", "TBW102", 16)
    assert created is not None and created.write_queue_nums == 4
    assert mgr.create_topic_in_send_message_method("Other", "NoDefault", 4) is None
    off = TopicConfigManager(BrokerConfig(store_path_root_dir=str(tmp_path / "x"),
                                          auto_create_topic_enable=False))
    assert off.create_topic_in_send_message_method("New", "TBW102", 4) is None


def test_consumer_offsets_round_trip(tmp_path: Path) -> None:
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path))
    mgr = ConsumerOffsetManager(cfg)
    assert mgr.query_offset("g", "T", 0) == -1
    mgr.commit_offset("g", "T", 0, 42)
    mgr.commit_offset("g", "T", 3, 7)
    mgr.commit_offset("h", "T", 0, 1)
    mgr.persist()
    data = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert data["offsetTable"]["T@g"] == {"0": 42, "3": 7}
    again = ConsumerOffsetManager(cfg)
    again.load()
    assert again.query_offsets("g", "T") == {0: 42, 3: 7}
    assert again.groups_of_topic("T") == {"g", "h"}
    again.remove_topic("T")
    assert again.query_offset("g", "T", 0) == -1


def test_subscription_groups_auto_create_persist_and_reload(tmp_path: Path) -> None:
    from broker.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager

    cfg = BrokerConfig(store_path_root_dir=str(tmp_path), max_reconsume_times=5)
    m = SubscriptionGroupManager(cfg)
    g = m.find("g1")
    assert g is not None and g.consume_enable and g.retry_max_times == 5 and g.retry_queue_nums == 1
    m.update(SubscriptionGroupConfig("g2", consume_enable=False, retry_queue_nums=3, retry_max_times=2))
    m.persist()
    data = json.loads((tmp_path / "config" / "subscriptionGroup.json").read_text())
    assert data["subscriptionGroupTable"]["g2"]["retryQueueNums"] == 3
    assert data["subscriptionGroupTable"]["g2"]["consumeEnable"] is False
    again = SubscriptionGroupManager(cfg)
    again.load()
    assert again.table["g2"] == m.table["g2"] and "g1" in again.table
    assert again.data_version == m.data_version
    assert again.delete("g1") and not again.delete("g1")

    off = SubscriptionGroupManager(BrokerConfig(store_path_root_dir=str(tmp_path / "x"),
                                                auto_create_subscription_group=False))
    assert off.find("nobody") is None and not off.table


def test_subscription_group_config_rejects_bad_maps() -> None:
    from broker.subscription_group_manager import SubscriptionGroupConfig

    with pytest.raises(ValueError, match="groupName"):
        SubscriptionGroupConfig.from_dict({"consumeEnable": True})
    with pytest.raises(ValueError, match="consumeEnable"):
        SubscriptionGroupConfig.from_dict({"groupName": "g", "consumeEnable": "yes"})
    with pytest.raises(ValueError, match="retryMaxTimes"):
        SubscriptionGroupConfig.from_dict({"groupName": "g", "retryMaxTimes": -1})
    ok = SubscriptionGroupConfig.from_dict({"groupName": "g", "retryMaxTimes": 3, "extra": 1})
    assert ok.retry_max_times == 3 and SubscriptionGroupConfig.from_dict(ok.to_dict()) == ok


def test_topics_created_on_the_fly_are_written_later_in_one_go(tmp_path: Path) -> None:
    """Auto-created, retry and dead-letter topics wake the persist task instead of
    each rewriting topics.json (with an fsync) on the event loop; an admin's
    update is written before it returns."""
    config = BrokerConfig(store_path_root_dir=str(tmp_path))
    mgr = TopicConfigManager(config)
    woken: list[int] = []
    mgr.on_dirty = lambda: woken.append(1)
    for i in range(50):
        mgr.create_topic_in_send_back(f"%RETRY%g{i}", 1, PERM_RW)
    assert not mgr.path.exists() and mgr.dirty and len(woken) == 50
    snap = mgr.snapshot(force=False)
    assert snap is not None and not mgr.dirty and mgr.snapshot(force=False) is None
    snap.write()
    again = TopicConfigManager(config)
    again.load()
    assert {f"%RETRY%g{i}" for i in range(50)} <= set(again.table)
    mgr.update(TopicConfig("AdminTopic", 2, 2))
    fresh = TopicConfigManager(config)
    fresh.load()
    assert "AdminTopic" in fresh.table


def test_invalid_topics_in_topics_json_are_skipped(tmp_path: Path) -> None:
    config = BrokerConfig(store_path_root_dir=str(tmp_path))
    mgr = TopicConfigManager(config)
    mgr.update(TopicConfig("Good", 1, 1))
    data = json.loads(mgr.path.read_text())
    table = data["topicConfigTable"]
    table["%RETRY%x/../../escape"] = dict(table["Good"], topicName="%RETRY%x/../../escape")
    table["Huge"] = dict(table["Good"], topicName="Huge", writeQueueNums=2**31 - 1)
    table["Mismatch"] = dict(table["Good"])
    table["Broken"] = {"readQueueNums": "x"}
    mgr.path.write_text(json.dumps(data))
    again = TopicConfigManager(config)
    again.load()
    assert "Good" in again.table
    assert not {"%RETRY%x/../../escape", "Huge", "Mismatch", "Broken"} & set(again.table)
