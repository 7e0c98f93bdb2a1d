"""Keep-warm sized from traffic (issue 25, point 2): the window policy by table (``keepwarm.window`` on recorded gap
histories), the traffic record's edge cases (a first request ever, a busy arrival, a clock that goes back), and the
rules the planner asks of a window (``stops_idle``, ``prewarm_due``)."""

from __future__ import annotations

import random

import pytest

from flashpoint.scheduler.keepwarm import MIN_GAPS, Traffic, Window, lead_s, prewarm_due, stops_idle, window

R = random.Random(7)
PERIODIC = [300 + R.uniform(-10, 10) for _ in range(40)]  # a job every 5 minutes, give or take 10 s
POISSON = [R.expovariate(1 / 20) for _ in range(100)]  # a busy endpoint: 20 s between arrivals on average
RARE = [R.uniform(5000, 9000) for _ in range(30)]  # every two hours or so
BURSTY = [R.uniform(1, 5) for _ in range(50)] + [R.uniform(600, 1200) for _ in range(10)]  # bursts 10-20 min apart
#: a window keeps a worker this long past the longest gap it covers (a cold start of 8 s: lead_s(8))
MARGIN = lead_s(8.0)


@pytest.mark.parametrize(
    ("gaps", "keep", "prewarm", "words"),
    [
        # too few gaps: the default window, exactly
        ([10.0] * (MIN_GAPS - 1), (60, 60), None, "fewer than 5: the default 60s"),
        # periodic: let go after the job, warmed again just before the next one (every gap between the two)
        (PERIODIC, (max(PERIODIC), max(PERIODIC) + MARGIN), (280, min(PERIODIC)), "warm one again"),
        # short gaps: a longer keep would idle more than 60 s does: kept just under it, the same cold starts
        (POISSON, (50, 60), None, "keep warm"),
        # rare: let go at once (keeping a worker warm for hours costs more than a cold start)
        (RARE, (0, 0), None, "let go at once (arrivals are rare or unpredictable): 30 of 30"),
        # bursts: kept through the gaps within a burst, let go between bursts
        (BURSTY, (5, 5 + MARGIN), None, "10 of 60 idle gaps would cold-start"),
    ],
)
def test_the_window_follows_the_traffic(
    gaps: list[float], keep: tuple[float, float], prewarm: tuple[float, float] | None, words: str
) -> None:
    chosen = window(gaps, cold_start_s=8.0, default_s=60.0)
    assert keep[0] <= chosen.keep_s <= keep[1]
    if prewarm is None:
        assert chosen.prewarm_s is None
    else:
        assert chosen.prewarm_s is not None and prewarm[0] <= chosen.prewarm_s <= prewarm[1]
    assert words in chosen.why


def test_a_prewarm_pays_its_start_up_from_the_budget() -> None:
    gaps = [30.0] * 20 + [200.0] * 10
    cheap = window(gaps, cold_start_s=1.0, default_s=60.0)  # warming one again costs 1 s a gap: worth it
    assert cheap.prewarm_s == 30.0 and cheap.keep_s == 30.0 + lead_s(1.0)
    dear = window(gaps, cold_start_s=40.0, default_s=60.0)  # 40 s a gap: over the default's idle, so kept instead
    assert dear.prewarm_s is None and dear.keep_s == 60.0


def idle_and_cold(gaps: list[float], chosen: Window, cold_s: float) -> tuple[float, int]:
    """What ``chosen`` would have cost on ``gaps``, worked out gap by gap."""
    idle, cold = 0.0, 0
    prewarm = chosen.prewarm_s or 0.0
    for gap in gaps:
        if gap < prewarm:
            cold += 1
        elif gap <= chosen.keep_s:
            idle += gap - prewarm
        else:
            idle += chosen.keep_s - prewarm
            cold += 1
        idle += cold_s if prewarm else 0.0
    return idle, cold


def test_the_chosen_window_never_idles_more_nor_cold_starts_more_than_the_default_on_its_history() -> None:
    for gaps in (PERIODIC, POISSON, RARE, BURSTY):
        chosen = window(gaps, 8.0, 60.0)
        idle, cold = idle_and_cold(gaps, chosen, 8.0)
        default_idle, default_cold = idle_and_cold(gaps, Window(60.0, None, ""), 8.0)
        assert idle <= default_idle + 1e-6 and cold <= default_cold
        assert chosen.cost == pytest.approx(idle / len(gaps))


def test_traffic_records_gaps_only_between_idle_and_the_next_arrival() -> None:
    traffic = Traffic()
    traffic.arrived(0.0, busy=False)  # the first request ever: no gap (nothing ended before it)
    assert list(traffic.gaps) == []
    traffic.ended(10.0)
    traffic.arrived(25.0, busy=False)
    traffic.arrived(26.0, busy=True)  # it found work running: a warm worker was there anyway
    assert list(traffic.gaps) == [15.0]
    traffic.ended(30.0)
    traffic.arrived(20.0, busy=False)  # a clock that went back gives no gap
    traffic.arrived(float("nan"), busy=False)
    assert list(traffic.gaps) == [15.0]


def test_traffic_recomputes_its_window_when_a_gap_or_a_cold_start_is_added() -> None:
    traffic = Traffic()
    for n in range(MIN_GAPS):
        traffic.ended(n * 1000.0)
        traffic.arrived(n * 1000.0 + 300.0, busy=False)
    first = traffic.window(60.0)
    assert traffic.window(60.0) is first  # cached
    traffic.cold_start(30.0)
    assert traffic.window(60.0) is not first
    assert traffic.cold_start_s() == 30.0
    traffic.cold_start(-1.0)  # nonsense is not a cold start
    assert traffic.cold_start_s() == 30.0


@pytest.mark.parametrize(
    ("since_end", "stops", "due"),
    [
        (0.0, True, False),  # just idle, the pre-warm far off: let go
        (250.0 - lead_s(8.0) - 0.1, True, False),
        (250.0 - lead_s(8.0), False, True),  # the pre-warm is due (its lead before it must be ready)
        (300.0, False, True),
        (349.9, False, True),
        (350.0, True, False),  # the window closed
    ],
)
def test_a_prewarm_window_in_time(since_end: float, stops: bool, due: bool) -> None:
    chosen = Window(keep_s=350.0, prewarm_s=250.0, why="")
    assert stops_idle(chosen, since_end, lead_s(8.0)) is stops
    assert prewarm_due(chosen, since_end, lead_s(8.0)) is due


def test_a_keep_window_in_time() -> None:
    chosen = Window(keep_s=90.0, prewarm_s=None, why="")
    assert [stops_idle(chosen, t, 5.0) for t in (0.0, 89.9, 90.0)] == [False, False, True]
    assert not any(prewarm_due(chosen, t, 5.0) for t in (0.0, 50.0, 100.0))
