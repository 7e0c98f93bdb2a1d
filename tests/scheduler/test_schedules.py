"""Cron schedules through the test door (StubBackend + FakeClock; ``scheduler/schedules.py``, decision 0109): each
fire time submits one job with an empty input, recorded as the schedule's; a run whose previous one is still queued or
running is skipped; a rollout's next version fires nothing until it switches in; an endpoint taken away stops its
schedule; a restart makes up the latest missed run once and records the others; refusals say why."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.errors import InvalidEndpointError
from flashpoint.jobs import Job, JobStatus
from flashpoint.scheduler.cron import iso
from flashpoint.spec import EndpointSpec, WorkerTarget
from flashpoint.store.runs import Outcome
from flashpoint.store.sqlite import SQLiteJobStore
from tests.scheduler.door import ROUTE_TARGET, ROUTES, TARGET, Door, open_door

pytestmark = pytest.mark.timeout(30)

H200 = GpuType.NVIDIA_H200
EVERY_5 = "*/5 * * * *"
#: the door's wall clock starts here: 2027-01-15 08:00:00 UTC, a Friday
START = 1_800_000_000.0
MINUTE = 60.0


def scheduled(door: Door, name: str = "cron", cron: str = EVERY_5, **options: Any) -> EndpointSpec:
    """Register an endpoint with ``Endpoint``'s options and a schedule (as the rc2 bridge declares one)."""
    spec = dataclasses.replace(Endpoint(name=name, gpu=H200, **options).spec, schedule=cron)
    door.plane.register(spec, TARGET)
    return spec


async def scheduling_door(**options: Any) -> Door:
    """A door whose plane runs schedules, as ``flashpoint serve``'s does."""
    return await open_door(run_schedules=True, **options)


def jobs_of(door: Door, endpoint: str) -> list[Job]:
    """The endpoint's jobs, oldest first."""
    return list(reversed(door.plane.store.list(endpoint=endpoint)))


def due_of(job: Job) -> str:
    due: str = job.extra["flashpoint"]["schedule"]["due"]
    return due


def outcomes(door: Door, endpoint: str) -> list[tuple[str, str]]:
    """The schedule's history, oldest first: (due time, outcome)."""
    return [(iso(r.due), r.outcome.value) for r in reversed(door.plane.store.runs(endpoint))]


async def minutes(door: Door, count: int, *, serve: bool = False) -> None:
    """Move the clock ``count`` minutes, a tick each; with ``serve``, the endpoint's worker runs each job it finds."""
    for _ in range(count):
        await door.step(MINUTE)
        if serve:
            await run_queued(door, "cron")


async def run_queued(door: Door, endpoint: str) -> None:
    for worker in door.workers(endpoint):
        for job_id in await door.pull(worker):
            await door.finish(worker, job_id)


# ------------------------------------------------------------------------------------------------------------------
# firing


async def test_each_fire_time_submits_one_job_recorded_as_the_schedule_s() -> None:
    # Given an endpoint scheduled every five minutes, registered at 08:00, whose worker runs what it finds
    door = await scheduling_door()
    scheduled(door, workers=(0, 1), idle_timeout=3600)
    await door.step()
    assert jobs_of(door, "cron") == []  # 08:00 itself is not after the registration

    # When the clock moves 15 minutes
    await minutes(door, 15, serve=True)

    # Then three jobs ran, due 08:05, 08:10 and 08:15, each with an empty input, submitted by the schedule
    jobs = jobs_of(door, "cron")
    assert [due_of(job) for job in jobs] == ["2027-01-15T08:05:00Z", "2027-01-15T08:10:00Z", "2027-01-15T08:15:00Z"]
    assert [job.created_at - START for job in jobs] == [300.0, 600.0, 900.0]  # at their due time, not late
    assert all(job.input == {} and job.status is JobStatus.COMPLETED for job in jobs)
    assert {job.submitted_by for job in jobs} == {"schedule:*/5 * * * *"}
    assert jobs[0].extra["flashpoint"]["schedule"] == {
        "cron": EVERY_5,
        "due": "2027-01-15T08:05:00Z",
        "dueAt": START + 300,
    }
    # and the history says so, each line with its job
    runs = list(reversed(door.plane.store.runs("cron")))
    assert [(r.outcome, r.job_id) for r in runs] == [(Outcome.SUBMITTED, job.id) for job in jobs]
    # and the endpoint's row shows the cron and the next run
    (row,) = door.plane.endpoint_rows("cron")
    assert row["schedule"] == {
        "cron": EVERY_5,
        "timezone": "UTC",
        "active": True,
        "next": "2027-01-15T08:20:00Z",
        "nextAt": START + 1200,
    }


