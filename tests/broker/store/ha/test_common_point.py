"""epochs.common_point: where a replica's log and a new master's part, from
tables of histories."""

from __future__ import annotations

import pytest

from broker.store.ha.epochs import Epoch, EpochHistory, common_point


def e(n: int, start: int, writer: str = "a") -> Epoch:
    return Epoch(n, start, f"t{n}{writer}", writer)


# (replica history, replica [min, end), master history, master [min, end), point or None)
CASES = [
    # an old master with a tail no one received; the new master began epoch 3 at 500
    ([e(1, 0), e(2, 300)], (0, 800), [e(1, 0), e(2, 300), e(3, 500, "b")], (0, 900), 500),
    # the same, the replica got less than the new master did: nothing to cut past its end
    ([e(1, 0), e(2, 300)], (0, 450), [e(1, 0), e(2, 300), e(3, 500, "b")], (0, 900), 450),
    # a replica longer than the master in the same epoch (MASTER_BEHIND)
    ([e(1, 0), e(2, 300)], (0, 800), [e(1, 0), e(2, 300)], (0, 600), 600),
    # both wrote their own epoch 3 after epoch 2: they part where epoch 2 ends first
    ([e(1, 0), e(2, 300), e(3, 700)], (0, 900), [e(1, 0), e(2, 300), e(3, 650, "b")],
     (0, 950), 650),
    # the replica's oldest epochs are gone with its files: aligned at the first both hold
    ([e(2, 300), e(4, 700)], (400, 900), [e(1, 0), e(2, 300), e(3, 600, "b")], (0, 950), 600),
    # they share nothing
    ([e(1, 0, "x")], (0, 500), [e(1, 0, "y")], (0, 500), None),
    # a replica of unknown lineage (no epochs) with bytes
    ([], (0, 500), [e(1, 0)], (0, 500), None),
    # the common point is below what the master still holds
    ([e(1, 0), e(2, 300, "x")], (0, 800), [e(1, 0), e(2, 300, "y")], (400, 900), None),
    # an empty replica: nothing to cut
    ([], (0, 0), [e(1, 0)], (0, 500), 0),
]


@pytest.mark.parametrize(("mine", "my_span", "theirs", "their_span", "point"), CASES)
def test_common_point(mine: list[Epoch], my_span: tuple[int, int], theirs: list[Epoch],
                      their_span: tuple[int, int], point: int | None) -> None:
    got = common_point(mine, *my_span, theirs, *their_span)
    assert got.offset == point
    assert (got.reason != "") == (point is None)


def test_the_history_cut_with_its_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h = EpochHistory(tmp_path)
    h.load()
    h.begin(0)
    second = h.begin(300)
    assert not h.truncate(301)
    assert h.truncate(300) and [x.start for x in h.entries] == [0]
    again = EpochHistory(tmp_path)
    again.load()
    assert again.entries == h.entries and second not in again.entries
