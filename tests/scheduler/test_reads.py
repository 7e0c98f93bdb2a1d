"""The plane's reads alone (``PlaneReads``), on a bare plane state through the test door: they explain from the plan
they are given and change nothing, one plan serves every endpoint row, and the fleet reads summarise GPUs for a GPU
endpoint and nodes for a CPU one.

Covers ``flashpoint.scheduler.views`` (the read models) for tests/test_layout.py."""

from __future__ import annotations

import pytest

from flashpoint import CpuInstanceType, GpuType
from flashpoint.errors import NotFoundError
from flashpoint.explain import Code, WaitReason
from flashpoint.jobs import JobStatus
from flashpoint.scheduler import planner
from flashpoint.scheduler.reads import PlaneReads
from flashpoint.scheduler.state import PlaneState
from tests.scheduler.door import add_endpoint, add_worker, plane_state


class Reads:
    """``PlaneReads`` on a bare state, with a plan the test writes, counting how often it is asked for."""

    def __init__(self) -> None:
        self.state: PlaneState = plane_state("node-a=NVIDIA_H200:2")
        self.waiting: dict[str, tuple[WaitReason, ...]] = {}
        self.plans = 0
        self.reads = PlaneReads(self.state, plan=self._plan)

    def _plan(self) -> planner.Plan:
        self.plans += 1
        return planner.Plan(starts=(), reclaims=(), waiting=self.waiting)


def busy(candidate: str) -> WaitReason:
    return WaitReason(candidate, Code.BUSY, "every device is held")


def test_an_endpoint_is_explained_from_the_plan_it_is_given_and_nothing_changes() -> None:
    r = Reads()
    ep = add_endpoint(r.state, name="e", gpu=GpuType.NVIDIA_H200)
    r.waiting = {"e": (busy("NVIDIA H200"),)}
    explanation = r.reads.explain_endpoint("e")
    assert [reason.code for reason in explanation.reasons] == [Code.BUSY]
    assert ep.waiting == () and ep.workers == {} and r.plans == 1  # a read records nothing on the endpoint
    with pytest.raises(NotFoundError, match="endpoints: e"):
        r.reads.explain_endpoint("missing")


async def test_a_queued_job_is_explained_with_its_place_in_the_queue() -> None:
    r = Reads()
    ep = add_endpoint(r.state, name="e", gpu=GpuType.NVIDIA_H200)
    book = r.state.book
    jobs = [book.create(ep, {}, None, execution_timeout_ms=None, ttl_ms=None, size=0) for _ in range(2)]
    for job in jobs:
        book.push(ep, job, front=False)
    assert r.reads.explain_job(jobs[1].id).position == 2
    assert [view.id for view in r.reads.list_jobs("e", JobStatus.IN_QUEUE)] == [jobs[1].id, jobs[0].id]


def test_one_plan_serves_every_endpoint_row() -> None:
    r = Reads()
    for name in ("a", "b", "c"):
        add_endpoint(r.state, name=name, gpu=GpuType.NVIDIA_H200)
    rows = r.reads.endpoint_rows()
    assert [row["name"] for row in rows] == ["a", "b", "c"] and r.plans == 1


def test_health_and_gauges_count_the_workers_of_each_endpoint() -> None:
    r = Reads()
    ep = add_endpoint(r.state, name="e", gpu=GpuType.NVIDIA_H200)
    add_worker(r.state, ep)
    assert r.reads.health("e")["workers"]["initializing"] == 1
    (gauges,) = r.reads.gauges()
    assert (gauges.name, gauges.queued) == ("e", 0)


def test_the_fleet_summary_names_gpus_for_a_gpu_endpoint_and_nodes_for_a_cpu_one() -> None:
    r = Reads()
    gpu = add_endpoint(r.state, name="g", gpu=GpuType.NVIDIA_H200)
    cpu = add_endpoint(r.state, name="c", cpu=CpuInstanceType.CPU3C_2_4)
    assert "H200" in r.reads.fleet_summary(gpu.spec) and r.reads.fleet_summary() == r.reads.fleet_summary(gpu.spec)
    assert "H200" not in r.reads.fleet_summary(cpu.spec)
    assert len(r.reads.fleet_view()) == 2 and [row["name"] for row in r.reads.node_view()] == ["node-a"]
