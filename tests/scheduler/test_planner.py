"""The planner's pure rules, by table: desired workers for both scalers, who may yield, who stops when idle; a plan of
CPU workers leaves the node ledger as it came."""

from __future__ import annotations

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.explain import OtherProcess
from flashpoint.fleet.inventory import Holder, Node
from flashpoint.scheduler.placement.fit import CpuFit
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.placement.nodes import CpuSlot
from flashpoint.scheduler.planner import desired, idle_stops, plan, yieldable
from flashpoint.scheduler.records import EndpointState, Worker, WorkerState
from flashpoint.spec import ServerlessScalerType, WorkerTarget
from tests.scheduler.ownership.test_leases import device

QD, RC = ServerlessScalerType.QUEUE_DELAY, ServerlessScalerType.REQUEST_COUNT
WALL = 10_000.0


def endpoint(queued: int, states: list[tuple[WorkerState, int]], **options: object) -> EndpointState:
    """An endpoint with ``queued`` jobs and workers in these states, each with that many jobs."""
    spec = Endpoint(name="e", gpu=GpuType.NVIDIA_H200, **options).spec  # type: ignore[arg-type]
    ep = EndpointState(spec, WorkerTarget(import_path="x:y"), registered_at=0.0, queued=queued)
    for n, (state, jobs) in enumerate(states):
        worker = Worker(f"w{n}", "e", (), started_at=0.0, idle_since=float(n), last_exchange=0.0, state=state)
        worker.jobs = {f"j{n}-{i}" for i in range(jobs)}
        ep.workers[worker.id] = worker
    return ep


START, IDLE, RUN, STOP = WorkerState.STARTING, WorkerState.IDLE, WorkerState.RUNNING, WorkerState.STOPPING


@pytest.mark.parametrize(
    ("scaler", "value", "workers", "queued", "states", "waited", "want"),
    [
        # QUEUE_DELAY: the first worker at once
        (QD, 4, (0, 3), 1, [], 0, 1),
        # one more only once the oldest job waited scaler_value seconds, with no worker idle or starting
        (QD, 4, (0, 3), 1, [(RUN, 1)], 3.9, 1),
        (QD, 4, (0, 3), 1, [(RUN, 1)], 4.0, 2),
        (QD, 4, (0, 3), 1, [(RUN, 1), (START, 0)], 60, 2),
        (QD, 4, (0, 3), 1, [(RUN, 1), (IDLE, 0)], 60, 2),
        # nothing queued: keep what runs; the minimum always; the maximum caps
        (QD, 4, (0, 3), 0, [(RUN, 1)], 0, 1),
        (QD, 4, (2, 3), 0, [], 0, 2),
        (QD, 1, (0, 2), 5, [(RUN, 1), (RUN, 1)], 60, 2),
        # stopping workers are not live: they are not counted as workers wanted
        (QD, 4, (0, 3), 1, [(STOP, 0)], 0, 1),
        # REQUEST_COUNT: ceil((queued + running) / value), clamped
        (RC, 2, (0, 4), 5, [], 0, 3),
        (RC, 2, (0, 4), 3, [(RUN, 2)], 0, 3),
        (RC, 2, (0, 4), 20, [], 0, 4),
        (RC, 2, (1, 4), 0, [], 0, 1),
    ],
)
def test_desired_workers(
    scaler: ServerlessScalerType,
    value: int,
    workers: tuple[int, int],
    queued: int,
    states: list[tuple[WorkerState, int]],
    waited: float,
    want: int,
) -> None:
    ep = endpoint(queued, states, workers=workers, scaler_type=scaler, scaler_value=value)
    assert desired(ep, ep.live_workers(), WALL, WALL - waited if queued else None) == want


@pytest.mark.parametrize(
    ("state", "jobs", "queued", "minimum", "live", "expected"),
    [
        (IDLE, 0, 0, 0, 1, True),
        (IDLE, 0, 0, 1, 1, False),  # the endpoint's minimum
        (IDLE, 0, 1, 0, 1, False),  # its endpoint has work queued
        (RUN, 1, 0, 0, 1, False),  # busy
        (START, 0, 0, 0, 1, False),  # not ready
        (STOP, 0, 0, 0, 1, False),  # already stopping
    ],
)
def test_who_may_yield(state: WorkerState, jobs: int, queued: int, minimum: int, live: int, expected: bool) -> None:
    ep = endpoint(queued, [(state, jobs)], workers=(minimum, 2))
    assert yieldable(ep.workers["w0"], ep, live) is expected


