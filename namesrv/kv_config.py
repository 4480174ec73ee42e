"""KVConfigManager: the name server's key-value configuration (RocketMQ's).

Values grouped by namespace (``ORDER_TOPIC_CONFIG``, ``PROJECT_CONFIG``, ...),
set and read by admin tools and clients with PUT_KV_CONFIG, GET_KV_CONFIG,
DELETE_KV_CONFIG and GET_KVLIST_BY_NAMESPACE. Kept in memory; with a
``kvConfigPath`` the table is also written to that file (RocketMQ's
kvConfig.json, ``{"configTable": {namespace: {key: value}}}``) after every
change and read back at start.

A peer cannot make the table grow without bound: namespaces, keys and the
characters held are capped (``KVLimits``); a put past a cap is refused and
changes nothing. Names are checked by ``protocol.headers.kv_name_problem``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from protocol.headers import KV_VALUE_MAX_LENGTH, kv_name_problem
from protocol.names import shown
from protocol.trio.files import write_atomically

log = structlog.get_logger("namesrv.kv")


class KVLimitError(ValueError):
    """A put that would take the table past one of its limits."""


@dataclass(slots=True, frozen=True)
class KVLimits:
    max_namespaces: int = 1024
    max_keys_per_namespace: int = 65_536
    max_keys: int = 100_000
    # characters of every namespace, key and value held, together
    max_total_chars: int = 64 * 1024 * 1024
    max_value_length: int = KV_VALUE_MAX_LENGTH


class KVConfigManager:
    def __init__(self, path: str | os.PathLike[str] | None = None,
                 limits: KVLimits | None = None) -> None:
        self.path = Path(path) if path else None
        self.limits = limits or KVLimits()
        self.table: dict[str, dict[str, str]] = {}
        self.keys = 0
        self.chars = 0
        self.dirty = False

    # ---- reads -----------------------------------------------------------------

    def get(self, namespace: str, key: str) -> str | None:
        ns = self.table.get(namespace)
        return None if ns is None else ns.get(key)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of one namespace's keys and values; None if it has none."""
        ns = self.table.get(namespace)
        return None if ns is None else dict(ns)

    # ---- changes ---------------------------------------------------------------

    def put(self, namespace: str, key: str, value: str) -> None:
        """Set ``key`` of ``namespace``. Raises ValueError for a bad name or
        value, KVLimitError when a limit would be passed (nothing changes)."""
        for what, name in (("namespace", namespace), ("key", key)):
            problem = kv_name_problem(name)
            if problem is not None:
                raise ValueError(f"{what} {problem}")
        if not isinstance(value, str):
            raise ValueError("value must be a string")
        lim = self.limits
        if len(value) > lim.max_value_length:
            raise ValueError(f"value is longer than {lim.max_value_length} characters")
        ns = self.table.get(namespace)
        old = None if ns is None else ns.get(key)
        if ns is None and len(self.table) >= lim.max_namespaces:
            raise KVLimitError(f"the name server holds {len(self.table)} namespaces, "
                               f"at most {lim.max_namespaces}")
        if old is None:
            if ns is not None and len(ns) >= lim.max_keys_per_namespace:
                raise KVLimitError(f"namespace {shown(namespace)} holds {len(ns)} keys, at most "
                                   f"{lim.max_keys_per_namespace}")
            if self.keys >= lim.max_keys:
                raise KVLimitError(f"the name server holds {self.keys} keys, at most "
                                   f"{lim.max_keys}")
            grow = len(key) + len(value) + (len(namespace) if ns is None else 0)
        else:
            grow = len(value) - len(old)
        if self.chars + grow > lim.max_total_chars:
            raise KVLimitError(f"the KV config would hold more than {lim.max_total_chars} "
                               "characters")
        if ns is None:
            ns = self.table[namespace] = {}
            log.info("KV config namespace created", namespace=shown(namespace))
        if old is None:
            self.keys += 1
        ns[key] = value
        self.chars += grow
        self.dirty = True

    def delete(self, namespace: str, key: str) -> bool:
        """Remove ``key`` of ``namespace``; False if it was not there. A
        namespace left empty goes too."""
        ns = self.table.get(namespace)
        if ns is None or key not in ns:
            return False
        value = ns.pop(key)
        self.keys -= 1
        self.chars -= len(key) + len(value)
        if not ns:
            del self.table[namespace]
            self.chars -= len(namespace)
        self.dirty = True
        return True

    # ---- file ------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The table as RocketMQ's kvConfig.json."""
        return json.dumps({"configTable": self.table}, ensure_ascii=False, indent=4,
                          sort_keys=True).encode()

    def load(self) -> None:
        """Read the file, if there is one. An unreadable or invalid file is
        logged and left where it is (renamed ``.bad``): the name server starts
        with what it could read."""
        if self.path is None or not self.path.exists():
            return
        try:
            obj = json.loads(self.path.read_bytes())
            table = obj.get("configTable") if isinstance(obj, dict) else None
            if not isinstance(table, dict):
                raise ValueError("no configTable object")
        except (OSError, ValueError, RecursionError) as exc:
            log.error("KV config file unreadable, starting without it", path=str(self.path),
                      error=str(exc)[:200])
            self._set_aside()
            return
        skipped = 0
        for namespace, entries in table.items():
            if not isinstance(entries, dict):
                skipped += 1
                continue
            for key, value in entries.items():
                try:
                    self.put(namespace, key, value)
                except ValueError:  # KVLimitError included
                    skipped += 1
        self.dirty = False
        if skipped:
            log.warning("KV config entries skipped at load (bad names or values, or past "
                        "the limits)", path=str(self.path), skipped=skipped)
        log.info("KV config loaded", path=str(self.path), namespaces=len(self.table),
                 keys=self.keys)

    def _set_aside(self) -> None:
        assert self.path is not None
        try:
            os.replace(self.path, self.path.with_name(self.path.name + ".bad"))
        except OSError as exc:
            log.warning("could not set the unreadable KV config file aside",
                        path=str(self.path), error=str(exc))

    def take_snapshot(self) -> bytes | None:
        """The bytes to write when the table changed since the last call (and
        there is a file), else None."""
        if self.path is None or not self.dirty:
            return None
        self.dirty = False
        return self.snapshot()

    def write(self, data: bytes) -> None:
        """Write ``data`` to the file atomically: a temporary file, fsynced,
        renamed over it (a worker thread's job)."""
        assert self.path is not None
        write_atomically(self.path, data)



def kv_table_body(entries: dict[str, str]) -> dict[str, Any]:
    """GET_KVLIST_BY_NAMESPACE's body (RocketMQ's KVTable)."""
    return {"table": entries}
