"""Scaling rules through the test door (StubBackend + FakeClock): scalers, idle timeout, scale to zero, idle yield,
declared order, workers_max, the reasons an endpoint waits, and reads that change nothing."""

from __future__ import annotations

import pytest

from flashpoint import GpuGroup, GpuType
from flashpoint.scheduler.records import WorkerState
from flashpoint.spec import ServerlessScalerType
from tests.scheduler.door import open_door


async def test_queue_delay_starts_one_worker_at_once_and_another_only_after_the_delay() -> None:
    door = await open_door("node-a=NVIDIA_H200:4")
    door.endpoint(name="qd", gpu=GpuType.NVIDIA_H200, workers=(0, 3), scaler_value=4)
    door.submit("qd")
    door.submit("qd")
    await door.settle()
    assert len(door.backend.started) == 1  # the first worker at once
    first = door.worker("qd")
    assert await door.pull(first)  # it takes one job and is busy; one job still waits
    await door.step(3.9)
    assert len(door.backend.started) == 1
    assert door.reasons("qd") == {"scaler"}
    await door.step(0.1)  # the oldest queued job has waited scaler_value seconds
    assert len(door.backend.started) == 2


async def test_queue_delay_adds_no_worker_while_one_is_idle_or_starting() -> None:
    door = await open_door("node-a=NVIDIA_H200:4")
    door.endpoint(name="qd", gpu=GpuType.NVIDIA_H200, workers=(0, 3), scaler_value=1)
    door.submit("qd")
    await door.settle()
    await door.step(5)  # the worker is still starting: no second one, however long the job waits
    assert len(door.backend.started) == 1
    assert door.reasons("qd") == {"worker_starting"}


async def test_request_count_wants_one_worker_per_scaler_value_jobs() -> None:
    door = await open_door("node-a=NVIDIA_H200:8")
    door.endpoint(
        name="rc",
        gpu=GpuType.NVIDIA_H200,
        workers=(0, 4),
        scaler_type=ServerlessScalerType.REQUEST_COUNT,
        scaler_value=2,
    )
    for _ in range(5):
        door.submit("rc")
    await door.settle()
    assert len(door.backend.started) == 3  # ceil(5 / 2)
    for _ in range(6):
        door.submit("rc")
    await door.settle()
    assert len(door.backend.started) == 4  # ceil(11 / 2) = 6, capped at workers_max


async def test_idle_worker_stops_after_idle_timeout_and_the_endpoint_scales_to_zero() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, idle_timeout=10)
    job = door.submit("e")
    await door.settle()
    worker = door.worker("e")
    assert await door.pull(worker) == [job.id]
    await door.finish(worker, job.id)
    await door.step(9.9)
    assert worker.state is WorkerState.IDLE
    await door.step(0.1)
    assert door.backend.stopped == [worker.id]
    assert door.workers("e") == []
    assert all(row["worker"] is None for row in door.plane.fleet_view())  # its devices are back


async def test_workers_min_are_kept_warm_past_the_idle_timeout() -> None:
    door = await open_door()
    door.endpoint(name="warm", gpu=GpuType.NVIDIA_H200, workers=(1, 2), idle_timeout=1)
    await door.settle()
    worker = door.worker("warm")  # started with nothing queued: the minimum
    await door.pull(worker)
    await door.step(100)
    assert door.backend.stopped == []
    assert worker.state is WorkerState.IDLE


async def test_an_idle_worker_with_jobs_still_queued_is_not_scaled_down() -> None:
    door = await open_door()
    door.endpoint(name="lazy", gpu=GpuType.NVIDIA_H200, idle_timeout=0)
    door.submit("lazy")
    await door.settle()
    worker = door.worker("lazy")
    door.plane.ping("lazy", worker.id, [])  # a ping before its first pull makes it ready (idle), job still queued
    await door.step(1)
    assert worker.state is WorkerState.IDLE and door.backend.stopped == []


async def test_an_idle_worker_yields_its_devices_at_once_to_another_endpoint() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="a", gpu=GpuType.NVIDIA_H200, idle_timeout=600)
    door.endpoint(name="b", gpu=GpuType.NVIDIA_H200, idle_timeout=600)
    job = door.submit("a")
    await door.settle()
    a = door.worker("a")
    await door.pull(a)
    await door.finish(a, job.id)  # a is idle, above its minimum of 0, nothing queued
    door.submit("b")
    await door.settle()
    assert door.backend.stopped == [a.id]  # not after its idle_timeout of 600 s: now
    assert [w.devices for w in door.workers("b")] == [a.devices]


async def test_declared_order_beats_yielding_an_earlier_candidate_is_reclaimed_before_a_later_free_one() -> None:
    door = await open_door("node-a=NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:1")
    door.endpoint(name="holder", gpu=GpuType.NVIDIA_H200)
    door.endpoint(name="picky", gpu=[GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe])
    job = door.submit("holder")
    await door.settle()
    holder = door.worker("holder")
    await door.pull(holder)
    await door.finish(holder, job.id)
    door.submit("picky")
    await door.settle()
    picky = door.worker("picky")
    assert picky.placement().gpu_model == "NVIDIA H200"  # the A100 was free, but the H200 comes first
    assert door.backend.stopped == [holder.id]


async def test_a_busy_worker_never_yields() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="a", gpu=GpuType.NVIDIA_H200)
    door.endpoint(name="b", gpu=GpuType.NVIDIA_H200)
    door.submit("a")
    await door.settle()
    await door.pull(door.worker("a"))
    door.submit("b")
    await door.settle()
    assert door.backend.stopped == [] and door.workers("b") == []
    explanation = door.plane.explain_endpoint("b")
    assert [(r.code.value, r.holders) for r in explanation.reasons] == [("busy", ("a",))]


