"""The name-server list: splitting, NAMESRV_ADDR, and which one a client asks."""

from __future__ import annotations

from collections import Counter

import pytest

from protocol.namesrv_addr import (
    NamesrvSelector,
    NoNamesrvAnswered,
    ask_in_turn,
    namesrv_addr_from_env,
    resolve_namesrv_addr,
    split_namesrv_addr,
)

ADDRS = ["a:1", "b:2", "c:3"]


def test_split() -> None:
    assert split_namesrv_addr(" a:1 ; b:2;") == ["a:1", "b:2"]
    assert split_namesrv_addr("a:1,b:2;;c:3") == ADDRS
    assert split_namesrv_addr(" ; ") == []


def test_env_and_precedence() -> None:
    env = {"NAMESRV_ADDR": " a:1;b:2 "}
    assert namesrv_addr_from_env(env) == "a:1;b:2"
    assert namesrv_addr_from_env({}) is None
    assert namesrv_addr_from_env({"NAMESRV_ADDR": "  "}) is None
    assert resolve_namesrv_addr("x:9", "d:9", env) == "x:9"  # explicit wins
    assert resolve_namesrv_addr(None, "d:9", env) == "a:1;b:2"
    assert resolve_namesrv_addr(None, "d:9", {}) == "d:9"
    assert resolve_namesrv_addr(None, None, {}) is None


def test_sticks_with_the_one_that_answers_and_rotates_past_failures() -> None:
    s = NamesrvSelector(ADDRS, start=1)
    assert s.current == "b:2" and s.candidates() == ["b:2", "c:3", "a:1"]
    assert not s.answered("b:2")  # kept: no change
    # b fails, c answers: c is kept for every later request
    assert s.answered("c:3")
    assert s.candidates() == ["c:3", "a:1", "b:2"]
    # none answers: the next round starts one further on
    s.none_answered()
    assert s.current == "a:1"
    with pytest.raises(ValueError):
        NamesrvSelector([])


def test_random_start_spreads_clients_over_the_list() -> None:
    starts = Counter(NamesrvSelector(ADDRS).current for _ in range(600))
    assert set(starts) == set(ADDRS)
    assert min(starts.values()) > 100  # each about 200


async def test_ask_in_turn() -> None:
    dead = {"a:1", "b:2"}
    asked: list[str] = []

    async def ask(addr: str) -> str:
        asked.append(addr)
        if addr in dead:
            raise ConnectionError(f"{addr} refused")
        return f"answer from {addr}"

    s = NamesrvSelector(ADDRS, start=0)
    assert await ask_in_turn(s, ask, ConnectionError) == ("c:3", "answer from c:3")
    assert asked == ["a:1", "b:2", "c:3"] and s.current == "c:3"
    asked.clear()
    await ask_in_turn(s, ask, ConnectionError)
    assert asked == ["c:3"]  # kept
    dead.add("c:3")
    with pytest.raises(NoNamesrvAnswered) as info:
        await ask_in_turn(s, ask, ConnectionError)
    assert info.value.errors == ["c:3: c:3 refused", "a:1: a:1 refused", "b:2: b:2 refused"]
    assert s.current == "a:1"  # the next call starts one further on
    with pytest.raises(KeyError):  # anything else is not a name server's failure
        await ask_in_turn(s, lambda addr: _raise(KeyError(addr)), ConnectionError)


async def _raise(exc: Exception) -> str:
    raise exc
