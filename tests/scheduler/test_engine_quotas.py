"""Quotas and budgets through the test door (decision 0113; the plane's side is flashpoint.scheduler.quotagate): a
request over an app's hold quota waits with code
``quota`` and starts when a worker of that app stops; a per-model quota sends a worker to the next candidate in
declared order; a key's jobs are passed over while its workers hold its quota; a spent budget refuses new jobs with
its renewal time, and takes them again once the window rolls past the use (fake clock)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.errors import BudgetSpentError
from flashpoint.explain import Code
from flashpoint.scheduler.quotas import Quota
from flashpoint.spec import EndpointSpec, ServerlessScalerType
from tests.scheduler.door import TARGET, Door, open_door
from tests.scheduler.test_quotas import FakeUsage


@dataclasses.dataclass
class Quotas:
    """The plane's quotas, as the test sets them (a ``QuotaSource``)."""

    items: list[Quota]

    def quotas(self) -> Sequence[Quota]:
        return tuple(self.items)


def app_endpoint(door: Door, app: str, env: str = "prod", **options: Any) -> EndpointSpec:
    spec = dataclasses.replace(Endpoint(**options).spec, app=app, app_env=env)
    door.plane.register(spec, TARGET)
    return spec


def by(key: str) -> dict[str, Any]:
    """A job's metadata as the intake records a key's submission."""
    return {"flashpoint": {"submitted_by": key}}


async def test_a_request_over_its_apps_quota_waits_with_code_quota_and_starts_when_a_worker_stops() -> None:
    # Given app shop may hold 2 GPUs, and two endpoints of it each wanting a worker of 1
    quotas = Quotas([Quota(app="shop", max_gpus=2)])
    door = await open_door("node-a=NVIDIA_H200:4", quotas=quotas)
    per_job = {"scaler_type": ServerlessScalerType.REQUEST_COUNT, "scaler_value": 1}
    a = app_endpoint(door, "shop", name="a", gpu=GpuType.NVIDIA_H200, workers=(0, 2), idle_timeout=5, **per_job)
    b = app_endpoint(door, "shop", env="staging", name="b", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    other = app_endpoint(door, "other", name="c", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    for key in (a.key, a.key, a.key):
        door.submit(key)
    await door.settle()
    assert len(door.workers(a.key)) == 2  # its workers_max
    # When b asks for a worker, with 2 H200s still free
    job = door.submit(b.key)
    await door.settle()
    # then it waits with code quota, naming the quota, its use and when it frees
    assert door.workers(b.key) == []
    (reason,) = door.plane.explain_endpoint(b.key).reasons
    assert reason.code is Code.QUOTA
    assert reason.detail == (
        "app shop holds 2 of its 2 GPUs (quota: --app shop --max-gpus 2); frees when one of its workers stops"
    )
    assert door.plane.explain_job(job.id).reasons == (reason,)
    assert any("quota of app shop (--app shop): holds 2 of 2 GPUs" in n for n in door.plane.explain_job(job.id).notes)
    # and another app is not held back
    door.submit(other.key)
    await door.settle()
    assert len(door.workers(other.key)) == 1
    # When one of shop's workers finishes its job and stops after its idle timeout
    first = door.workers(a.key)[0]
    (taken,) = await door.pull(first)
    await door.finish(first, taken)
    second = door.workers(a.key)[1]
    for _ in range(2):  # the second worker runs the rest, so only the first goes idle
        (more,) = await door.pull(second)
        await door.finish(second, more)
    await door.step(5)
    # then b's worker starts on the freed quota
    assert first.id in door.backend.stopped
    assert len(door.workers(b.key)) == 1
    assert {r.code for r in door.plane.explain_endpoint(b.key).reasons} == {Code.WORKER_STARTING}


async def test_a_per_model_quota_skips_to_the_next_candidate_in_declared_order() -> None:
    quotas = Quotas([Quota(app="shop", models=(("NVIDIA H200", 1),))])
    door = await open_door("node-a=NVIDIA_H200:2,NVIDIA_A100_80GB_PCIe:2", quotas=quotas)
    spec = app_endpoint(
        door,
        "shop",
        name="e",
        gpu=[GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe],
        workers=(0, 3),
        scaler_value=1,
    )
    for _ in range(3):
        door.submit(spec.key)
    await door.settle()
    for _ in range(3):
        for worker in door.workers(spec.key):
            if worker.state.value == "STARTING":
                await door.pull(worker)
        await door.step(1)
    models = [w.devices[0].model_name for w in door.workers(spec.key)]
    # the first worker takes an H200 (first in declared order); the quota sends the others to the A100s
    assert models == ["NVIDIA H200", "NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"]
    free_h200 = [row for row in door.plane.fleet_view() if row["model"] == "NVIDIA H200" and row["worker"] is None]
    assert len(free_h200) == 1  # one H200 free all along: the quota, not the fleet, held it


async def test_a_per_model_quota_waits_with_the_quota_when_no_other_candidate_fits() -> None:
    quotas = Quotas([Quota(app="shop", models=(("NVIDIA H200", 1),))])
    door = await open_door("node-a=NVIDIA_H200:2,NVIDIA_A100_80GB_PCIe:1", quotas=quotas)
    spec = app_endpoint(
        door, "shop", name="e", gpu=[GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe], workers=(2, 3)
    )
    await door.settle()
    # the minimum of 2 is an H200 and the A100; a third would be an H200 over the quota, or an A100 that is busy
    for _ in range(3):
        door.submit(spec.key)
    for worker in door.workers(spec.key):
        assert len(await door.pull(worker)) == 1
    await door.step(10)
    codes = {r.candidate: r.code for r in door.plane.explain_endpoint(spec.key).reasons}
    assert codes == {"NVIDIA H200": Code.QUOTA, "NVIDIA A100 80GB PCIe": Code.BUSY}


async def test_a_keys_jobs_are_passed_over_while_its_workers_hold_its_quota() -> None:
    # Given key ci may hold 1 GPU, and an endpoint with two idle workers of 1 GPU each
    quotas = Quotas([Quota(key="ci", max_gpus=1)])
    door = await open_door("node-a=NVIDIA_H200:2", quotas=quotas)
    spec = door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, workers=(2, 2))
    await door.settle()
    one, two = door.workers(spec.key)
    await door.pull(one)
    await door.pull(two)
    first = door.plane.submit(spec.key, {}, by("ci"))
    second = door.plane.submit(spec.key, {}, by("ci"))
    third = door.plane.submit(spec.key, {}, by("alice"))
    await door.settle()
    # When the first worker runs ci's first job
    assert await door.pull(one) == [first.id]
    # then the second worker passes ci's second job over and takes alice's; ci's stays first in the queue
    assert await door.pull(two) == [third.id]
    assert door.plane.job(second.id).status.value == "IN_QUEUE"
    assert door.plane.book.position(door.plane.endpoint(spec.key), second) == 1
    explanation = door.plane.explain_job(second.id)
    assert explanation.reasons[0].code is Code.QUOTA
    assert explanation.reasons[0].detail.startswith("key ci holds 1 of its 1 GPUs (quota: --key ci --max-gpus 1)")
    # When alice's job ends, the second worker still may not take ci's job (ci holds the first worker)
    await door.finish(two, third.id)
    assert await door.pull(two) == []
    # and once ci's first job ends, it is taken
    await door.finish(one, first.id)
    assert await door.pull(two) == [second.id]


async def test_a_worker_already_running_a_keys_job_may_take_more_of_them() -> None:
    quotas = Quotas([Quota(key="ci", max_gpus=1)])
    door = await open_door("node-a=NVIDIA_H200:2", quotas=quotas)
    spec = door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, workers=(1, 1), max_concurrency=2)
    await door.settle()
    worker = door.worker(spec.key)
    await door.pull(worker)
    jobs = [door.plane.submit(spec.key, {}, by("ci")) for _ in range(2)]
    await door.settle()
    assert await door.pull(worker, 2) == [job.id for job in jobs]  # the key holds this worker's 1 GPU either way