async def test_stopping_workers_count_against_workers_max() -> None:
    door = await open_door("node-a=NVIDIA_H200:2", exit_on_stop=False)
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, workers=(0, 1), idle_timeout=1)
    job = door.submit("e")
    await door.settle()
    old = door.worker("e")
    await door.pull(old)
    await door.finish(old, job.id)
    await door.step(1)  # idle timeout: asked to stop, but its process has not exited yet
    assert old.state is WorkerState.STOPPING
    door.submit("e")
    await door.settle()
    assert door.backend.started == [old.id]  # a free H200 exists, but the endpoint may hold one worker's devices
    assert door.reasons("e") == {"max_workers"}
    door.backend.exit(old.id, -15)
    await door.settle()
    assert len(door.backend.started) == 2


async def test_all_workers_busy_at_the_maximum_is_max_workers() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    door.submit("e")
    door.submit("e")
    await door.settle()
    await door.pull(door.worker("e"))
    assert door.reasons("e") == {"max_workers"}


@pytest.mark.parametrize(
    ("fleet", "gpu", "gpu_count", "codes", "never"),
    [
        ("node-a=NVIDIA_H200:1", GpuType.NVIDIA_B200, 1, ["not_in_fleet"], True),
        ("node-a=NVIDIA_H200:1;node-b=NVIDIA_H200:1", GpuType.NVIDIA_H200, 2, ["not_in_fleet"], True),
        ("node-a=NVIDIA_H200:1", [GpuType.NVIDIA_B200, GpuGroup.ANY], 1, ["worker_starting"], False),
        ("node-a=NVIDIA_H200:1", [GpuType.NVIDIA_B200, GpuType.NVIDIA_H200], 1, ["worker_starting"], False),
    ],
)
async def test_verdicts_before_any_worker_starts(
    fleet: str, gpu: object, gpu_count: int, codes: list[str], never: bool
) -> None:
    door = await open_door(fleet)
    door.endpoint(name="e", gpu=gpu, gpu_count=gpu_count)
    door.submit("e")
    explanation = door.plane.explain_endpoint("e")
    assert [r.code.value for r in explanation.reasons] == codes
    assert explanation.never is never


async def test_start_backoff_is_a_reason_with_the_captured_error() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    door.submit("e")
    await door.settle()
    worker = door.worker("e")
    door.backend.line(worker.id, "stderr", "ImportError: no module named torch")
    await door.crash(worker, 1)
    explanation = door.plane.explain_endpoint("e")
    assert [r.code.value for r in explanation.reasons] == ["start_backoff"]
    assert "no module named torch" in explanation.reasons[0].detail


async def test_reads_never_start_or_stop_a_worker() -> None:
    # Given a queued job whose worker the next reconcile would start, and an idle worker a waiter would reclaim
    door = await open_door("node-a=NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:1")
    door.endpoint(name="idle", gpu=GpuType.NVIDIA_A100_80GB_PCIe)
    job = door.submit("idle")
    await door.settle()
    idle = door.worker("idle")
    await door.pull(idle)
    await door.finish(idle, job.id)
    door.endpoint(name="wants-h200", gpu=GpuType.NVIDIA_H200)
    door.endpoint(name="wants-a100", gpu=GpuType.NVIDIA_A100_80GB_PCIe)
    queued = door.submit("wants-h200")
    door.submit("wants-a100")
    started, workers = list(door.backend.started), dict(door.plane.workers)
    # When every read runs before the loop gets to reconcile
    door.plane.explain_endpoint("wants-h200")
    door.plane.explain_job(queued.id)
    door.plane.endpoint_rows()
    door.plane.health("wants-a100")
    door.plane.fleet_view()
    door.plane.gauges()
    # Then nothing was started or stopped, and the fleet is held as before
    assert door.backend.started == started and door.backend.stopped == [] and door.plane.workers == workers
    assert [row["worker"] for row in door.plane.fleet_view()] == [None, idle.id]
    # And the plan they read is what reconcile then does: start one, reclaim the idle A100 for the other
    await door.settle()
    assert door.backend.stopped == [idle.id]
    assert [w.placement().gpu_model for e in ("wants-h200", "wants-a100") for w in door.workers(e)] == [
        "NVIDIA H200",
        "NVIDIA A100 80GB PCIe",
    ]


async def test_fallback_follows_the_declared_order_as_devices_are_held_and_freed() -> None:
    # H200 declared first, although the A100 comes first in the fleet and in the catalog
    door = await open_door("node-a=NVIDIA_A100_80GB_PCIe:1,NVIDIA_H200:1")
    door.endpoint(
        name="fallback",
        gpu=[GpuType.NVIDIA_H200, GpuGroup.AMPERE_80],
        workers=(0, 2),
        idle_timeout=0,
        scaler_type=ServerlessScalerType.REQUEST_COUNT,
        scaler_value=1,
    )
    first = door.submit("fallback")
    await door.settle()
    (h200,) = door.workers("fallback")
    assert h200.placement().gpu_model == "NVIDIA H200"
    await door.pull(h200)
    door.submit("fallback")
    await door.settle()
    a100 = door.workers("fallback")[1]
    assert a100.placement().gpu_model == "NVIDIA A100 80GB PCIe"  # the H200 is busy: the next candidate
    await door.pull(a100)
    await door.finish(h200, first.id)
    await door.step(0)  # idle_timeout=0: the H200's worker stops and its device returns
    door.submit("fallback")
    await door.settle()
    assert [w.placement().gpu_model for w in door.workers("fallback")] == ["NVIDIA A100 80GB PCIe", "NVIDIA H200"]