async def test_a_run_is_skipped_while_the_previous_one_runs_or_waits() -> None:
    door = await scheduling_door()
    scheduled(door, workers=(0, 1), idle_timeout=3600)
    await door.step()
    # Given the 08:05 run taken by the worker and still running
    await minutes(door, 5)
    worker = door.worker("cron")
    (first,) = await door.pull(worker)

    # When 08:10 comes, then it is skipped and recorded so, naming the job still running
    await minutes(door, 5)
    assert [job.id for job in jobs_of(door, "cron")] == [first]
    skipped = door.plane.store.last_run("cron")
    assert skipped is not None and skipped.outcome is Outcome.SKIPPED
    assert skipped.detail == f"previous run still running ({first})" and skipped.job_id is None

    # When the run ends, then 08:15 runs again
    await door.finish(worker, first)
    await minutes(door, 5)
    (_, second) = jobs_of(door, "cron")
    assert due_of(second) == "2027-01-15T08:15:00Z"

    # And a run still queued (nobody took it) also makes the next one skip
    await minutes(door, 5)
    assert outcomes(door, "cron")[-1] == ("2027-01-15T08:20:00Z", "skipped")
    assert door.plane.store.last_run("cron").detail == f"previous run still queued ({second.id})"  # type: ignore[union-attr]


async def test_a_rollout_s_next_version_fires_nothing_until_it_serves() -> None:
    door = await scheduling_door(fleet="node-a=NVIDIA_H200:3")
    spec = scheduled(door, workers=(1, 1))
    await door.step()
    (old,) = door.workers("cron")
    await door.pull(old, 0)

    # Given a rollout warming the next version's worker beside the old one (it never becomes ready here)
    new = WorkerTarget(import_path="tests.apps.handlers_app:other")
    rollout = asyncio.ensure_future(door.plane.roll_out(spec, new, timeout_s=3600))
    await asyncio.sleep(0)
    await door.settle()
    assert [w.standby for w in door.workers("cron")] == [False, True]

    # When 08:05 comes, then one job is submitted, not one per version
    await minutes(door, 5)
    assert [due_of(job) for job in jobs_of(door, "cron")] == ["2027-01-15T08:05:00Z"]
    assert len(door.plane.endpoints) == 1

    # When the new version switches in, then its schedule goes on, once per fire time
    assert await door.pull(old) == [jobs_of(door, "cron")[0].id]
    await door.finish(old, jobs_of(door, "cron")[0].id)
    standby = door.workers("cron")[1]
    await door.pull(standby, 0)
    await door.step()
    await rollout
    await minutes(door, 5)
    assert [due_of(job) for job in jobs_of(door, "cron")] == ["2027-01-15T08:05:00Z", "2027-01-15T08:10:00Z"]
    assert [o for _, o in outcomes(door, "cron")] == ["submitted", "submitted"]