def test_idle_stops_take_the_longest_idle_first_and_keep_the_minimum() -> None:
    ep = endpoint(0, [(IDLE, 0), (IDLE, 0), (IDLE, 0), (RUN, 1)], workers=(2, 4), idle_timeout=10)
    assert [w.id for w in idle_stops(ep, now=10.5)] == ["w0"]  # w1 idle since 1.0: 9.5 s only
    assert [w.id for w in idle_stops(ep, now=100)] == ["w0", "w1"]  # two stop, two stay (the minimum)


def test_no_idle_stop_while_jobs_are_queued() -> None:
    ep = endpoint(1, [(IDLE, 0)], idle_timeout=0)
    assert idle_stops(ep, now=100) == []


def test_a_plan_of_cpu_starts_and_reclaims_leaves_the_node_ledger_as_it_came() -> None:
    # Given a 4-vCPU node where an idle worker of "old" (above its minimum) reserves two cores
    index = FleetIndex((), [Node("box", cpus=4, memory_mb=8 * 1024)])
    old_spec = Endpoint(name="old", cpu="cpu3c-2-4").spec
    old = EndpointState(old_spec, WorkerTarget(import_path="x:y"), registered_at=0.0)
    idle = Worker("w0", "old", (), started_at=0.0, idle_since=0.0, last_exchange=0.0, state=IDLE)
    idle.cpu = CpuSlot("box", (0, 1), 4 * 1024)
    old.workers[idle.id] = idle
    index.nodes.reserve(idle.cpu, Holder("w0", "old"))
    new_spec = Endpoint(name="new", cpu="cpu3c-2-4", workers=(0, 3), scaler_type="REQUEST_COUNT", scaler_value=1).spec
    new = EndpointState(new_spec, WorkerTarget(import_path="x:y"), registered_at=1.0, queued=2)
    before = index.nodes.slots()

    result = plan({"old": old, "new": new}, index, now=0.0, wall=WALL, oldest={"new": WALL})

    # Then "new" gets the two free cores, and reclaims the idle worker for its second worker
    ((start,),) = [tuple(s for s in result.starts if s.endpoint == "new")]
    assert isinstance(start.fit, CpuFit) and start.fit.slot.cores == (2, 3)
    assert [(r.worker_id, r.for_endpoint) for r in result.reclaims] == [("w0", "new")]
    assert [r.code.value for r in result.waiting["new"]] == ["cpu_busy"]
    # and the ledger holds what it held before: the trial reservation is gone
    assert index.nodes.slots() == before
    index.verify()


@pytest.mark.parametrize(
    ("case", "minimum", "state", "jobs", "queued", "wanted_device", "reclaimed"),
    [
        ("idle, above its minimum, on a wanted device: yields", 0, IDLE, 0, 0, 0, True),
        ("at its minimum: stays", 1, IDLE, 0, 0, 0, False),
        ("running a job: stays", 0, RUN, 1, 0, 0, False),
        ("its endpoint has jobs queued: stays", 0, IDLE, 0, 1, 0, False),
        ("another device is wanted: stays", 0, IDLE, 0, 0, 1, False),
    ],
)
def test_an_idle_worker_yields_a_device_another_process_wants(
    case: str, minimum: int, state: WorkerState, jobs: int, queued: int, wanted_device: int, reclaimed: bool
) -> None:
    first, second = device(index=0), device(index=1)
    index = FleetIndex([first, second])
    ep = endpoint(queued, [(state, jobs)], workers=(minimum, 2))
    worker = ep.workers["w0"]
    worker.devices = (first,)
    index.hold((first,), Holder("w0", "e"))
    other = OtherProcess(4242, "script", "python job.py", "http://127.0.0.1:9", "infer")
    wanted = {(first, second)[wanted_device].key: other}

    result = plan({"e": ep}, index, now=0.0, wall=WALL, oldest={"e": WALL} if queued else {}, wanted=wanted)

    expected = [("w0", f"endpoint infer of {other.label}")] if reclaimed else []
    assert [(r.worker_id, r.for_endpoint) for r in result.reclaims] == expected, case
