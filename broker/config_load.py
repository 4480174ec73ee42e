"""One path from settings to the broker's effective config: load, overlay, validate.

``load_broker_config`` builds the config ``mqbroker`` runs with, and the one
``mqbroker -p`` prints, before anything starts. Later layers win:

1. defaults (``BrokerConfig()``);
2. the properties file (``-c``);
3. the command line: ``-o KEY=VALUE`` in order, then the flags that name a key
   (``--tls-mode``, ``-n``, ``--metrics-port``), as ``options``;
4. the environment: ``NAMESRV_ADDR``, only when no layer above set ``namesrvAddr``;
5. the runtime overlay, ``<storePathRootDir>/broker.conf.runtime`` (what
   UPDATE_BROKER_CONFIG wrote for a broker started without a config file),
   under the ``storePathRootDir`` the layers above give; only ``RUNTIME_KEYS``;
6. validation: ``BrokerConfig.validate`` (names, ranges, rules across keys),
   the delay levels, and the TLS contexts (certificates and keys read).

The file and the command line are applied, then checked as a whole (a rule
across keys sees their final values); ``NAMESRV_ADDR`` and the overlay are
checked as they are applied. An unknown key or a bad value is a ConfigError
naming the file or variable it came from. Nothing is logged here: the
broker logs what the overlay applied when it starts.

The runtime-change rules live here too (``check_runtime_changes``): the
overlay at start and UPDATE_BROKER_CONFIG (broker/service/config.py) apply
the same ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker.config import BrokerConfig
from protocol.config import ConfigError, parse_properties, runtime_changes
from protocol.namesrv_addr import NAMESRV_ADDR_ENV
from protocol.trio.tls import TlsConfigError

RUNTIME_FILE = "broker.conf.runtime"

# RocketMQ key -> what re-reads it (every key here is read from the config at each use)
RUNTIME_KEYS: dict[str, str] = {
    "brokerPermission": "each send and pull (send_processor, pull_processor)",
    "autoCreateTopicEnable": "each send to an unknown topic",
    "autoCreateSubscriptionGroup": "each pull or heart-beat of an unknown group",
    "maxReconsumeTimes": "each subscription group created automatically",
    "maxMessageSize": "each send, and each put of the store (its StoreConfig is replaced)",
    "enablePropertyFilter": "each pull and CHECK_CLIENT_CONFIG of an SQL92 subscription",
    "longPollingEnable": "each pull that finds nothing",
    "longPollingMaxSuspendMillis": "each pull that finds nothing",
    "slaveReadEnable": "each pull's suggested broker",
    "accessMessageInMemoryMaxRatio": "each pull (cold-read test) and each offset query of a "
                                     "group with no offset (new-group start)",
    "rejectTransactionMessage": "each prepared send",
    "transactionTimeOut": "each transaction check",
    "transactionCheckMax": "each transaction check",
    "transactionMaxPendingPerGroup": "each prepared send",
    "fileReservedTime": "each clean-up run",
    "deleteWhen": "each clean-up run",
    "diskMaxUsedSpaceRatio": "each clean-up run",
    "recoverFromSlave": "each HA hello of a slave whose log is longer (a master's)",
    "haDiscardLog": "each refusal of the slave's log by its master (a slave's)",
    "haSlaveSilentMs": "each SYNC_MASTER send",
}

_POSITIVE = ("maxMessageSize", "longPollingMaxSuspendMillis", "fileReservedTime",
             "transactionTimeOut", "transactionCheckMax", "transactionMaxPendingPerGroup")

# reads a file's text; None when there is no such file (OSError for any other failure)
ReadText = Callable[[Path], str | None]


def render_properties(props: Mapping[str, str]) -> str:
    """Properties text, one ``key=value`` line per key, sorted (the overlay file)."""
    return "".join(f"{k}={v}\n" for k, v in sorted(props.items()))


def check_runtime_changes(config: BrokerConfig, props: Mapping[str, str]) -> dict[str, str]:
    """The changes under their RocketMQ names, checked on a copy of ``config``:
    ConfigError naming the first key that cannot change at run time or whose
    value is bad. Nothing is applied."""
    changes, trial = runtime_changes(config, props, RUNTIME_KEYS, "broker")
    for name in changes:
        value = getattr(trial, _attr(name))
        if name in _POSITIVE and value <= 0:
            raise ConfigError(f"{name} must be positive, not {value}")
    if not 10 <= trial.disk_max_used_space_ratio <= 95:
        raise ConfigError("diskMaxUsedSpaceRatio must be within 10..95")
    return {name: trial.to_properties()[name] for name in changes}


def _attr(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def runtime_path(config: BrokerConfig) -> Path:
    """Where UPDATE_BROKER_CONFIG keeps its changes for a broker without a config file."""
    return config.store_path(RUNTIME_FILE)


def read_text(path: Path) -> str | None:
    """``path``'s text, or None when there is no such file."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class LoadedConfig:
    """The effective config and where it came from."""

    config: BrokerConfig
    # the properties file the broker was started from (-c): UPDATE_BROKER_CONFIG
    # rewrites its keys there; None: they go to the overlay file
    config_file: Path | None = None
    # what the runtime overlay applied (RocketMQ key -> value), empty without one
    overlay: dict[str, str] = field(default_factory=dict)

    @property
    def overlay_path(self) -> Path:
        return runtime_path(self.config)

    @classmethod
    def of(cls, config: BrokerConfig) -> LoadedConfig:
        """A config built in process (tests, tools): no file, no overlay read."""
        return cls(config)


