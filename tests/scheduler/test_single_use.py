"""Single-use (run-to-completion) endpoints, decision 0111: the planner's rules by table, then the plane's through the
test door (StubBackend + FakeClock): a worker per job up to ``workers_max``, one job per worker, a normal stop after
it, no warm worker, a crash mid-job under the retry rule, and a single-use endpoint sharing devices with a normal one.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.jobs import JobStatus, Reason
from flashpoint.scheduler.planner import desired, idle_stops, yieldable
from flashpoint.scheduler.records import EndpointState, Worker, WorkerState
from flashpoint.spec import EndpointSpec, ServerlessScalerType, WorkerTarget
from flashpoint.wire.protocol import SINGLE_USE_ENV
from tests.scheduler.door import TARGET, Door, open_door

H200 = GpuType.NVIDIA_H200
START, IDLE, RUN, STOP = WorkerState.STARTING, WorkerState.IDLE, WorkerState.RUNNING, WorkerState.STOPPING


def task_spec(**options: Any) -> EndpointSpec:
    """``Endpoint``'s options as a single-use endpoint (what the rc2 bridge builds for ``@app.task``)."""
    return dataclasses.replace(Endpoint(**options).spec, single_use=True)


def task(door: Door, **options: Any) -> EndpointSpec:
    spec = task_spec(**options)
    door.plane.register(spec, TARGET)
    return spec


# ---------------------------------------------------------------------------------------------------------------------
# the planner's rules (pure), by table


def endpoint(
    queued: int, states: list[tuple[WorkerState, int]], single_use: bool = True, **options: Any
) -> EndpointState:
    """An endpoint with ``queued`` jobs and workers in these states, each with that many jobs (a worker with a job is
    spent: single-use workers hold at most one)."""
    spec = dataclasses.replace(Endpoint(name="t", gpu=H200, **options).spec, single_use=single_use)
    ep = EndpointState(spec, WorkerTarget(import_path="x:y"), registered_at=0.0, queued=queued)
    for n, (state, jobs) in enumerate(states):
        worker = Worker(f"w{n}", "t", (), started_at=0.0, idle_since=0.0, last_exchange=0.0, state=state)
        worker.jobs = {f"j{n}-{i}" for i in range(jobs)}
        worker.spent = single_use and jobs > 0
        ep.workers[worker.id] = worker
    return ep


@pytest.mark.parametrize(
    ("workers", "queued", "states", "want"),
    [
        ((0, 3), 0, [], 0),  # nothing to run: no worker
        ((0, 3), 2, [], 2),  # a worker per waiting job, at once (no scaler delay)
        ((0, 3), 5, [], 3),  # bounded by workers_max
        ((0, 3), 1, [(RUN, 1)], 2),  # the running job keeps its worker; the waiting one gets its own
        ((0, 3), 0, [(RUN, 1), (RUN, 1)], 2),
        ((0, 3), 1, [(RUN, 1), (START, 0)], 2),  # the starting one is for the waiting job
        ((0, 3), 0, [(IDLE, 0)], 0),  # an unspent worker with nothing to take is not wanted
        ((2, 3), 0, [], 0),  # workers_min is not kept warm
        ((0, 3), 0, [(STOP, 0)], 0),  # a stopping worker is not live
    ],
)
def test_desired_single_use_workers_are_the_jobs_waiting_and_running(
    workers: tuple[int, int], queued: int, states: list[tuple[WorkerState, int]], want: int
) -> None:
    for scaler in ServerlessScalerType:  # whatever the scaler says
        ep = endpoint(queued, states, workers=workers, scaler_type=scaler, scaler_value=4)
        assert desired(ep, ep.live_workers(), 10_000.0, 10_000.0 if queued else None) == want


