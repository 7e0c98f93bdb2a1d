"""Invocation replays through the real control plane (issue 25, point 5), on traces with known answers: a fixed
idle timeout shorter than the period cold-starts every call and keeps each worker idle exactly that long; a long one
cold-starts only the first; ``auto`` learns the period and pre-warms, so only the calls before it has seen enough gaps
are cold; the seeded generators are reproducible."""

from __future__ import annotations

import random

import pytest

from flashpoint.scheduler.keepwarm import MIN_GAPS
from flashpoint.simulation.invocations import Invocation, bursty, periodic, rare, run_invocations, spaced

COLD_S = 8.0
CALLS = [Invocation("every-5-min", 300.0 * n + 10.0, 2.0) for n in range(12)]


def fixed_cold() -> float:
    return COLD_S


def test_a_short_fixed_timeout_cold_starts_every_periodic_call() -> None:
    report = run_invocations(CALLS, 60, fixed_cold)
    assert (report["calls"], report["cold_starts"], report["starts"], report["unfinished"]) == (12, 12, 12, 0)
    assert report["cold_wait_s"] == {"p50": COLD_S, "p99": COLD_S}
    assert report["idle_gpu_s"] == pytest.approx(60.0 * 12)  # each worker idle its 60 s, then stopped
    assert report["starting_gpu_s"] == pytest.approx(COLD_S * 12)


def test_a_long_fixed_timeout_cold_starts_only_the_first_call() -> None:
    report = run_invocations(CALLS, 600, fixed_cold)
    assert (report["cold_starts"], report["starts"]) == (1, 1)
    # idle from each end to the next arrival (the first call waited for its cold start), then 600 s after the last
    assert report["idle_gpu_s"] == pytest.approx((300.0 - COLD_S - 2.0) + (300.0 - 2.0) * 10 + 600.0)


def test_auto_learns_the_period_and_prewarms() -> None:
    report = run_invocations(CALLS, "auto", fixed_cold)
    # until MIN_GAPS gaps are seen the default 60 s holds (a cold start each); then each call finds a warm worker
    assert report["cold_starts"] == MIN_GAPS + 1
    fixed = run_invocations(CALLS, 60, fixed_cold)
    assert report["idle_gpu_s"] < fixed["idle_gpu_s"]


def test_the_generators_are_seeded_and_bounded() -> None:
    first = periodic(random.Random(3), hours=2, period_s=300, jitter_s=5)
    assert first == periodic(random.Random(3), hours=2, period_s=300, jitter_s=5)
    assert all(0 <= t < 7200 for t in first) and len(first) in (23, 24, 25)
    bursts = bursty(random.Random(3), hours=2, between_s=600, size=(3, 5), within_s=2)
    assert bursts == sorted(bursts) and len(bursts) >= 3
    assert rare(random.Random(3), hours=1, mean_s=10**9) == []
    assert spaced([500.0, 100.0, 100.0 + 7200.0], hours=1) == [0.0, 400.0]
