"""The engine's clock: monotonic time for intervals and deadlines, wall time for what jobs record.

The control plane reads time only through a ``Clock``, so tests can drive it: ``FakeClock`` moves only when told.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: intervals, deadlines, back-offs."""
        ...

    def time(self) -> float:
        """Seconds since the epoch: what jobs record (created, started, finished, TTL)."""
        ...


class SystemClock:
    """The real clocks of this machine."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


class FakeClock:
    """A clock for tests: both readings stand still until ``advance`` moves them together."""

    def __init__(self, monotonic: float = 1_000.0, wall: float = 1_800_000_000.0) -> None:
        self._monotonic = monotonic
        self._wall = wall

    def monotonic(self) -> float:
        return self._monotonic

    def time(self) -> float:
        return self._wall

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._monotonic += seconds
        self._wall += seconds


SYSTEM_CLOCK = SystemClock()
