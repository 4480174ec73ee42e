"""BrokerStats windows on a manual clock, and the latency histogram."""

from __future__ import annotations

import pytest

from broker.stats import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStats,
    LatencyHistogram,
)


def test_counters_are_running_sums() -> None:
    s = BrokerStats("b", 0.0)
    s.record_put("T", 32, 32 * 1100)
    s.record_put("T", 1, 1100)
    s.record_get("T", "g", 10, 11000)
    assert s.put["T"][:3] == [33, 33 * 1100, 2]
    assert s.put_total[:3] == [33, 33 * 1100, 2]
    assert s.get[("T", "g")][:3] == [10, 11000, 1]
    assert s.get_total[:3] == [10, 11000, 1]


def test_minute_window_sum_tps_avgpt() -> None:
    s = BrokerStats("b", 0.0)
    now = 0.0
    for _ in range(12):  # two minutes of 10 s ticks, 2 puts of 5 messages each per tick
        s.record_put("T", 5, 500)
        s.record_put("T", 5, 500)
        now += 10
        s.tick(now)
    w = s.stats(TOPIC_PUT_NUMS, "T")
    assert w is not None
    assert w["statsMinute"].sum == 60  # six ticks of 10 messages
    assert w["statsMinute"].tps == pytest.approx(1.0)
    assert w["statsMinute"].avgpt == pytest.approx(5.0)  # messages per request
    size = s.stats(TOPIC_PUT_SIZE, "T")
    assert size is not None and size["statsMinute"].avgpt == pytest.approx(500.0)
    # the hour window has only two minute ticks yet (0 and 60, 120): whole history
    assert w["statsHour"].sum == 120
    assert s.stats(BROKER_PUT_NUMS, "b")["statsMinute"].sum == 60  # type: ignore[index]


def test_idle_key_window_goes_to_zero_and_keeps_few_samples() -> None:
    s = BrokerStats("b", 0.0)
    s.record_get("%RETRY%g", "g", 3, 300)
    now = 0.0
    for _ in range(400):  # more than an hour
        now += 10
        s.tick(now)
    w = s.stats(GROUP_GET_NUMS, "%RETRY%g@g")
    assert w is not None
    assert w["statsMinute"].sum == 0 and w["statsMinute"].tps == 0
    assert w["statsHour"].sum == 0
    assert w["statsDay"].sum == 3
    assert s.stats(GROUP_GET_SIZE, "%RETRY%g@g")["statsDay"].sum == 300  # type: ignore[index]
    assert len(s._samples[("get", ("%RETRY%g", "g"))]) <= 2


def test_busy_key_samples_stay_bounded_and_windows_exact() -> None:
    s = BrokerStats("b", 0.0)
    now = 0.0
    for _ in range(3 * 360):  # three hours, a put each tick
        s.record_put("T", 1, 10)
        now += 10
        s.tick(now)
    assert len(s._samples[("put", "T")]) < 250
    w = s.stats(TOPIC_PUT_NUMS, "T")
    assert w is not None
    assert w["statsMinute"].sum == 6
    assert w["statsHour"].sum == 360
    assert w["statsHour"].tps == pytest.approx(0.1)
    assert w["statsDay"].sum == 3 * 360


def test_unknown_and_dropped_keys() -> None:
    s = BrokerStats("b", 0.0)
    s.record_put("T", 1, 1)
    s.record_get("T", "g", 1, 1)
    s.record_get("U", "g", 1, 1)
    s.tick(10.0)
    assert s.stats(TOPIC_PUT_NUMS, "nope") is None
    assert s.stats(GROUP_GET_NUMS, "T") is None  # no "@"
    assert s.stats(BROKER_GET_NUMS, "other-broker") is None
    assert s.stats("NOT_A_STAT", "T") is None
    s.drop_topic("T")
    assert "T" not in s.put and ("T", "g") not in s.get
    assert s.stats(TOPIC_PUT_NUMS, "T") is None
    s.drop_group("g")
    assert not s.get


def test_latency_histogram_buckets() -> None:
    h = LatencyHistogram((0.001, 0.01))
    for v in (0.0005, 0.001, 0.005, 0.5):
        h.observe(v)
    assert h.cumulative() == [("0.001", 2), ("0.01", 3), ("+Inf", 4)]
    assert h.count == 4
    assert h.sum == pytest.approx(0.5065)