def load_broker_config(config_file: str | Path | None = None,
                       options: Mapping[str, str] | None = None,
                       env: Mapping[str, str] | None = None, *,
                       read: ReadText = read_text, check_tls: bool = True) -> LoadedConfig:
    """The effective config (module docstring: the layers, later ones win) and
    what the runtime overlay applied. ConfigError (one line, naming the file,
    option or variable) when any layer or the result is not valid.

    ``read`` reads the config file and the overlay (tests pass a dict's
    lookup); ``check_tls=False`` skips reading certificates."""
    config = BrokerConfig()
    path = Path(config_file) if config_file is not None else None
    if path is not None:
        try:
            text = read(path)
        except OSError as exc:
            raise ConfigError(f"{path}: {exc.strerror or exc}") from exc
        if text is None:
            raise ConfigError(f"{path}: no such file")
        _layer(config, parse_properties(text, f"{path}:"), f"{path}: ")
    _layer(config, options or {}, "")
    config.validate()  # the file and the command line, as a whole
    from_env = (env or {}).get(NAMESRV_ADDR_ENV, "").strip()
    if not config.namesrv_addr and from_env:
        _layer(config, {"namesrvAddr": from_env}, f"{NAMESRV_ADDR_ENV}: ", validate=True)
    overlay = _apply_overlay(config, read)
    _check_resources(config, check_tls)
    return LoadedConfig(config, path, overlay)


def _layer(config: BrokerConfig, props: Mapping[str, str], where: str,
           validate: bool = False) -> None:
    try:
        config.update(props, validate=validate)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc}") from None


def _apply_overlay(config: BrokerConfig, read: ReadText) -> dict[str, str]:
    path = runtime_path(config)
    try:
        text = read(path)
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from exc
    if text is None:
        return {}
    try:
        props = check_runtime_changes(config, parse_properties(text))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    config.update(props)
    return props


def _check_resources(config: BrokerConfig, check_tls: bool) -> None:
    """What validation reads beyond the keys: a missing or bad certificate is one
    line before anything starts."""
    if not check_tls:
        return
    try:
        config.server_tls().context()
        client_tls = config.client_tls()
        if client_tls is not None:
            client_tls.context()
    except TlsConfigError as exc:
        raise ConfigError(str(exc)) from exc


__all__ = [
    "RUNTIME_FILE",
    "RUNTIME_KEYS",
    "LoadedConfig",
    "check_runtime_changes",
    "load_broker_config",
    "read_text",
    "render_properties",
    "runtime_path",
]