async def test_an_endpoint_taken_away_stops_its_schedule_and_comes_back_afresh() -> None:
    door = await scheduling_door()
    scheduled(door)
    await minutes(door, 5)
    assert len(jobs_of(door, "cron")) == 1

    # When it is taken away at 08:07, then its schedule stops, recorded so, and nothing more is submitted
    await minutes(door, 2)
    door.plane.unregister("cron", reason="undeployed")
    await minutes(door, 13)
    assert outcomes(door, "cron") == [("2027-01-15T08:05:00Z", "submitted"), ("2027-01-15T08:08:00Z", "stopped")]
    assert door.plane.schedules.timers == {}
    assert len(jobs_of(door, "cron")) == 1

    # When it is registered again at 08:20, then it starts afresh: nothing of 08:10-08:20 is made up
    scheduled(door)
    await door.step()
    assert len(jobs_of(door, "cron")) == 1
    await minutes(door, 5)
    assert [due_of(job) for job in jobs_of(door, "cron")][1:] == ["2027-01-15T08:25:00Z"]


async def test_a_changed_cron_stops_the_old_schedule_and_starts_the_new_one() -> None:
    door = await scheduling_door()
    spec = scheduled(door, workers=(0, 1))
    await minutes(door, 6, serve=True)
    door.plane.redeclare(dataclasses.replace(spec, schedule="0 * * * *"), TARGET)
    await minutes(door, 60, serve=True)
    assert outcomes(door, "cron") == [
        ("2027-01-15T08:05:00Z", "submitted"),
        ("2027-01-15T08:07:00Z", "stopped"),
        ("2027-01-15T09:00:00Z", "submitted"),
    ]
    assert door.plane.store.runs("cron")[1].detail == "the endpoint's schedule was changed to '0 * * * *'"


# ------------------------------------------------------------------------------------------------------------------
# restarts


