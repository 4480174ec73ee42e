"""ConsumerFilterManager: how a pull filters, and the compiled SQL92
subscriptions (RocketMQ's ConsumerFilterManager and ExpressionMessageFilter).

A TAG subscription filters by the consume queue's tags hash only. An SQL92
subscription (``expressionType=SQL92``, with ``enablePropertyFilter=true``)
filters each record by its properties: the broker reads a record from the
commit log only when its entry passes the hash check the expression implies
(``TAGS = 'x'`` / ``TAGS IN (...)`` in its top AND/OR structure; none
otherwise), then evaluates the expression on the record's properties.

Expressions are compiled once per subscription: the manager keeps, per
(group, topic), the last expression text and version a pull or heart-beat
carried and its compiled filter (or its parse error); a new version with the
same text keeps the compiled filter, a different text is compiled anew. The
table is bounded in entries and in weight (text plus compiled nodes), the
least recently used going first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from broker.store.message_store import MAX_FILTER_SCAN, RecordFilter
from protocol.filter import tag_codes
from protocol.filter_sql import SqlFilter, SqlParseError, compile_sql
from protocol.record import Buffer, record_properties

DEFAULT_MAX_ENTRIES = 16_384
DEFAULT_MAX_WEIGHT = 32 * 1024 * 1024  # ~ bytes held: texts and compiled nodes
NODE_WEIGHT = 256  # bytes a compiled node holds, roughly
# Closure calls one filtered pull may spend on evaluation: a pull of a large
# expression looks at fewer entries (at least MIN_FILTER_SCAN), so a pull
# costs about the same event-loop time whatever the expression.
FILTER_WORK_PER_PULL = 12_800
MIN_FILTER_SCAN = 16


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """What a pull filters with: the consume-queue tags hashes (None: any) and,
    for SQL92, the check of each record (None: none) and how many entries a
    pull may look at."""

    tag_codes: set[int] | None = None
    record_filter: RecordFilter | None = None
    max_scan: int = MAX_FILTER_SCAN


def tag_filter(tags: frozenset[str] | None) -> MessageFilter:
    return MessageFilter(tag_codes(tags))


def sql_filter(compiled: SqlFilter) -> MessageFilter:
    """A pull's filter for a compiled SQL92 expression."""

    def matches(record: Buffer) -> bool:
        return compiled.matches_text(record_properties(record))

    scan = max(MIN_FILTER_SCAN, min(MAX_FILTER_SCAN,
                                    FILTER_WORK_PER_PULL // max(1, compiled.node_count)))
    return MessageFilter(tag_codes(compiled.tags), matches, scan)


@dataclass(slots=True)
class _Entry:
    version: int
    text: str
    compiled: SqlFilter | SqlParseError
    weight: int


class ConsumerFilterManager:
    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES,
                 max_weight: int = DEFAULT_MAX_WEIGHT) -> None:
        self.max_entries = max(1, max_entries)
        self.max_weight = max_weight
        self.table: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self.weight = 0
        self.compiled = 0  # expressions compiled (cache misses)

    def get(self, group: str, topic: str, text: str, version: int) -> SqlFilter:
        """The compiled ``text`` of the group's subscription to ``topic``.
        Raises SqlParseError (kept too: a bad expression is not parsed again
        until its text changes)."""
        key = (group, topic)
        entry = self.table.get(key)
        if entry is not None and entry.text == text:
            entry.version = max(entry.version, version)
            self.table.move_to_end(key)
        else:
            if entry is not None:
                self._drop(key)
            compiled: SqlFilter | SqlParseError
            try:
                compiled = compile_sql(text)
            except SqlParseError as exc:
                compiled = exc
            self.compiled += 1
            nodes = compiled.node_count if isinstance(compiled, SqlFilter) else 0
            entry = _Entry(version, text, compiled, len(text) + NODE_WEIGHT * nodes)
            self.table[key] = entry
            self.weight += entry.weight
            while len(self.table) > 1 and (len(self.table) > self.max_entries
                                           or self.weight > self.max_weight):
                self._drop(next(iter(self.table)))
        if isinstance(entry.compiled, SqlParseError):
            raise entry.compiled
        return entry.compiled

    def version(self, group: str, topic: str) -> int | None:
        """The newest version seen of the group's subscription to ``topic``."""
        entry = self.table.get((group, topic))
        return None if entry is None else entry.version

    def _drop(self, key: tuple[str, str]) -> None:
        entry = self.table.pop(key)
        self.weight -= entry.weight
