"""A send's timer: the TIMER_* properties, validated, into a due time (pure).

Inputs, as RocketMQ 5's: ``TIMER_DELIVER_MS`` (absolute, ms since the epoch),
``TIMER_DELAY_SEC`` and ``TIMER_DELAY_MS`` (relative to the broker's clock
when the send arrives). At most one of them; a message with a ``DELAY`` level
and a timer is refused (the two would disagree on when it is due). Values
are decimal ASCII integers of at most 19 digits; anything else, a negative
value, a due time past ``max_delay_ms`` from now or past 64 bits is refused
with a ``TimerRefusal`` saying what is wrong. A due time already past means
"deliver now": the send is stored as an ordinary message.
"""

from __future__ import annotations

from collections.abc import Mapping

from protocol.message import TIMER_INPUTS, MessageConst
from protocol.names import shown

DELIVER_MS = MessageConst.PROPERTY_TIMER_DELIVER_MS
DELAY_SEC = MessageConst.PROPERTY_TIMER_DELAY_SEC
DELAY_MS = MessageConst.PROPERTY_TIMER_DELAY_MS
OUT_MS = MessageConst.PROPERTY_TIMER_OUT_MS
DEL_UNIQKEY = MessageConst.PROPERTY_TIMER_DEL_UNIQKEY
INPUTS = TIMER_INPUTS
# what a delivered message no longer carries (OUT_MS stays: when it was due)
CLEANED = (*INPUTS, DEL_UNIQKEY)
# a single send's property text holds one of these exactly when it has a timer input
PROBE = "TIMER_DEL"
INT64_MAX = 2**63 - 1


class TimerRefusal(ValueError):
    """A send's timer properties cannot be honoured; the text says why."""


def has_timer(props: Mapping[str, str]) -> bool:
    return any(name in props for name in INPUTS)


def _number(name: str, raw: str) -> int:
    if not (raw.isascii() and raw.isdigit() and 0 < len(raw) <= 19):
        raise TimerRefusal(f"{name} {shown(raw)} is not a non-negative integer")
    value = int(raw)
    if value > INT64_MAX:
        raise TimerRefusal(f"{name} {shown(raw)} does not fit 64 bits")
    return value


def due_ms(props: Mapping[str, str], now_ms: int, max_delay_ms: int) -> int | None:
    """The due time (ms since the epoch) of a send with these properties, or
    None when it has no timer. Raises TimerRefusal for a bad or too late one.
    A result not later than ``now_ms`` is due at once."""
    given = [name for name in INPUTS if name in props]
    if not given:
        return None
    if len(given) > 1:
        raise TimerRefusal(f"give one of {', '.join(INPUTS)}, not {' and '.join(given)}")
    level = props.get(MessageConst.PROPERTY_DELAY_TIME_LEVEL, "0")
    if level not in ("", "0"):
        raise TimerRefusal("a message has a delay level or a timer, not both")
    name = given[0]
    value = _number(name, props[name])
    if name == DELIVER_MS:
        due = value
    elif name == DELAY_SEC:
        if value > max_delay_ms // 1000 + 1:
            raise TimerRefusal(f"{name} {value} is later than the broker's timerMaxDelaySec "
                               f"({max_delay_ms // 1000})")
        due = now_ms + value * 1000
    else:
        if value > max_delay_ms + 1000:
            raise TimerRefusal(f"{name} {value} is later than the broker's timerMaxDelaySec "
                               f"({max_delay_ms // 1000})")
        due = now_ms + value
    if due - now_ms > max_delay_ms:
        raise TimerRefusal(f"{name}: the delivery time is {due - now_ms} ms away, later than "
                           f"the broker's timerMaxDelaySec ({max_delay_ms // 1000})")
    return due


__all__ = ["CLEANED", "DEL_UNIQKEY", "DELAY_MS", "DELAY_SEC", "DELIVER_MS", "INPUTS", "OUT_MS",
           "PROBE", "TimerRefusal", "due_ms", "has_timer"]