async def test_a_restart_makes_up_the_latest_missed_run_once_and_records_the_rest(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    # Given a server that ran the 08:05 run, then stopped
    first = await scheduling_door(store=SQLiteJobStore(db), requeue_on_close=True)
    scheduled(first)
    await minutes(first, 5)
    (ran,) = jobs_of(first, "cron")
    await first.plane.close()
    first.plane.store.close()

    # When it starts again at 11:02
    again = await scheduling_door(store=SQLiteJobStore(db), requeue_on_close=True)
    scheduled(again, workers=(0, 1))
    again.clock.advance(3 * 3600 + 2 * MINUTE)
    again.plane.recover()
    await again.step()

    # Then the 08:05 run, requeued, makes 11:00's skip: the latest missed time is due, its previous run still queued
    assert outcomes(again, "cron") == [
        ("2027-01-15T08:05:00Z", "submitted"),
        ("2027-01-15T10:55:00Z", "missed"),
        ("2027-01-15T11:00:00Z", "skipped"),
    ]
    missed = again.plane.store.runs("cron")[1]
    assert missed.count == 34 and "34 fire time(s) (2027-01-15T08:10:00Z to 2027-01-15T10:55:00Z)" in missed.detail
    assert again.plane.store.runs("cron")[0].detail == f"previous run still queued ({ran.id})"
    again.plane.store.close()


async def test_a_restart_after_a_finished_run_submits_the_latest_missed_run(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    first = await scheduling_door(store=SQLiteJobStore(db))
    scheduled(first, workers=(0, 1))
    await minutes(first, 5, serve=True)
    await first.plane.close()
    first.plane.store.close()

    # When it starts again at 09:12 (the 08:05 run finished before it stopped)
    again = await scheduling_door(store=SQLiteJobStore(db))
    scheduled(again)
    again.clock.advance(72 * MINUTE)
    await again.step()

    # Then one job runs for 09:10, late, and 08:10 to 09:05 are recorded as missed
    (late,) = jobs_of(again, "cron")[1:]
    assert due_of(late) == "2027-01-15T09:10:00Z" and late.created_at == START + 72 * MINUTE
    assert outcomes(again, "cron")[1:] == [("2027-01-15T09:05:00Z", "missed"), ("2027-01-15T09:10:00Z", "submitted")]
    assert again.plane.store.runs("cron")[1].count == 12
    # and the next is 09:15, not a burst
    await minutes(again, 3)
    assert len(jobs_of(again, "cron")) == 2
    again.plane.store.close()


async def test_a_restart_does_not_resume_a_schedule_of_another_cron(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    first = await scheduling_door(store=SQLiteJobStore(db))
    scheduled(first)
    await minutes(first, 5)
    await first.plane.close()
    first.plane.store.close()
    again = await scheduling_door(store=SQLiteJobStore(db))
    again.clock.advance(3600)
    scheduled(again, cron="*/10 * * * *")  # registered at 09:00, the new version's cron
    await again.step()
    assert len(jobs_of(again, "cron")) == 1  # nothing made up
    await minutes(again, 10)
    assert [due_of(job) for job in jobs_of(again, "cron")][1:] == ["2027-01-15T09:10:00Z"]
    again.plane.store.close()


# ------------------------------------------------------------------------------------------------------------------
# what is refused, and planes that run no schedules


async def test_a_refused_submit_is_recorded_and_the_next_fire_time_tries_again() -> None:
    door = await scheduling_door(max_queued_jobs=1)
    door.endpoint(name="busy", gpu=H200)
    filler = door.submit("busy")
    scheduled(door)
    await minutes(door, 5)
    (line,) = door.plane.store.runs("cron")
    assert line.outcome is Outcome.FAILED and "at its limit of 1 jobs" in line.detail
    door.plane.cancel(filler.id)
    await minutes(door, 5)
    assert outcomes(door, "cron")[-1] == ("2027-01-15T08:10:00Z", "submitted")


@pytest.mark.parametrize(
    ("cron", "says"),
    [
        ("61 * * * *", "schedule '61 * * * *': the minute field '61' is not valid"),
        ("* * * *", "five fields"),
        ("0 0 30 2 *", "never comes"),
    ],
)
async def test_a_bad_cron_is_refused_at_registration(cron: str, says: str) -> None:
    door = await scheduling_door()
    with pytest.raises(InvalidEndpointError, match="endpoint 'cron': ") as refused:
        scheduled(door, cron=cron)
    assert says in str(refused.value)
    assert "cron" not in door.plane.endpoints


async def test_a_route_endpoint_takes_no_schedule() -> None:
    door = await scheduling_door()
    spec = dataclasses.replace(Endpoint(name="web", gpu=H200).spec, kind="routes", routes=ROUTES, schedule=EVERY_5)
    with pytest.raises(InvalidEndpointError, match="an HTTP-route endpoint takes none"):
        door.plane.register(spec, ROUTE_TARGET)


async def test_a_plane_that_runs_no_schedules_shows_the_cron_and_fires_nothing() -> None:
    door = await open_door()  # the embedded plane's and dev's settings
    scheduled(door)
    await minutes(door, 15)
    assert jobs_of(door, "cron") == [] and door.plane.store.runs("cron") == []
    (row,) = door.plane.endpoint_rows("cron")
    assert row["schedule"] == {"cron": EVERY_5, "timezone": "UTC", "active": False, "next": None, "nextAt": None}


async def test_a_draining_plane_starts_no_run() -> None:
    door = await scheduling_door()
    scheduled(door)
    await door.step()
    door.plane.drain()
    await minutes(door, 10)
    assert jobs_of(door, "cron") == []


async def test_the_reads_before_the_first_tick_and_the_history() -> None:
    door = await scheduling_door()
    ep = door.plane.endpoint(scheduled(door, cron="0 * * * *").key)
    assert door.plane.schedules.next_due(ep) == START + 3600  # not started yet: where it will start
    await minutes(door, 60)
    (row,) = door.plane.schedules.rows(door.plane.endpoints.values())
    assert row["endpoint"] == "cron" and row["next"] == "2027-01-15T10:00:00Z"
    assert row["last"]["outcome"] == "submitted" and row["last"]["jobStatus"] == "IN_QUEUE"
    assert row["last"]["dueIso"] == "2027-01-15T09:00:00Z"
    door.endpoint(name="plain", gpu=H200)
    history = door.plane.schedules.history(door.plane.endpoint("plain"))
    assert history["cron"] is None and history["runs"] == [] and history["active"] is False
