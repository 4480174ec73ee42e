"""Figures every benchmark gives: nearest-rank percentiles, latencies in microseconds, rates.

Shared by ``mqbench`` (bench/mqbench.py), its attack modes (bench/attacks.py) and the
comparisons run beside it (bench/redis_streams.py); no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def percentiles(samples: Sequence[float], points: Sequence[float] = (50, 90, 99, 99.9)) -> dict[float, float]:
    """Nearest-rank percentiles of ``samples`` (seconds), as a dict point -> value."""
    if not samples:
        return {p: 0.0 for p in points}
    ordered = sorted(samples)
    n = len(ordered)
    return {p: ordered[min(n - 1, max(0, int(round(p / 100 * n + 0.5)) - 1))] for p in points}


def latency_us(samples: Sequence[float]) -> dict[str, float]:
    """Percentiles of ``samples`` (seconds) in microseconds, keyed "p50", "p90",
    "p99", "p99.9"."""
    return {f"p{p:g}": v * 1e6 for p, v in percentiles(samples).items()}


def latency_text(lat: Mapping[str, float], unit: str = "ms", digits: int = 3) -> str:
    """``p50=1.000ms p90=...`` from a ``latency_us`` dict."""
    scale = {"ms": 1e3, "us": 1.0, "µs": 1.0, "s": 1e6}[unit]
    return " ".join(f"{k}={v / scale:.{digits}f}{unit}" for k, v in lat.items())


def latency_max_us(samples: Sequence[float]) -> float:
    """The largest of ``samples`` (seconds) in microseconds; 0 without samples."""
    return max(samples) * 1e6 if samples else 0.0


def per_second(count: float, elapsed: float) -> float:
    return count / elapsed if elapsed > 0 else 0.0


__all__ = ["latency_max_us", "latency_text", "latency_us", "per_second", "percentiles"]
