"""The replay's figures: nearest-rank percentiles, summaries per key, and time-weighted means over a window."""

from __future__ import annotations

from flashpoint.simulation.metrics import TimeWeighted, percentile, wait_summary, waits_by


def test_percentiles_are_nearest_rank() -> None:
    samples = [float(n) for n in range(100, 0, -1)]
    assert percentile(samples, 0.5) == 51.0 and percentile(samples, 0.99) == 100.0
    assert percentile([], 0.5) is None
    assert wait_summary([3.0, 1.0, 2.0]) == {"p50": 2.0, "p99": 3.0, "n": 3}
    assert wait_summary([]) == {"p50": None, "p99": None, "n": 0}


def test_waits_by_orders_sizes_by_value() -> None:
    found = waits_by([("8", 1.0), ("1", 2.0), ("2", 0.0), ("high", 5.0)])
    assert list(found) == ["1", "2", "8", "high"]


def test_a_time_weighted_mean_counts_each_value_for_as_long_as_it_held_inside_the_window() -> None:
    window = TimeWeighted(10.0, 20.0)
    window.hold({"x": 100.0}, 0.0, 10.0)  # before the window
    window.hold({"x": 4.0}, 5.0, 15.0)  # half inside
    window.hold({"x": 8.0}, 15.0, 30.0)  # inside up to its end
    assert window.mean("x") == (4.0 * 5 + 8.0 * 5) / 10
    assert window.integral("x") == 60.0 and window.mean("y") == 0.0
    assert TimeWeighted(1.0, 1.0).mean("x") is None