async def test_a_waiting_worker_takes_a_keys_job_once_its_other_job_ends() -> None:
    # Given worker two waits in a job-take long-poll while ci's second job is held back
    quotas = Quotas([Quota(key="ci", max_gpus=1)])
    door = await open_door("node-a=NVIDIA_H200:2", quotas=quotas)
    spec = door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, workers=(2, 2))
    await door.settle()
    one, two = door.workers(spec.key)
    await door.pull(one)
    await door.pull(two)
    first = door.plane.submit(spec.key, {}, by("ci"))
    await door.settle()
    assert await door.pull(one) == [first.id]
    second = door.plane.submit(spec.key, {}, by("ci"))
    await door.settle()
    waiting = asyncio.ensure_future(door.plane.take(spec.key, two.id, 1, hold_s=30))
    await door.holding(two)
    assert not waiting.done()
    # When ci's first job ends (and that is committed), the held worker is handed ci's second job
    await door.finish(one, first.id)
    await door.plane.committed()
    await door.settle()
    assert [job["id"] for job in await asyncio.wait_for(waiting, 5)] == [second.id]


async def test_no_worker_starts_for_a_queue_of_jobs_whose_key_is_at_its_quota() -> None:
    quotas = Quotas([Quota(key="ci", max_gpus=1)])
    door = await open_door("node-a=NVIDIA_H200:2", quotas=quotas)
    spec = door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, workers=(0, 2), scaler_value=1)
    first = door.plane.submit(spec.key, {}, by("ci"))
    await door.settle()
    worker = door.worker(spec.key)
    assert await door.pull(worker) == [first.id]
    door.plane.submit(spec.key, {}, by("ci"))
    await door.step(5)
    assert len(door.workers(spec.key)) == 1  # a second worker could not take ci's job: none starts
    assert {r.code for r in door.plane.explain_endpoint(spec.key).reasons} == {Code.QUOTA}