@pytest.mark.parametrize(
    ("single_use", "workers", "idle_for", "stops"),
    [
        (True, (0, 2), 0.0, True),  # idle with nothing queued: stopped at once, not after idle_timeout
        (True, (1, 2), 0.0, True),  # workers_min keeps none warm
        (False, (0, 2), 0.0, False),  # a normal endpoint's waits for its idle_timeout
        (False, (0, 2), 600.0, True),
        (False, (1, 2), 600.0, False),  # and keeps its minimum
    ],
)
def test_an_idle_single_use_worker_stops_at_once(
    single_use: bool, workers: tuple[int, int], idle_for: float, stops: bool
) -> None:
    ep = endpoint(0, [(IDLE, 0)], single_use=single_use, workers=workers, idle_timeout=600)
    assert [w.id for w in idle_stops(ep, idle_for)] == (["w0"] if stops else [])
    assert yieldable(ep.workers["w0"], ep, 1) is (single_use or workers[0] == 0)


# ---------------------------------------------------------------------------------------------------------------------
# through the door


async def test_n_jobs_start_n_workers_up_to_workers_max_each_takes_one_and_is_stopped_after_it() -> None:
    door = await open_door("node-a=NVIDIA_H200:4")
    task(door, name="t", gpu=H200, workers=(0, 3))
    jobs = [door.submit("t", {"n": n}) for n in range(5)]
    await door.settle()
    # Given five jobs and room for three workers: three start at once, the others wait and say why
    first = door.workers("t")
    assert len(first) == 3 and len(door.backend.started) == 3
    assert door.reasons("t") == {"worker_starting"}
    # When each pulls for several jobs, each gets one, and no second one afterwards
    assert [await door.pull(w, count=4) for w in first] == [[j.id] for j in jobs[:3]]
    assert all(w.spent for w in first)
    assert await door.pull(first[0]) == []
    assert door.reasons("t") == {"max_workers"}
    assert {r.code.value for r in door.plane.explain_job(jobs[3].id).reasons} == {"max_workers"}
    # Then a finished job's worker is stopped and forgotten, its devices back, and a new worker takes the next job
    await door.finish(first[0], jobs[0].id)
    assert door.backend.stopped == [first[0].id]
    assert first[0].id not in door.plane.workers
    fourth = door.workers("t")[-1]
    assert fourth not in first and len(door.backend.started) == 4
    assert await door.pull(fourth) == [jobs[3].id]
    for worker, job in [(first[1], jobs[1]), (first[2], jobs[2]), (fourth, jobs[3])]:
        await door.finish(worker, job.id)
    fifth = door.worker("t")
    assert await door.pull(fifth) == [jobs[4].id]
    await door.finish(fifth, jobs[4].id)
    # nothing waits: no worker is kept, none replaced, every device is free
    await door.step(1)
    assert door.workers("t") == [] and door.backend.running == [] and len(door.backend.started) == 5
    assert all(row["worker"] is None for row in door.plane.fleet_view())
    assert all(j.status is JobStatus.COMPLETED for j in jobs)
    assert len({j.worker_id for j in jobs}) == 5  # each job on a worker of its own
    assert door.plane.endpoint("t").start_failures == 0


async def test_the_worker_is_told_it_is_single_use_and_a_normal_one_is_not() -> None:
    door = await open_door()
    task(door, name="t", gpu=H200)
    door.endpoint(name="n", gpu=H200)
    door.submit("t")
    door.submit("n")
    await door.settle()
    assert door.backend.launch(door.worker("t").id).env[SINGLE_USE_ENV] == "1"
    assert door.backend.launch(door.worker("n").id).env[SINGLE_USE_ENV] == "0"


async def test_the_result_post_that_asks_for_more_gets_nothing_and_stops_the_worker() -> None:
    door = await open_door()
    task(door, name="t", gpu=H200, workers=2)
    job, other = door.submit("t"), door.submit("t")
    await door.settle()
    worker = door.workers("t")[0]
    assert await door.pull(worker) == [job.id]
    # flashpoint's worker posts its result with job-done-batch; a single-use one asks for no more, but if it did:
    assert await door.plane.done_batch("t", worker.id, [(job.id, {"output": 1})], take=1) == []
    await door.settle()
    assert job.status is JobStatus.COMPLETED and door.backend.stopped == [worker.id]
    assert other.status is JobStatus.IN_QUEUE and other.worker_id is None


