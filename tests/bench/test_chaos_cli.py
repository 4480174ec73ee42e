"""python -m bench.chaos: its options are checked before anything starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bench.chaos.__main__ import DEFAULT_SCHEDULE, main
from bench.chaos.accounting import parse_schedule
from bench.chaos.group import CONTROLLER_ONLY, FAULTS


def test_default_schedule_parses_and_names_every_fault_but_the_wipe() -> None:
    steps = parse_schedule(DEFAULT_SCHEDULE, FAULTS, 10.0)
    assert {s.fault for s in steps} == set(FAULTS) - {"wipe-master"} - CONTROLLER_ONLY
    assert CONTROLLER_ONLY == {"kill-controller-leader"} and CONTROLLER_ONLY <= set(FAULTS)


@pytest.mark.parametrize("args, problem", [
    (["--schedule", "kill-everything"], "unknown fault"),
    (["--schedule", "kill-master:0"], "within"),
    (["-o", "novalue"], "KEY=VALUE"),
    (["--slaves", "3"], "3"),
    (["--calm", "-1"], "-1"),
    (["--schedule", "kill-controller-leader"], "needs --mode controller"),
    (["--mode", "controller", "--controllers", "2"], "needs --etcd"),
    (["--mode", "controller", "--etcd"], "--etcd needs mqcontroller processes"),
    (["--mode", "controller", "--heartbeat-ms", "50"], "50"),
])
def test_bad_options_refused_before_anything_starts(args: list[str], problem: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert problem in result.output
