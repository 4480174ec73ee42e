"""TransactionBook: which transactions are pending and how the others ended (pure).

A transaction starts as one half message in ``RMQ_SYS_TRANS_HALF_TOPIC``
queue 0; its queue offset there is the transaction's *origin*. Before each
check the check service puts a copy of the half message at the end of the
queue (so the queue's consume offset can move past the old one), so a
transaction may have several copies; the newest counts. An end (commit or
rollback) writes one op record to ``RMQ_SYS_TRANS_OP_HALF_TOPIC``.

The book covers the half queue from its consume offset (``half_offset``) on
and the op queue from its consume offset (``op_offset``) on; both offsets
persist as the consume offsets of group ``CID_RMQ_SYS_TRANS``, so the book
is rebuilt from the store at start (``load_op``, then ``load_half``) and
nothing else needs saving: every state change is a record in the commit log.

- ``pending``: origin -> newest copy, for transactions not ended with a copy
  at or past ``half_offset``;
- ``ended``: origin -> how it ended and its newest copy, for as long as its
  op record is at or past ``op_offset``;
- ``per_group``: producer group -> how many of ``pending`` are its (the
  bound ``transactionMaxPendingPerGroup`` is checked against it).

An op record is passed (``op_offset`` moves on, the entry is forgotten) once
every copy of its transaction is behind ``half_offset``: from then on an end
for any copy finds the transaction neither pending nor ended and changes
nothing, so a transaction is committed at most once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from broker.message_rewrite import EndState


@dataclass(slots=True)
class Ended:
    state: EndState
    last_copy: int  # the newest half-queue copy when it ended


class Verdict(Enum):
    APPLY = "apply"  # pending: write the end
    REPEATED = "repeated"  # already ended the same way: nothing to do
    CONFLICT = "conflict"  # already ended the other way: refused
    NOT_PENDING = "not pending"  # ended long ago or discarded: refused


class TransactionBook:
    def __init__(self, half_offset: int = 0, op_offset: int = 0) -> None:
        self.half_offset = half_offset
        self.op_offset = op_offset
        self.pending: dict[int, int] = {}
        self.ended: dict[int, Ended] = {}
        # op queue offset -> origin (None: not an op record), from op_offset on, in order
        self.ops: dict[int, int | None] = {}
        self._op_end = op_offset  # the op queue offset after the last one seen
        self.group_of: dict[int, str] = {}  # origin -> producer group, for pending ones
        self.per_group: dict[str, int] = {}

    # ---- rebuilding at start --------------------------------------------------------

    def load_op(self, op_offset: int, parsed: tuple[int, int, EndState] | None) -> None:
        """One op record read back (``parsed``: half offset, origin, state)."""
        if parsed is None:
            self._note_op(op_offset, None)
            return
        copy_offset, origin, state = parsed
        self.ended.setdefault(origin, Ended(state, copy_offset))
        self._note_op(op_offset, origin)

    def load_half(self, copy_offset: int, origin: int, group: str = "") -> None:
        """One half-queue copy read back (after every op record)."""
        self.half_stored(copy_offset, origin, group)

    # ---- changes ------------------------------------------------------------------

    def half_stored(self, copy_offset: int, origin: int, group: str = "") -> None:
        """A half message (or a copy of one) of ``group`` now sits at ``copy_offset``."""
        done = self.ended.get(origin)
        if done is not None:
            done.last_copy = max(done.last_copy, copy_offset)
        elif self.pending.get(origin, -1) < copy_offset:
            if origin not in self.pending:
                self._counted(origin, group)
            self.pending[origin] = copy_offset

    def pending_in(self, group: str) -> int:
        """How many transactions of ``group`` are pending."""
        return self.per_group.get(group, 0)

    def note_group(self, origin: int, group: str) -> None:
        """The group of a pending transaction first met without one."""
        if self.group_of.get(origin) == "" and group:
            self._forget_group(origin)
            self._counted(origin, group)

    def _counted(self, origin: int, group: str) -> None:
        self.group_of[origin] = group
        self.per_group[group] = self.per_group.get(group, 0) + 1

    def _forget(self, origin: int) -> int:
        """No longer pending: its newest copy (-1 if it was not pending)."""
        last = self.pending.pop(origin, -1)
        self._forget_group(origin)
        return last

    def _forget_group(self, origin: int) -> None:
        group = self.group_of.pop(origin, None)
        if group is not None:
            n = self.per_group.get(group, 0) - 1
            if n > 0:
                self.per_group[group] = n
            else:
                self.per_group.pop(group, None)

    def verdict(self, origin: int, state: EndState) -> Verdict:
        done = self.ended.get(origin)
        if done is not None:
            return Verdict.REPEATED if done.state is state else Verdict.CONFLICT
        return Verdict.APPLY if origin in self.pending else Verdict.NOT_PENDING

    def newest_copy(self, origin: int) -> int | None:
        return self.pending.get(origin)

    def end(self, origin: int, state: EndState, op_offset: int) -> None:
        """Its op record is stored at ``op_offset``."""
        last = self._forget(origin)
        self.ended[origin] = Ended(state, last)
        self._note_op(op_offset, origin)

    def discard(self, origin: int) -> None:
        """Checked too often: given up (the check service kept a copy for tools)."""
        self._forget(origin)

    def _note_op(self, op_offset: int, origin: int | None) -> None:
        if op_offset >= self.op_offset:
            self.ops[op_offset] = origin
            self._op_end = max(self._op_end, op_offset + 1)

    # ---- the check service's progress ------------------------------------------------------

    def should_skip(self, copy_offset: int, origin: int) -> bool:
        """Whether the check service passes this copy without a look: its
        transaction ended, or a newer copy of it exists (an older one is
        met again after a restart rewound the consume offset)."""
        if origin in self.ended:
            return True
        newest = self.pending.get(origin)
        if newest is None:
            self.half_stored(copy_offset, origin)
            return False
        return newest > copy_offset

    def advance(self, half_offset: int, prune: bool = True) -> None:
        """The check service moved past every copy before ``half_offset``;
        op records whose transactions are wholly behind it are passed. With
        ``prune`` (once per pass: it looks at every pending transaction),
        pending ones whose newest copy is behind it are dropped too (their
        copies were cleaned away or unreadable: nothing is left to check)."""
        if half_offset < self.half_offset or (half_offset == self.half_offset and not prune):
            return
        self.half_offset = half_offset
        if prune:
            for origin, newest in list(self.pending.items()):
                if newest < half_offset:
                    self._forget(origin)
        while self.op_offset < self._op_end:
            op_origin = self.ops.get(self.op_offset)
            if op_origin is not None:
                done = self.ended.get(op_origin)
                if done is not None and done.last_copy >= half_offset:
                    break
                self.ended.pop(op_origin, None)
            self.ops.pop(self.op_offset, None)
            self.op_offset += 1

    def stats(self) -> dict[str, int]:
        return {"pending": len(self.pending), "ended": len(self.ended),
                "half_offset": self.half_offset, "op_offset": self.op_offset}
