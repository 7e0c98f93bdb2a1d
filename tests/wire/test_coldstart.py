"""A cold start's phases, the pure parts (decision 0118): the header a worker reports in (hostile input refused or
ignored, never kept raw), the phases of a worker once ready and of its first job, and the sentence."""

from __future__ import annotations

import math

import pytest

from flashpoint.wire import coldstart


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, {}),
        ("", {}),
        ("imports=2.013,init=35.2", {"imports": 2.013, "init": 35.2}),
        ("init=1,imports=0", {"imports": 0.0, "init": 1.0}),  # kept in phase order
        (" imports = 1.5 , init=2", {"imports": 1.5, "init": 2.0}),
        ("imports=1,imports=9", {"imports": 1.0}),  # the first of a repeated name
        ("devices=5,process=3,first_job=1", {}),  # the plane's own phases: a worker may not report them
        ("secrets=1,imports=1", {"imports": 1.0}),  # an unknown name is ignored, the rest kept
        ("imports=-1,init=2", {"init": 2.0}),  # negative
        ("imports=nan,init=inf", {}),  # not finite
        ("imports=1e9", {}),  # past a day
        (f"imports={coldstart.MAX_PHASE_S}", {"imports": coldstart.MAX_PHASE_S}),  # a day exactly
        ("imports=abc,init", {}),  # not numbers, no value
        ("imports=1," + "x" * coldstart.MAX_HEADER_CHARS, {}),  # too long: ignored whole
    ],
)
def test_a_reported_header_keeps_only_known_bounded_finite_phases(header: str | None, expected: dict) -> None:
    assert coldstart.parse(header) == expected


def test_a_worker_s_phases_round_trip_through_the_header_to_the_millisecond() -> None:
    header = coldstart.encode({"init": 35.2004, "imports": 2.0126, "other": 1.0})
    assert header == "imports=2.013,init=35.200"
    assert coldstart.parse(header) == {"imports": 2.013, "init": 35.2}


@pytest.mark.parametrize(
    ("known", "start_to_ready", "header", "expected"),
    [
        # a flashpoint worker: process is the rest of the start
        ({}, 10.0, "imports=2,init=5", {"process": 3.0, "imports": 2.0, "init": 5.0}),
        # a runpod worker reports nothing: the whole start is process
        ({}, 10.0, None, {"process": 10.0}),
        # an environment the plane measured is not counted twice
        ({"environment": 4.0}, 10.0, "imports=1", {"environment": 4.0, "process": 5.0, "imports": 1.0}),
        # a worker reporting more than the start took: process never goes below zero
        ({}, 1.0, "imports=2", {"process": 0.0, "imports": 2.0}),
    ],
)
def test_a_ready_worker_s_phases(known: dict, start_to_ready: float, header: str | None, expected: dict) -> None:
    phases = coldstart.ready_phases(known, start_to_ready, header)
    assert phases == expected
    assert list(phases) == [name for name in coldstart.PHASES if name in expected]


@pytest.mark.parametrize(
    ("phases", "header", "expected"),
    [
        # ready by a ping at 10 s: the take's report comes out of process
        ({"process": 10.0}, "imports=2,init=5", {"process": 3.0, "imports": 2.0, "init": 5.0}),
        ({"environment": 4.0, "process": 6.0}, "init=5", {"environment": 4.0, "process": 1.0, "init": 5.0}),
        # once only, and never after the first job
        ({"process": 3.0, "imports": 2.0}, "imports=1", {"process": 3.0, "imports": 2.0}),
        ({"process": 10.0, "first_job": 1.0}, "imports=2", {"process": 10.0, "first_job": 1.0}),
        # not ready yet: nothing to take it from
        ({}, "imports=2", {}),
        # a hostile report changes nothing
        ({"process": 10.0}, "imports=-5,evil=1", {"process": 10.0}),
    ],
)
def test_phases_reported_after_a_ping_made_the_worker_ready(phases: dict, header: str, expected: dict) -> None:
    assert coldstart.reported_late(phases, header) == expected


