"""One config path (broker/config_load.py): defaults -> file -> command line ->
NAMESRV_ADDR -> runtime overlay -> validation, before anything starts; ``mqbroker -p``
prints the config that would run; the broker takes the loaded config and reads no
overlay itself; a runtime change reaches the store's StoreConfig."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner

from broker.cli import main as mqbroker
from broker.config import BrokerConfig
from broker.config_load import (
    RUNTIME_FILE,
    RUNTIME_KEYS,
    LoadedConfig,
    check_runtime_changes,
    load_broker_config,
    render_properties,
)
from broker.controller import BrokerController
from broker.store import PutMessageStatus, StoreConfig
from protocol.config import ConfigError, parse_properties
from tests.broker.store.helpers import inner

ROOT = Path("/stores/a")


def files(texts: dict[str, str]) -> dict[Path, str]:
    return {Path(k): v for k, v in texts.items()}


def load(texts: dict[str, str], options: dict[str, str] | None = None,
         env: dict[str, str] | None = None, config_file: str | None = "/etc/broker.conf"
         ) -> LoadedConfig:
    """load_broker_config over made-up files (no disk, no certificates)."""
    known = files(texts)
    return load_broker_config(config_file, options, env, read=known.get, check_tls=False)


# ---- precedence, as a pure function ---------------------------------------------------


@pytest.mark.parametrize(("file", "options", "env", "overlay", "expected"), [
    # each layer over the ones before it
    ("", {}, {}, None, 4 * 1024 * 1024),
    ("maxMessageSize=1000\n", {}, {}, None, 1000),
    ("maxMessageSize=1000\n", {"maxMessageSize": "2000"}, {}, None, 2000),
    ("maxMessageSize=1000\n", {"maxMessageSize": "2000"}, {}, "maxMessageSize=3000\n", 3000),
    ("maxMessageSize=1000\n", {}, {}, "maxMessageSize=3000\n", 3000),
    ("", {}, {}, "maxMessageSize=3000\n", 3000),
])
def test_later_layers_win(file: str, options: dict[str, str], env: dict[str, str],
                          overlay: str | None, expected: int) -> None:
    texts = {"/etc/broker.conf": f"storePathRootDir={ROOT}\n{file}"}
    if overlay is not None:
        texts[f"{ROOT}/{RUNTIME_FILE}"] = overlay
    loaded = load(texts, options, env)
    assert loaded.config.max_message_size == expected
    assert loaded.overlay == ({} if overlay is None else parse_properties(overlay))
    assert loaded.config_file == Path("/etc/broker.conf")


@pytest.mark.parametrize(("file", "options", "env", "expected"), [
    ("", {}, {}, ""),
    ("", {}, {"NAMESRV_ADDR": "e1:9876;e2:9876"}, "e1:9876;e2:9876"),
    ("namesrvAddr=f1:9876\n", {}, {"NAMESRV_ADDR": "e1:9876"}, "f1:9876"),
    ("namesrvAddr=f1:9876\n", {"namesrvAddr": "o1:9876"}, {"NAMESRV_ADDR": "e1:9876"},
     "o1:9876"),
    ("", {"namesrvAddr": "o1:9876"}, {"NAMESRV_ADDR": "e1:9876"}, "o1:9876"),
    # a blank variable is no variable
    ("", {}, {"NAMESRV_ADDR": "  "}, ""),
])
def test_the_environment_only_fills_what_no_layer_set(
        file: str, options: dict[str, str], env: dict[str, str], expected: str) -> None:
    loaded = load({"/etc/broker.conf": f"storePathRootDir={ROOT}\n{file}"}, options, env)
    assert loaded.config.namesrv_addr == expected


def test_the_overlay_is_read_under_the_resulting_store_root() -> None:
    texts = {"/etc/broker.conf": "storePathRootDir=/stores/file\n",
             f"/stores/file/{RUNTIME_FILE}": "fileReservedTime=1\n",
             f"/stores/option/{RUNTIME_FILE}": "fileReservedTime=2\n"}
    assert load(texts).config.file_reserved_time == 1
    loaded = load(texts, {"storePathRootDir": "/stores/option"})
    assert loaded.config.file_reserved_time == 2
    assert loaded.overlay_path == Path(f"/stores/option/{RUNTIME_FILE}")


def test_file_and_command_line_are_validated_as_a_whole() -> None:
    # a slave's brokerId from the command line completes the file's role
    conf = {"/etc/broker.conf": f"storePathRootDir={ROOT}\nbrokerRole=SLAVE\n"}
    config = load(conf, {"brokerId": "1"}).config
    assert (config.broker_role.value, config.broker_id) == ("SLAVE", 1)
    with pytest.raises(ConfigError, match="brokerRole SLAVE needs a brokerId > 0"):
        load(conf)


@pytest.mark.parametrize(("texts", "options", "env", "message"), [
    ({"/etc/broker.conf": "storePathIndx=/x\n"}, {}, {},
     "/etc/broker.conf: unknown config key: storePathIndx (did you mean storePathIndex?)"),
    ({"/etc/broker.conf": "listenPort=ten\n"}, {}, {},
     "/etc/broker.conf: bad value for listenPort: 'ten'"),
    ({}, {}, {}, "/etc/broker.conf: no such file"),
    ({"/etc/broker.conf": ""}, {"nope": "1"}, {}, "unknown config key: nope"),
    ({"/etc/broker.conf": ""}, {}, {"NAMESRV_ADDR": "nonsense"}, "NAMESRV_ADDR: namesrvAddr: "),
    # rules across keys
    ({"/etc/broker.conf": "maxMessageSize=20000000\n"}, {}, {},
     "maxMessageSize must not exceed maxFrameSize (16777216)"),
    ({"/etc/broker.conf": "maxFrameSize=1000\n"}, {"maxMessageSize": "2000"}, {},
     "maxMessageSize must not exceed maxFrameSize (1000)"),
    ({"/etc/broker.conf": "brokerPermission=16\n"}, {}, {}, "brokerPermission must be within"),
    ({"/etc/broker.conf": "messageDelayLevel=1s 2x\n"}, {}, {}, "bad messageDelayLevel entry"),
])
def test_errors_name_where_they_come_from(texts: dict[str, str], options: dict[str, str],
                                          env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load(texts, options, env)
    assert str(exc.value).startswith(message), str(exc.value)


@pytest.mark.parametrize(("overlay", "message"), [
    ("brokerName=x\n", "'brokerName' cannot change at run time"),
    ("maxMessageSize=-1\n", "maxMessageSize must be positive"),
    ("maxMessageSize=big\n", "bad value for maxMessageSize"),
    ("brokerSecretKey=x\n", "'brokerSecretKey' holds a secret"),
    ("diskMaxUsedSpaceRatio=99\n", "diskMaxUsedSpaceRatio must be within 10..95"),
])
def test_a_bad_overlay_is_one_error_naming_the_file(overlay: str, message: str) -> None:
    texts = {"/etc/broker.conf": f"storePathRootDir={ROOT}\n",
             f"{ROOT}/{RUNTIME_FILE}": overlay}
    with pytest.raises(ConfigError) as exc:
        load(texts)
    text = str(exc.value)
    assert text.startswith(f"{ROOT}/{RUNTIME_FILE}: ") and message in text
    assert "\n" not in text


def test_overlay_changes_are_checked_as_update_broker_config_checks_them() -> None:
    config = BrokerConfig()
    assert check_runtime_changes(config, {"maxmessagesize": "1024"}) == {"maxMessageSize": "1024"}
    assert config.max_message_size == 4 * 1024 * 1024  # nothing applied
    assert render_properties({"b": "2", "a": "1"}) == "a=1\nb=2\n"


# ---- mqbroker -p and mqbroker ---------------------------------------------------------


@pytest.fixture
def no_namesrv_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    yield


def printed(output: str) -> dict[str, str]:
    return parse_properties("\n".join(ln for ln in output.splitlines() if not ln.startswith("#")))


def test_print_config_shows_the_overlay(tmp_path: Path, no_namesrv_env: None) -> None:
    store = tmp_path / "store"
    store.mkdir()
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={store}\nmaxMessageSize=1000\nfileReservedTime=48\n")
    (store / RUNTIME_FILE).write_text("maxMessageSize=3000\n")
    result = CliRunner().invoke(mqbroker, ["-c", str(conf), "-o", "fileReservedTime=24", "-p"])
    assert result.exit_code == 0, result.output
    shown = printed(result.output)
    assert (shown["maxMessageSize"], shown["fileReservedTime"]) == ("3000", "24")
    # exactly the config that runs: what load_broker_config gives the broker
    loaded = load_broker_config(conf, {"fileReservedTime": "24"}, {})
    assert result.output == loaded.config.render() + "\n"


def test_a_bad_overlay_stops_mqbroker_before_it_starts(tmp_path: Path,
                                                       no_namesrv_env: None) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / RUNTIME_FILE).write_text("brokerName=other\n")
    for args in (["-p"], ["--log-dir", str(tmp_path / "logs")]):
        result = CliRunner().invoke(mqbroker, ["-o", f"storePathRootDir={store}",
                                               "-o", "listenPort=0", *args])
        assert result.exit_code == 2, result.output
        [error] = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
        assert error.startswith(f"Error: {store / RUNTIME_FILE}: 'brokerName' cannot change "
                                "at run time (keys that can: ")
        assert "Traceback" not in result.output
    # nothing started: no logs, no store files beside the overlay
    assert sorted(p.name for p in store.iterdir()) == [RUNTIME_FILE]
    assert not (tmp_path / "logs").exists()


# ---- the broker takes the loaded config -----------------------------------------------


def broker_config(root: Path, **fields: object) -> BrokerConfig:
    return BrokerConfig(store_path_root_dir=str(root), listen_port=0,
                        maped_file_size_commit_log=1 << 16, maped_file_size_consume_queue=200,
                        max_hash_slot_num=64, max_index_num=256, **fields)  # type: ignore[arg-type]


def test_the_broker_reads_no_overlay_itself(tmp_path: Path) -> None:
    (tmp_path / RUNTIME_FILE).write_text("maxMessageSize=3000\n")
    c = BrokerController(broker_config(tmp_path))
    assert c.config.max_message_size == 4 * 1024 * 1024 and c.config_service.overlay == {}
    assert c.message_store.config.max_message_size == 4 * 1024 * 1024
    loaded = load_broker_config(None, broker_config(tmp_path).to_properties(), {})
    c = BrokerController(loaded)
    assert c.config is loaded.config and c.config.max_message_size == 3000
    assert c.message_store.config.max_message_size == 3000
    assert c.config_service.overlay == {"maxMessageSize": "3000"}


def test_a_runtime_change_reaches_the_store(tmp_path: Path) -> None:
    c = BrokerController(broker_config(tmp_path, max_message_size=1000))
    c._load()
    try:
        store = c.message_store
        big = inner("T", 0, b"x" * 2000)
        assert store.put_message(big).put_message_status is PutMessageStatus.MESSAGE_ILLEGAL
        trio.run(c.apply_runtime_config, {"maxMessageSize": "4000", "fileReservedTime": "1",
                                          "diskMaxUsedSpaceRatio": "50"})
        assert store.put_message(big).put_message_status is PutMessageStatus.PUT_OK
        assert (store.config.max_message_size, store.config.file_reserved_time,
                store.config.disk_max_used_space_ratio) == (4000, 1, 50)
        # kept in the overlay, which the next load applies
        assert load_broker_config(None, {"storePathRootDir": str(tmp_path)}, {}).overlay == {
            "maxMessageSize": "4000", "fileReservedTime": "1", "diskMaxUsedSpaceRatio": "50"}
    finally:
        c._persist_and_close()


def test_an_unreadable_overlay_is_one_error(tmp_path: Path) -> None:
    (tmp_path / RUNTIME_FILE).mkdir()  # not a file
    with pytest.raises(ConfigError, match=f"^{tmp_path / RUNTIME_FILE}: Is a directory$"):
        load_broker_config(None, {"storePathRootDir": str(tmp_path)}, {})


def test_every_runtime_key_the_store_reads_is_live_in_the_store() -> None:
    """A runtime key the store reads must be a StoreConfig field reconfigure takes."""
    store_fields = {f.name for f in dataclasses.fields(StoreConfig)}
    read_by_store = {key for key in RUNTIME_KEYS
                     if re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower() in store_fields}
    assert read_by_store == {"maxMessageSize", "accessMessageInMemoryMaxRatio",
                             "fileReservedTime", "deleteWhen", "diskMaxUsedSpaceRatio"}
    assert {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower() for k in read_by_store} \
        <= StoreConfig.LIVE_FIELDS
