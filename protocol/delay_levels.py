"""Delay levels (``messageDelayLevel``): the table the broker's schedule service
uses, and the rule that turns a delivery time into a level, shared by the broker
(gRPC sends with a ``delivery_timestamp``) and the client (the Spark sink's
``deliverTimeMs``). Pure: time is passed in."""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> dict[int, int]:
    """Delay level (1-based) -> milliseconds, from a ``messageDelayLevel`` text
    such as ``"1s 5s 10s"``. Raises ValueError naming an entry that is not a
    number with s/m/h/d."""
    table = {}
    for level, item in enumerate(text.split(), 1):
        unit = _UNITS.get(item[-1:])
        if unit is None or not item[:-1].isdigit():
            raise ValueError(f"bad messageDelayLevel entry {item!r}")
        table[level] = int(item[:-1]) * unit
    return table


def delay_level(deliver_at_ms: int, now_ms: int, levels: Mapping[int, int]) -> int:
    """The smallest delay level not earlier than ``deliver_at_ms`` (0: due already;
    the last level when later than all)."""
    wait = deliver_at_ms - now_ms
    if wait <= 0 or not levels:
        return 0
    for level in sorted(levels):
        if levels[level] >= wait:
            return level
    return max(levels)


__all__ = ["DEFAULT_MESSAGE_DELAY_LEVEL", "delay_level", "parse_delay_levels"]
