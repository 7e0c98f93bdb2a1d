"""Rollouts' decisions (``scheduler/rollout.py``), by table: how many new workers to warm, when to give a rollout up
and why, when to switch, how many to start, when to retire one more old worker. The engine's side is
``test_rollout_engine.py``."""

from __future__ import annotations

import pytest

from flashpoint.scheduler.rollout import abandon_reason, may_drain, ready_to_switch, to_start, warm_count
from flashpoint.scheduler.supervision import MAX_START_ATTEMPTS


@pytest.mark.parametrize(
    ("workers_min", "workers_max", "old_live", "expected"),
    [
        (0, 3, 0, 0),  # nothing ran, nothing must: ready once built
        (0, 3, 1, 1),  # the old ran one: so must the new before it takes over
        (0, 3, 2, 2),  # as many as the old runs
        (2, 3, 1, 2),  # the new minimum, when larger
        (0, 1, 3, 1),  # capped by the new maximum
        (3, 3, 0, 3),
    ],
)
def test_warm_count(workers_min: int, workers_max: int, old_live: int, expected: int) -> None:
    assert warm_count(workers_min, workers_max, old_live) == expected


GOING = {
    "environment": "",
    "environment_error": "",
    "start_failures": 0,
    "last_error": "",
    "late": False,
    "timeout_s": 120.0,
    "ready": 0,
    "needed": 2,
}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, None),
        ({"environment": "building"}, None),
        ({"environment": "ready", "ready": 1}, None),
        ({"start_failures": MAX_START_ATTEMPTS - 1}, None),
        (
            {"environment": "failed", "environment_error": "uv could not install\nerror: No solution found"},
            "environment build failed: uv could not install",
        ),
        (
            {"start_failures": MAX_START_ATTEMPTS, "last_error": "Traceback\n  boom\nImportError: no module x"},
            f"worker exited {MAX_START_ATTEMPTS} times while starting: Traceback\n  boom\nImportError: no module x",
        ),
        ({"start_failures": MAX_START_ATTEMPTS}, f"worker exited {MAX_START_ATTEMPTS} times while starting: no output"),
        ({"late": True, "ready": 1}, "not ready after 120 s: 1 of 2 workers ready"),
        ({"late": True, "environment": "building"}, "not ready after 120 s: its environment was still building"),
        # a failed build says so even once late
        ({"late": True, "environment": "failed", "environment_error": "x"}, "environment build failed: x"),
    ],
)
def test_abandon_reason(changes: dict[str, object], expected: str | None) -> None:
    assert abandon_reason(**{**GOING, **changes}) == expected  # type: ignore[arg-type]


def test_a_crash_loop_quotes_only_the_last_lines() -> None:
    last = "\n".join(f"line {i}" for i in range(20))
    reason = abandon_reason(**{**GOING, "start_failures": MAX_START_ATTEMPTS, "last_error": last})  # type: ignore[arg-type]
    assert reason is not None and reason.endswith("line 15\nline 16\nline 17\nline 18\nline 19")
    assert "line 14" not in reason


@pytest.mark.parametrize(
    ("environment", "ready", "needed", "expected"),
    [
        ("", 0, 0, True),  # nothing to wait for
        ("host", 0, 0, True),
        ("ready", 0, 0, True),
        ("building", 0, 0, False),  # min 0: still not before the environment is there
        ("failed", 3, 1, False),
        ("", 1, 2, False),
        ("", 2, 2, True),
        ("ready", 3, 2, True),
    ],
)
def test_ready_to_switch(environment: str, ready: int, needed: int, expected: bool) -> None:
    assert ready_to_switch(environment, ready, needed) is expected


@pytest.mark.parametrize(
    ("environment", "warming", "needed", "backing_off", "starting", "expected"),
    [
        ("", 0, 2, False, 0, 1),  # one at a time
        ("", 1, 2, False, 0, 1),  # the first is ready: the next
        ("", 1, 2, False, 1, 0),  # the first (or one of the group) still starting: wait
        ("", 2, 2, False, 0, 0),
        ("", 3, 2, False, 0, 0),
        ("", 0, 2, True, 0, 0),  # a failed start's back-off holds the next
        ("building", 0, 2, False, 0, 0),
        ("ready", 0, 1, False, 0, 1),
    ],
)
def test_to_start(environment: str, warming: int, needed: int, backing_off: bool, starting: int, expected: int) -> None:
    assert to_start(environment, warming, needed, backing_off, starting) == expected


@pytest.mark.parametrize(
    ("fits", "wanted", "draining", "starting", "expected"),
    [
        (False, 1, False, 0, True),  # no room, nothing in the way: retire one
        (True, 1, False, 0, False),  # room: no need
        (False, 0, False, 0, False),  # nothing wanted
        (False, 1, True, 0, False),  # the one retired still holds its devices: one at a time
        (False, 1, False, 1, False),  # a new one still starts: never short of more than one
    ],
)
def test_may_drain(fits: bool, wanted: int, draining: bool, starting: int, expected: bool) -> None:
    assert may_drain(fits=fits, wanted=wanted, draining=draining, starting=starting) is expected
