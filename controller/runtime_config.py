"""UPDATE_CONTROLLER_CONFIG's changes, checked and made durable (issue 51).

A change is checked first (``check_changes``): only ``RUNTIME_KEYS``, each value
converted and the whole config validated on a copy; an unknown key, a key that
cannot change at run time, a secret or a bad value is a ConfigError naming it, and
nothing is applied. Then it is written where the controller's config comes from
(``write_changes``, in a worker thread, before the answer): the config file
``mqcontroller`` was started from (``-c``; the name server's for a controller inside
it), its lines for those keys rewritten in place, else the overlay
``<controllerStorePath>/controller.conf.runtime``, which ``mqcontroller`` started
without ``-c`` applies at start (``load_overlay``) as the broker applies its
``broker.conf.runtime``. A write is a temporary file, fsync'd, renamed over the
old one, the directory fsync'd: a crash leaves the old file or the new one whole.
"""

from __future__ import annotations

from pathlib import Path

from controller.config import RUNTIME_KEYS, ControllerConfig
from protocol.config import ConfigError, parse_properties, rewrite_properties, runtime_changes
from protocol.trio.files import write_atomically

RUNTIME_FILE = "controller.conf.runtime"


def overlay_path(config: ControllerConfig) -> Path:
    """Where a controller started without a config file keeps its run-time changes."""
    return Path(config.controller_store_path).expanduser() / RUNTIME_FILE


def check_changes(config: ControllerConfig, props: dict[str, str]) -> dict[str, str]:
    """The changes under their RocketMQ names and normalised values (as the config
    prints them), checked on a copy of ``config``. ConfigError: nothing applied."""
    changes, trial = runtime_changes(config, props, RUNTIME_KEYS, "controller")
    shown = trial.to_properties()
    return {name: shown[name] for name in changes}


def write_changes(path: Path, changes: dict[str, str]) -> None:
    """Set ``changes`` in the properties file ``path`` (created when missing), every
    other line kept. Worker thread; OSError when it cannot be written."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    write_atomically(path, rewrite_properties(text, changes))


def load_overlay(config: ControllerConfig, path: Path | None = None) -> dict[str, str]:
    """Apply the overlay file (``overlay_path`` unless ``path``) to ``config`` when
    there is one; returns what it applied. ConfigError naming the file when it cannot
    be read or holds a key that cannot change at run time, or a bad value (nothing
    applied then). At start, before the controller serves."""
    path = path if path is not None else overlay_path(config)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    props = parse_properties(text, f"{path}:")
    if not props:
        return {}
    try:
        changes = check_changes(config, props)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    config.update(changes)
    return changes