async def test_a_spent_budget_refuses_new_jobs_with_its_renewal_and_renews_when_the_window_rolls() -> None:
    quotas = Quotas([Quota(app="shop", gpu_hours=2.0, period_s=3600)])
    door = await open_door("node-a=NVIDIA_H200:2", quotas=quotas)
    now = door.clock.time()
    # Given shop used 2 GPUs for the last half hour: 1 GPU-hour of its 2, under the budget
    usage = FakeUsage([("shop", "prod", None, now - 1800, now, 2)])
    door.plane.quotas.meter = usage  # the plane's meter, as the test says
    spec = app_endpoint(door, "shop", name="e", gpu=GpuType.NVIDIA_H200)
    door.submit(spec.key)
    # When it has used 2 GPU-hours in the last hour
    usage.spans.append(("shop", "prod", None, now - 3600, now - 1800, 2))
    with pytest.raises(BudgetSpentError) as refused:
        door.submit(spec.key)
    # then a new job is refused, naming the budget and when it renews: when the first second of use ages out
    assert "the GPU-hour budget of app shop is spent: 2.00 of its 2 GPU-hours in the last 1h" in str(refused.value)
    assert "(quota: --app shop --gpu-hours 2 --period 1h)" in str(refused.value)
    assert refused.value.renews_at == now + 1
    assert refused.value.retry_after_s == 1
    assert len(door.plane.list_jobs(spec.key)) == 1  # nothing was stored for it
    # and other apps are not refused
    other = app_endpoint(door, "other", name="e", gpu=GpuType.NVIDIA_H200)
    door.submit(other.key)
    # When the window rolls past that second, a job is taken again
    door.clock.advance(1)
    assert door.submit(spec.key).status.value == "IN_QUEUE"


async def test_a_keys_spent_budget_refuses_its_jobs_only() -> None:
    quotas = Quotas([Quota(key="ci", gpu_hours=1.0, period_s=86400)])
    door = await open_door("node-a=NVIDIA_H200:2", quotas=quotas)
    now = door.clock.time()
    door.plane.quotas.meter = FakeUsage([(None, None, "ci", now - 7200, now - 3600, 1)])
    spec = door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    with pytest.raises(BudgetSpentError, match="budget of key ci is spent"):
        door.plane.submit(spec.key, {}, by("ci"))
    door.plane.submit(spec.key, {}, by("alice"))
    door.plane.submit(spec.key, {})
    # it renews 24 h after its use began (then an hour of it is still in the window: not under the budget until
    # its first second is out)
    with pytest.raises(BudgetSpentError) as refused:
        door.plane.submit(spec.key, {}, by("ci"))
    assert refused.value.renews_at == now - 7200 + 86400 + 1


async def test_quotas_of_a_plane_without_any_change_nothing() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    spec = app_endpoint(door, "shop", name="e", gpu=GpuType.NVIDIA_H200)
    door.plane.submit(spec.key, {}, by("ci"))
    await door.settle()
    assert len(door.workers(spec.key)) == 1
    assert door.plane.quotas.rows() == []


async def test_a_budget_is_read_from_the_planes_usage_meter() -> None:
    # Given app shop may use 1 GPU-hour a day, and its worker of 1 GPU runs a job for an hour
    quotas = Quotas([Quota(app="shop", gpu_hours=1.0, period_s=86400)])
    door = await open_door("node-a=NVIDIA_H200:2", quotas=quotas)
    spec = app_endpoint(door, "shop", name="e", gpu=GpuType.NVIDIA_H200, idle_timeout=5)
    began = door.clock.time()
    job = door.submit(spec.key)
    await door.settle()
    worker = door.worker(spec.key)
    assert await door.pull(worker) == [job.id]
    await door.step(1800)
    door.submit(spec.key)  # half an hour used: taken
    await door.step(1800)
    # When the hour is used, a new job is refused: the meter's use, not the test's
    with pytest.raises(BudgetSpentError) as refused:
        door.submit(spec.key)
    assert "the GPU-hour budget of app shop is spent" in str(refused.value)
    # it renews a day after the use began (the minute buckets of the meter may put it up to a minute later)
    assert began + 86400 <= refused.value.renews_at <= began + 86400 + 60
    # When the jobs end, the worker stops, and the day rolls past the renewal, jobs are taken again
    await door.finish(worker, job.id)
    (second,) = await door.pull(worker)
    await door.finish(worker, second)
    await door.step(5)
    assert door.workers(spec.key) == []
    door.clock.advance(refused.value.renews_at + 120 - door.clock.time())
    assert door.submit(spec.key).status.value == "IN_QUEUE"