@pytest.mark.parametrize(
    ("created_at", "job_phases"),
    [
        # queued 3 s before its worker started: devices 3, and the phases sum to its wait (100 -> 115)
        (97.0, {"devices": 3.0, "process": 8.0, "imports": 2.0, "first_job": 2.0}),
        # came while the worker started: it waited on part of the start only (devices 0)
        (104.0, {"devices": 0.0, "process": 8.0, "imports": 2.0, "first_job": 2.0}),
        # came after the worker was ready: it waited on no cold start
        (110.0, None),
    ],
)
def test_the_first_job_carries_the_start_it_waited_on(created_at: float, job_phases: dict | None) -> None:
    # a worker started at 100, ready at 110 (8 s process, 2 s imports); its first job starts at 112
    worker, job = coldstart.first_job({"process": 8.0, "imports": 2.0}, created_at, 100.0, 110.0, 112.0)
    assert worker == {"process": 8.0, "imports": 2.0, "first_job": 2.0}
    assert job == job_phases
    if job is not None and created_at < 100.0:
        assert math.isclose(sum(job.values()), 112.0 - created_at)


@pytest.mark.parametrize(
    ("built", "devices", "environment"),
    [
        (None, 10.0, None),  # no environment of its own: the whole wait before the start is for devices
        ((85.0, 94.0), 6.0, 4.0),  # a build that ran 85-94: the job (queued at 90) waited 4 s of it
        ((95.0, 95.01), 9.99, 0.01),  # a cache hit
        ((70.0, 80.0), 10.0, 0.0),  # built before the job came
    ],
)
def test_the_wait_before_the_start_is_split_between_environment_and_devices(
    built: tuple[float, float] | None, devices: float, environment: float | None
) -> None:
    # a job queued at 90; its worker started at 100, ready at 110; the job starts at 110
    _, job = coldstart.first_job({"process": 10.0}, 90.0, 100.0, 110.0, 110.0, built)
    assert job is not None
    assert job["devices"] == pytest.approx(devices)
    assert job.get("environment") == (None if environment is None else pytest.approx(environment))
    assert list(job) == [name for name in coldstart.PHASES if name in job]
    assert sum(job.values()) == pytest.approx(20.0)  # still the job's whole wait


@pytest.mark.parametrize(
    ("phases", "text"),
    [
        ({}, ""),
        (
            {"init": 35.0, "devices": 3.0, "process": 0.4, "imports": 2.0, "first_job": 0.6},
            "this job waited 41 s on a cold start: 3.0 s for devices, 0.4 s process, 2.0 s imports, 35 s init, "
            "0.6 s to the first job",
        ),
        ({"process": 1.25}, "this job waited 1.2 s on a cold start: 1.2 s process"),
    ],
)
def test_the_sentence(phases: dict, text: str) -> None:
    assert coldstart.sentence(phases) == text


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, {}),
        ("devices=3", {}),
        ({"devices": 3, "process": 0.5}, {"devices": 3.0, "process": 0.5}),
        ({"devices": -1, "process": float("nan"), "init": True, "imports": "2", "x": 1}, {}),
    ],
)
def test_phases_read_from_json_keep_known_finite_non_negative_numbers(data: object, expected: dict) -> None:
    assert coldstart.from_json(data) == expected


@pytest.mark.parametrize(
    ("phases", "header", "expected"),
    [
        # a class's constructor, reported with its first job's result
        ({"process": 3.0, "imports": 2.0, "first_job": 0.5}, "init=35", 35.0),
        # before the first job began, or after an init hook was reported, or not a bounded number: nothing
        ({"process": 3.0, "imports": 2.0}, "init=35", None),
        ({"process": 3.0, "init": 5.0, "first_job": 0.5}, "init=35", None),
        ({"process": 3.0, "first_job": 0.5}, "init=-1,imports=4", None),
        ({"process": 3.0, "first_job": 0.5}, "init=" + "9" * 500, None),
    ],
)
def test_a_class_s_constructor_reported_with_its_first_result(
    phases: dict, header: str, expected: float | None
) -> None:
    assert coldstart.constructed(phases, header) == expected
