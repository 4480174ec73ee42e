"""``mqbench transaction``: the check-phase bookkeeping without sockets, and
the command end to end against a real name server and broker."""

from __future__ import annotations

import re
from pathlib import Path

import trio
from click.testing import CliRunner

from bench.mqbench import (
    BenchTransactionListener,
    CheckSummary,
    CheckTimes,
    check_report,
    cli,
    report,
    summarize_checks,
)
from client import LocalTransactionState, Message, MessageExt
from protocol.message import MessageConst
from tests.integration.cluster import Cluster
from tests.integration.log_scan import LogWatch
from tests.integration.log_scan import report as traceback_report

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX


def half(uniq: str | None, msg_id: str = "") -> MessageExt:
    """A half message as a check carries it."""
    props = {UNIQ: uniq} if uniq is not None else {}
    return MessageExt("BenchTxTopic", b"x", props, msg_id=msg_id)


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# ---- pure parts -----------------------------------------------------------------------


def test_check_times_keeps_the_first_check_and_counts_unchecked() -> None:
    t = CheckTimes()
    t.ack("a", 1.0)
    t.ack("b", 2.0)
    assert t.unchecked() == 2
    assert t.check("a", 7.0)
    assert not t.check("a", 9.0)  # a repeat: ignored
    assert t.checked == {"a": 7.0}
    assert t.unchecked() == 1
    assert t.check("z", 8.0)  # a check of something never acknowledged is recorded
    assert t.unchecked() == 1
    assert t.check("b", 8.5)
    assert t.unchecked() == 0
    t.ack("z", 9.0)  # its check came first (a race the bench cannot rule out): not pending
    assert t.unchecked() == 0


def test_summarize_checks_pairs_by_key() -> None:
    acked = {"a": 10.0, "b": 11.0, "c": 12.0, "d": 13.0}
    checked = {"c": 20.0, "a": 16.5, "b": 30.0, "x": 1.0}  # x: never acknowledged here
    s = summarize_checks(acked, checked)
    assert s == CheckSummary(sent=4, delays=[6.5, 8.0, 19.0])
    assert (s.checked, s.missed) == (3, 1)


def test_summarize_checks_of_nothing() -> None:
    s = summarize_checks({}, {"x": 1.0})
    assert (s.sent, s.checked, s.missed, s.delays) == (0, 0, 0, [])


def test_check_report_gives_min_percentiles_max_and_missed() -> None:
    delays = [float(d) for d in range(6, 26)]  # 6 .. 25 s, 20 samples
    line = check_report(CheckSummary(sent=21, delays=delays), 61.25, 120)
    assert line == ("checks: 20/21 UNKNOW transactions checked (waited 61.2s of --check-wait "
                    "120s); UNKNOW to check min=6.000s p50=15.000s p90=23.000s max=25.000s; "
                    "1 not checked in time")


def test_check_report_when_nothing_was_checked() -> None:
    line = check_report(CheckSummary(sent=5), 30.0, 30)
    assert line == ("checks: 0/5 UNKNOW transactions checked (waited 30.0s of --check-wait "
                    "30s); 5 not checked in time")


def test_report_names_transactions() -> None:
    line = report("transaction", 2000, 2000 * 1024, 2.0, [0.001] * 10, noun="committed",
                  rate="tx/s", per="send_message_in_transaction")
    assert line.startswith("transaction: 2000 committed in 2.00s = 1,000 tx/s (1.0 MB/s); "
                           "latency per send_message_in_transaction p50=1.000ms")
    # the producer's line is unchanged
    assert report("produce", 10, 10, 1.0, [0.002]).startswith(
        "produce: 10 msgs in 1.00s = 10 msg/s (0.0 MB/s); latency per request p50=2.000ms")


# ---- the listener -----------------------------------------------------------------------


async def test_listener_executes_the_state_given_as_arg() -> None:
    listener = BenchTransactionListener(FakeClock())
    msg = Message("BenchTxTopic", b"x")
    assert listener.execute_local_transaction(msg, None) is COMMIT
    assert listener.execute_local_transaction(msg, UNKNOW) is UNKNOW
    assert listener.execute_local_transaction(msg, ROLLBACK) is ROLLBACK


async def test_listener_records_first_checks_and_says_when_all_are_checked() -> None:
    clock = FakeClock(100.0)
    listener = BenchTransactionListener(clock)
    listener.acked("a")
    clock.now = 101.0
    listener.acked("b")
    clock.now = 107.0
    assert listener.check_local_transaction(half("a")) is COMMIT
    clock.now = 108.0
    assert listener.check_local_transaction(half("a")) is COMMIT  # a repeat
    assert listener.check_local_transaction(half(None, msg_id="c")) is COMMIT  # by msg_id
    assert listener.times.checked == {"a": 107.0, "c": 108.0}
    clock.now = 110.0
    listener.check_local_transaction(half("b"))
    assert not listener.all_checked.is_set()  # still sending: more may be acknowledged
    listener.sending_done()
    assert listener.all_checked.is_set()
    assert summarize_checks(listener.times.acked, listener.times.checked).delays == [7.0, 9.0]


async def test_listener_sets_all_checked_on_the_last_check() -> None:
    listener = BenchTransactionListener(FakeClock())
    listener.acked("a")
    listener.sending_done()
    assert not listener.all_checked.is_set()
    listener.check_local_transaction(half("a"))
    assert listener.all_checked.is_set()


async def test_listener_with_no_unknow_transactions_is_done_at_once() -> None:
    listener = BenchTransactionListener(FakeClock())
    listener.sending_done()
    with trio.fail_after(1):
        await listener.all_checked.wait()


# ---- end to end -------------------------------------------------------------------------


def test_transaction_command_against_a_broker(tmp_path: Path) -> None:
    """200 committed transactions, then 5 UNKNOW ones the broker checks (a half
    message is checked 1 s after its birth, passes every 0.3 s)."""
    c = Cluster(tmp_path)
    try:
        ns = c.namesrv()
        c.broker("broker-a", ns.addr, transactionCheckInterval=300, transactionTimeOut=1000)
        result = CliRunner().invoke(cli, [
            "transaction", "-n", ns.addr, "-t", "BenchTxTopic", "-s", "256", "-c", "200",
            "-w", "8", "--checks", "5", "--check-wait", "30"])
    finally:
        c.close()
    assert result.exit_code == 0, (result.output, result.exception)
    assert re.search(r"^transaction: 200 committed in .* tx/s .*latency per "
                     r"send_message_in_transaction p50=", result.output, re.M), result.output
    assert "rolled back" not in result.output
    assert re.search(r"^checks: 5/5 UNKNOW transactions checked .*; 0 not checked in time$",
                     result.output, re.M), result.output
    names = {d.log_path: d.name for d in c.daemons}
    found = LogWatch().new_tracebacks(names)
    assert not found, traceback_report(found, names)
