"""RocketMQ broker templates load: store paths and HA keys honoured, keys that
mean nothing here accepted with one notice each, misspelt keys refused, roles
checked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from click.testing import CliRunner
from structlog.testing import capture_logs

from broker.cli import main as mqbroker
from broker.config import NO_EFFECT_KEYS, BrokerConfig, BrokerRole
from broker.controller import BrokerController
from broker.store import DefaultMessageStore, PutMessageStatus, StoreConfig
from protocol.config import ConfigError, key_of
from protocol.trio.daemon import load_properties
from tests.broker.store.helpers import inner

# The broker template of RocketMQ's deployment guide (the seed's 2m-2s example),
# with its commented keys set and its paths under a test directory.
TEMPLATE = """\
#所属集群名字
brokerClusterName=rocketmq-cluster
#broker名字,注意此处不同的配置文件填写的不一样
brokerName=broker-a
#0表示Master,>0表示Slave
brokerId=0
#nameServer地址,分号分割
namesrvAddr=192.168.1.101:9876;192.168.1.102:9876
defaultTopicQueueNums=4
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
listenPort=10911
deleteWhen=04
fileReservedTime=120
mapedFileSizeCommitLog=1073741824
mapedFileSizeConsumeQueue=300000
destroyMapedFileIntervalForcibly=120000
redeleteHangedFileInterval=120000
diskMaxUsedSpaceRatio=88
storePathRootDir={root}/store
storePathCommitLog={root}/disk1/commitlog
storePathConsumeQueue={root}/disk2/consumequeue
storePathIndex={root}/disk2/index
storeCheckpoint={root}/meta/checkpoint
abortFile={root}/meta/abort
maxMessageSize=65536
flushCommitLogLeastPages=4
flushConsumeQueueLeastPages=2
flushCommitLogThoroughInterval=10000
flushConsumeQueueThoroughInterval=60000
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
checkTransactionMessageEnable=false
sendMessageThreadPoolNums=128
pullMessageThreadPoolNums=128
"""

TEMPLATE_NO_EFFECT = [
    "destroyMapedFileIntervalForcibly", "redeleteHangedFileInterval", "flushCommitLogLeastPages",
    "flushConsumeQueueLeastPages", "flushCommitLogThoroughInterval",
    "flushConsumeQueueThoroughInterval", "checkTransactionMessageEnable",
    "sendMessageThreadPoolNums", "pullMessageThreadPoolNums",
]


def template(tmp_path: Path, extra: str = "") -> Path:
    conf = tmp_path / "broker-a.properties"
    conf.write_text(TEMPLATE.format(root=tmp_path) + extra)
    return conf


def test_seed_template_loads(tmp_path: Path) -> None:
    cfg = BrokerConfig.from_properties(load_properties(template(tmp_path)))
    assert (cfg.broker_cluster_name, cfg.broker_name, cfg.broker_id) == (
        "rocketmq-cluster", "broker-a", 0)
    assert cfg.namesrv_addr_list == ["192.168.1.101:9876", "192.168.1.102:9876"]
    assert (cfg.file_reserved_time, cfg.disk_max_used_space_ratio, cfg.max_message_size) == (
        120, 88, 65536)
    assert cfg.maped_file_size_consume_queue == 300000
    assert cfg.commit_log_path == tmp_path / "disk1" / "commitlog"
    assert cfg.consume_queue_path == tmp_path / "disk2" / "consumequeue"
    assert cfg.index_path == tmp_path / "disk2" / "index"
    assert cfg.checkpoint_path == tmp_path / "meta" / "checkpoint"
    assert cfg.abort_path == tmp_path / "meta" / "abort"
    assert [k for k, _v, _why in cfg.no_effect_notices()] == TEMPLATE_NO_EFFECT
    assert dict((k, v) for k, v, _why in cfg.no_effect_notices())["sendMessageThreadPoolNums"] == "128"


def test_store_files_follow_the_configured_paths(tmp_path: Path) -> None:
    cfg = BrokerConfig.from_properties(load_properties(template(tmp_path)))
    cfg.update({"mapedFileSizeCommitLog": 1 << 16, "maxHashSlotNum": 100, "maxIndexNum": 400})
    store = DefaultMessageStore(StoreConfig.from_broker(cfg))
    assert store.load()
    store.start()
    assert (tmp_path / "meta" / "abort").exists()
    r = store.put_message(inner("T", 0, b"x", keys="k"))
    assert r.put_message_status is PutMessageStatus.PUT_OK
    store.flush_commit_log()
    store.flush_consume_queues()
    assert [p.name for p in (tmp_path / "disk1" / "commitlog").iterdir()] == ["0" * 20]
    assert (tmp_path / "disk2" / "consumequeue" / "T" / "0" / ("0" * 20)).exists()
    assert any((tmp_path / "disk2" / "index").iterdir())
    assert (tmp_path / "meta" / "checkpoint").exists()
    assert (tmp_path / "store" / "lock").exists()  # the lock stays under storePathRootDir
    assert not (tmp_path / "store" / "commitlog").exists()
    assert not (tmp_path / "store" / "consumequeue").exists()
    store.shutdown()
    assert not (tmp_path / "meta" / "abort").exists()
    again = DefaultMessageStore(StoreConfig.from_broker(cfg))  # and the store reopens from there
    assert again.load()
    again.start()
    assert again.get_max_offset_in_queue("T", 0) == 1
    assert again.query_message("T", "k", 10, 0, 2**62) != []
    again.shutdown()


def test_default_paths_are_under_the_root(tmp_path: Path) -> None:
    cfg = BrokerConfig.from_properties({"storePathRootDir": str(tmp_path)})
    assert [cfg.commit_log_path, cfg.consume_queue_path, cfg.index_path, cfg.checkpoint_path,
            cfg.abort_path] == [tmp_path / n for n in
                                ("commitlog", "consumequeue", "index", "checkpoint", "abort")]


def test_ha_keys_and_their_defaults() -> None:
    cfg = BrokerConfig.from_properties({"listenPort": "20911"})
    assert cfg.ha_port == 20912  # listenPort + 1 when not set
    assert (cfg.ha_send_heartbeat_interval, cfg.ha_transfer_batch_size, cfg.ha_slave_fallbehind_max,
            cfg.ha_housekeeping_interval, cfg.ha_master_address, cfg.slave_read_enable,
            cfg.access_message_in_memory_max_ratio) == (5000, 32768, 256 * 1024 * 1024, 20000, "",
                                                        False, 40)
    cfg.update({"haListenPort": "30000", "haSendHeartbeatInterval": "1000",
                "haTransferBatchSize": "65536", "haSlaveFallbehindMax": "1024",
                "haHousekeepingInterval": "3000", "haMasterAddress": "10.0.0.1:10912",
                "slaveReadEnable": "true", "accessMessageInMemoryMaxRatio": "10"})
    assert (cfg.ha_port, cfg.ha_send_heartbeat_interval, cfg.ha_transfer_batch_size,
            cfg.ha_slave_fallbehind_max, cfg.ha_housekeeping_interval, cfg.ha_master_address,
            cfg.slave_read_enable, cfg.access_message_in_memory_max_ratio) == (
        30000, 1000, 65536, 1024, 3000, "10.0.0.1:10912", True, 10)
    for bad in ({"haListenPort": "20911"}, {"haMasterAddress": "nowhere"},
                {"haTransferBatchSize": "0"}, {"accessMessageInMemoryMaxRatio": "101"},
                {"haListenPort": "70000"}):
        with pytest.raises(ConfigError):
            BrokerConfig.from_properties({"listenPort": "20911", **bad})
    with pytest.raises(ConfigError, match="haListenPort"):
        BrokerConfig.from_properties({"listenPort": "65535"})


def test_busy_poll_key(tmp_path: Path) -> None:
    assert BrokerConfig.from_properties({}).busy_poll_micros == 0  # off by default
    cfg = BrokerConfig.from_properties({"busyPollMicros": "500",
                                        "storePathRootDir": str(tmp_path / "store")})
    assert cfg.busy_poll_micros == 500
    controller = BrokerController(cfg)
    assert controller.busy_poll.window == 0.0005
    assert controller.server.busy_poll is controller.busy_poll
    for bad in ("-1", "1000001"):
        with pytest.raises(ConfigError, match="busyPollMicros must be a whole number"):
            BrokerConfig.from_properties({"busyPollMicros": bad})


def test_warm_maped_file_key(tmp_path: Path) -> None:
    assert not BrokerConfig.from_properties({}).warm_maped_file_enable  # off, as RocketMQ
    cfg = BrokerConfig.from_properties({"warmMapedFileEnable": "true",
                                        "storePathRootDir": str(tmp_path / "store")})
    assert cfg.warm_maped_file_enable and cfg.no_effect_notices() == []
    controller = BrokerController(cfg)
    assert controller.message_store.commit_log.mapped_file_queue.warm
    # the consume queues' files are small and made by the writer: never warm
    cq = controller.message_store.find_consume_queue("T", 0)
    assert not cq.mapped_file_queue.warm


def test_misspelt_keys_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"storePathComitLog \(did you mean storePathCommitLog\?\)"):
        BrokerConfig.from_properties({"storePathComitLog": "/x"})
    with pytest.raises(ConfigError, match="sendMessageThreadPoolNum"):
        BrokerConfig.from_properties({"sendMessageThreadPoolNum": "4"})
    with pytest.raises(ConfigError, match="unknown config key: noSuchKey$"):
        BrokerConfig.from_properties({"noSuchKey": "1"})
    with pytest.raises(ConfigError):
        BrokerConfig.from_properties(load_properties(template(tmp_path, "haListenPrt=1\n")))


def test_no_effect_keys_are_not_fields() -> None:
    keys = {key_of(f).lower() for f in BrokerConfig.__dataclass_fields__}
    assert not [k for k in NO_EFFECT_KEYS if k.lower() in keys]
    assert "noEffectKeys" not in BrokerConfig().to_properties()
    with pytest.raises(ConfigError):
        BrokerConfig.from_properties({"noEffectKeys": "x"})


@pytest.fixture
def default_logging() -> Iterator[None]:
    """structlog's defaults (every level) for this test, whatever an earlier
    test configured (a WARNING-level setup would drop the info notices)."""
    old = structlog.get_config()
    structlog.reset_defaults()
    try:
        yield
    finally:
        structlog.configure(**old)


def test_one_notice_per_no_effect_key(tmp_path: Path, default_logging: None) -> None:
    cfg = BrokerConfig.from_properties(load_properties(template(tmp_path)))
    cfg.update({"sendMessageThreadPoolNums": "64"})  # given twice (file, then -o): one notice
    with capture_logs() as logs:  # the controller's logger is bound inside: seen by capture
        controller = BrokerController(cfg)
        controller.note_config()
    notices = [e for e in logs if e["event"] == "config key accepted, no effect here"]
    assert [e["key"] for e in notices] == TEMPLATE_NO_EFFECT
    send = next(e for e in notices if e["key"] == "sendMessageThreadPoolNums")
    assert send["value"] == "64" and "thread pool" in send["reason"]
    with capture_logs() as logs:
        BrokerController(BrokerConfig()).note_config()
    assert logs == []


def test_mqbroker_print_config(tmp_path: Path) -> None:
    result = CliRunner().invoke(mqbroker, ["-c", str(template(tmp_path)), "-p",
                                           "-o", "listenPort=20911"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for line in (f"storePathCommitLog={tmp_path}/disk1/commitlog",
                 f"storePathConsumeQueue={tmp_path}/disk2/consumequeue",
                 f"storePathIndex={tmp_path}/disk2/index",
                 f"storeCheckpoint={tmp_path}/meta/checkpoint", f"abortFile={tmp_path}/meta/abort",
                 "haListenPort=20912", "haSendHeartbeatInterval=5000", "haTransferBatchSize=32768",
                 "haSlaveFallbehindMax=268435456", "haHousekeepingInterval=20000",
                 "haMasterAddress=", "slaveReadEnable=false", "accessMessageInMemoryMaxRatio=40"):
        assert line in lines, line
    comments = [ln for ln in lines if ln.startswith("#")]
    assert [c.split("=")[0][2:] for c in comments] == TEMPLATE_NO_EFFECT
    assert "has no effect here" in comments[0]
    # what -p prints loads again to the same settings
    printed = tmp_path / "printed.properties"
    printed.write_text(result.output)
    again = BrokerConfig.from_properties(load_properties(printed))
    assert again.effective_properties() == BrokerConfig.from_properties(
        {**load_properties(template(tmp_path)), "listenPort": "20911"}).effective_properties()
    bad = CliRunner().invoke(mqbroker, ["-c", str(template(tmp_path, "storePathIndx=/x\n")), "-p"])
    assert bad.exit_code == 2 and "storePathIndx" in bad.output


@pytest.mark.parametrize(("role", "broker_id", "ok"), [
    ("ASYNC_MASTER", 0, True), ("SYNC_MASTER", 0, True), ("SLAVE", 1, True), ("SLAVE", 2, True),
    ("SLAVE", 0, False), ("ASYNC_MASTER", 1, False), ("SYNC_MASTER", 3, False),
    ("ASYNC_MASTER", -1, False),
])
def test_role_and_broker_id(role: str, broker_id: int, ok: bool) -> None:
    props = {"brokerRole": role, "brokerId": str(broker_id)}
    if ok:
        cfg = BrokerConfig.from_properties(props)
        assert cfg.is_slave == (cfg.broker_role is BrokerRole.SLAVE)
    else:
        with pytest.raises(ConfigError, match="brokerId"):
            BrokerConfig.from_properties(props)


def test_pre_auth_keys_of_broker_and_name_server() -> None:
    """aclPreAuthMaxFrameBytes (0: header limit + largest body + 64 KiB, at most
    maxFrameSize) and aclPreAuthReadBudgetBytes, checked at start (issue 48)."""
    from acl.guard import HeaderGate
    from namesrv.config import NamesrvConfig
    from protocol.trio.preauth import NAMESRV_PRE_AUTH_BODY, pre_auth_of

    mib = 1024 * 1024
    gate = HeaderGate(lambda: None)
    for config_class, body_of in ((BrokerConfig, lambda c: c.max_message_size),
                                  (NamesrvConfig, lambda c: NAMESRV_PRE_AUTH_BODY)):
        cfg = config_class.from_properties({})
        assert (cfg.acl_pre_auth_max_frame_bytes, cfg.acl_pre_auth_read_budget_bytes) == \
            (0, 32 * mib)
        pre = pre_auth_of(cfg, gate, body_of(cfg))
        assert pre.max_frame_bytes == 4_521_984 and pre.budget.max_bytes == 32 * mib
        cfg = config_class.from_properties({"aclPreAuthMaxFrameBytes": str(mib),
                                            "aclPreAuthReadBudgetBytes": str(8 * mib)})
        pre = pre_auth_of(cfg, gate, body_of(cfg))
        assert pre.max_frame_bytes == mib and pre.budget.max_bytes == 8 * mib
        for bad, key in ((("aclPreAuthMaxFrameBytes", "1000")), "aclPreAuthMaxFrameBytes"), \
                        ((("aclPreAuthMaxFrameBytes", str(17 * mib))), "maxFrameSize"), \
                        ((("aclPreAuthReadBudgetBytes", "0")), "aclPreAuthReadBudgetBytes"):
            with pytest.raises(ConfigError, match=key):
                config_class.from_properties(dict([bad]))
    # a broker taking larger messages: the default follows maxMessageSize, within maxFrameSize
    cfg = BrokerConfig.from_properties({"maxMessageSize": str(8 * mib)})
    assert pre_auth_of(cfg, gate, cfg.max_message_size).max_frame_bytes == 8 * mib + 320 * 1024
    cfg = BrokerConfig.from_properties({"maxMessageSize": str(16 * mib)})
    assert pre_auth_of(cfg, gate, cfg.max_message_size).max_frame_bytes == cfg.max_frame_size


def test_bind_address_key() -> None:
    """bindAddress: what the listeners bind, apart from the advertised brokerIP1."""
    assert BrokerConfig.from_properties({}).listen_host == "127.0.0.1"
    assert BrokerConfig.from_properties({"brokerIP1": "10.0.0.5"}).listen_host == "0.0.0.0"
    cfg = BrokerConfig.from_properties({"brokerIP1": "127.0.0.2", "bindAddress": "127.0.0.1"})
    assert (cfg.listen_host, cfg.broker_addr) == ("127.0.0.1", "127.0.0.2:10911")
    for bad in ("localhost", "127.0.0.1:10911", "::1", "300.0.0.1"):
        with pytest.raises(ConfigError, match="bindAddress"):
            BrokerConfig.from_properties({"bindAddress": bad})