async def test_its_exit_after_the_job_is_a_normal_stop(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="flashpoint.plane")
    door = await open_door(exit_on_stop=False)  # the worker ends by itself, as flashpoint's single-use runtime does
    task(door, name="t", gpu=H200, workers=1)
    job, later = door.submit("t"), door.submit("t")
    await door.settle()
    worker = door.worker("t")
    assert await door.pull(worker) == [job.id]
    await door.finish(worker, job.id)
    # stopping: it still holds its device (workers_max counts it), so the next job waits for its exit
    assert worker.state is WorkerState.STOPPING and door.backend.stopped == [worker.id]
    assert door.reasons("t") == {"max_workers"}
    door.backend.exit(worker.id, 0)
    await door.settle()
    ep = door.plane.endpoint("t")
    assert (ep.start_failures, ep.start_losses, ep.next_start_at) == (0, 0, 0.0)  # no failed start, no back-off
    assert caplog.records == []  # no "ended unexpectedly"
    # its device is free at once: the waiting job's worker starts without the clock moving
    (second,) = door.workers("t")
    assert second is not worker and second.devices == worker.devices
    assert await door.pull(second) == [later.id]
    assert job.status is JobStatus.COMPLETED


async def test_no_warm_worker_one_started_for_a_cancelled_job_stops_at_once() -> None:
    door = await open_door()
    task(door, name="t", gpu=H200, workers=(1, 2), idle_timeout=600)
    await door.settle()
    assert door.backend.started == []  # workers_min keeps nothing warm
    job = door.submit("t")
    await door.settle()
    worker = door.worker("t")
    door.plane.cancel(job.id)
    assert await door.pull(worker) == []  # ready, with nothing to take
    await door.step(0)
    assert door.backend.stopped == [worker.id] and door.workers("t") == []


async def test_a_crash_mid_job_follows_the_retry_rule_on_a_new_worker_then_fails_worker_lost() -> None:
    door = await open_door()
    task(door, name="t", gpu=H200)
    job = door.submit("t")
    await door.settle()
    first = door.worker("t")
    assert await door.pull(first) == [job.id]
    await door.crash(first, -signal.SIGKILL)
    # back at the front of its queue once (decision 0004), run by a fresh worker
    assert job.status is JobStatus.IN_QUEUE and job.retries == 1
    second = door.worker("t")
    assert second is not first
    assert await door.pull(second) == [job.id]
    await door.crash(second, 1)
    assert job.status is JobStatus.FAILED and job.reason is Reason.WORKER_LOST
    assert job.error is not None and "already been retried 1 time(s)" in job.error.message
    # a crash is not a failed start (each had taken its job), and nothing is left running
    await door.step(1)
    assert door.plane.endpoint("t").start_failures == 0 and door.workers("t") == []


async def test_a_single_use_endpoint_beside_a_normal_one_on_the_same_device() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="n", gpu=H200, idle_timeout=600)
    task(door, name="t", gpu=H200)
    warm = door.submit("n")
    await door.settle()
    normal = door.worker("n")
    assert await door.pull(normal) == [warm.id]
    await door.finish(normal, warm.id)  # idle, kept warm for its idle_timeout
    # Given the normal endpoint's idle worker on the only device, a task's job takes it over at once
    job = door.submit("t")
    await door.settle()
    assert door.backend.stopped == [normal.id]
    single = door.worker("t")
    assert single.devices == normal.devices
    assert await door.pull(single) == [job.id]
    # while the task runs, the normal endpoint's job waits and says for whom
    queued = door.submit("n")
    await door.settle()
    assert [(r.code.value, r.holders) for r in door.plane.explain_endpoint("n").reasons] == [("busy", ("t",))]
    # the task's worker ends with its job, and the device goes straight back to the normal endpoint
    await door.finish(single, job.id)
    assert door.workers("t") == []
    back = door.worker("n")
    assert back.devices == single.devices
    assert await door.pull(back) == [queued.id]
    await door.finish(back, queued.id)
    await door.step(599)
    assert back.state is WorkerState.IDLE  # the normal endpoint keeps its rules
