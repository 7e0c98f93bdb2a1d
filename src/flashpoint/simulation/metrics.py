"""A replay's figures, pure: percentiles of waits, time-weighted means, and fill mode's checkpoints.

Definitions (docs/decisions/0114-simulate.md):

- a **percentile** is the nearest rank: the value at index ``min(n - 1, int(q * n))`` of the sorted samples (as
  ``bench/benchlib.py``), None when there are none;
- a **time-weighted mean** of a quantity that changes only at a replay's instants is its integral over the measured
  window divided by the window's length: each value counts for as long as it held;
- **allocated** GPUs are those held by running jobs; **stranded** GPUs are the free ones at a moment when at least one
  request waits in a queue (after that instant's reconcile: had they been able to serve it, it would have been
  placed), none while nothing waits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["CHECKPOINTS", "TimeWeighted", "percentile", "wait_summary", "waits_by"]

#: fill mode reports at these shares of the fleet's GPUs asked for (in percent)
CHECKPOINTS = (50, 80, 90, 100)


def percentile(samples: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0 <= q <= 1) of ``samples``; None when there are none."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_summary(samples: Sequence[float]) -> dict[str, float | int | None]:
    """``p50`` and ``p99`` (seconds, rounded to milliseconds) and ``n``, the count."""
    ordered = sorted(samples)
    return {
        "p50": _round(percentile(ordered, 0.50)),
        "p99": _round(percentile(ordered, 0.99)),
        "n": len(ordered),
    }


def waits_by(samples: Iterable[tuple[str, float]]) -> dict[str, dict[str, float | int | None]]:
    """``wait_summary`` per key, keys in their natural order (numbers by value)."""
    groups: dict[str, list[float]] = {}
    for key, wait in samples:
        groups.setdefault(key, []).append(wait)
    order = sorted(groups, key=lambda k: (0, int(k), "") if k.isdigit() else (1, 0, k))
    return {key: wait_summary(groups[key]) for key in order}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(slots=True)
class TimeWeighted:
    """Integrals over ``[start, end)`` of quantities that hold between instants: ``hold(values, t0, t1)`` adds each
    value times the part of ``[t0, t1)`` inside the window."""

    start: float
    end: float
    sums: dict[str, float] = field(default_factory=dict)

    def hold(self, values: Mapping[str, float], t0: float, t1: float) -> None:
        span = min(t1, self.end) - max(t0, self.start)
        if span <= 0:
            return
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + value * span

    def mean(self, key: str) -> float | None:
        """The time-weighted mean of ``key`` over the window (None for an empty window)."""
        length = self.end - self.start
        return None if length <= 0 else self.sums.get(key, 0.0) / length

    def integral(self, key: str) -> float:
        return self.sums.get(key, 0.0)
