"""CPU capacity end to end: real worker processes on an embedded server whose machine declares its CPUs.

A CPU worker reserves its instance's vCPUs and memory, so a second worker that would oversubscribe the node waits
``cpu_busy`` while the first runs; each worker is pinned to the cores it was allotted (``FLASHPOINT_CPU_CORES``,
applied by the worker at startup). The rules themselves are unit tests through the test door
(tests/scheduler/test_engine_nodes.py); what only processes show is here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flashpoint import Endpoint
from tests.conftest import snapshot

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def affinity_after(gate: str) -> dict[str, object]:
    """Run inside a worker: wait for the test to open ``gate`` (the job stays IN_PROGRESS until then), then say which
    cores this process may run on and which it was allotted."""
    import os
    import time
    from pathlib import Path

    while not Path(gate).exists():
        time.sleep(0.02)  # the handler's own work: it holds its job until the test lets it go
    return {"affinity": sorted(os.sched_getaffinity(0)), "cores": os.environ.get("FLASHPOINT_CPU_CORES")}


async def becomes(job: object, status: str) -> None:
    from tests.conftest import eventually_async

    async def check() -> bool:
        return bool(await job.status() == status)  # type: ignore[attr-defined]

    await eventually_async(check, timeout=60, what=f"job to become {status}")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a machine that may run on two CPUs")
async def test_a_cpu_endpoint_runs_one_worker_at_a_time_on_two_declared_cpus(make_embedded, tmp_path: Path) -> None:
    # Given a machine that declares 2 CPUs and 8 GB, and an endpoint of cpu3c-2-4 workers that would like two
    embedded = make_embedded("", FLASHPOINT_CPUS="2", FLASHPOINT_MEMORY_GB="8")
    gate = str(tmp_path / "gate")

    @Endpoint(name="capped", cpu="cpu3c-2-4", workers=(0, 2), scaler_type="REQUEST_COUNT", scaler_value=1)
    async def capped(gate: str) -> dict:
        return affinity_after(gate)

    # When a first job runs
    first = await capped.run(gate)
    await becomes(first, "IN_PROGRESS")
    second = await capped.run(gate)

    # Then a second worker would oversubscribe the node: the second job waits, and says why
    explanation = await second.explain()
    assert explanation.status == "IN_QUEUE"
    assert {r.code.value for r in explanation.reasons} == {"cpu_busy"}
    assert "cpu3c-2-4 needs 2 vCPUs and 4 GB; the most free on one node is 0 vCPUs and 4 GB" in str(explanation)
    assert len(snapshot(embedded, "capped")["workers"]) == 1

    # And once the first ends, it runs on the same worker: one worker at a time, pinned to both declared cores
    Path(gate).touch()
    assert await first.wait(timeout=60) == "COMPLETED"
    assert await second.wait(timeout=60) == "COMPLETED"
    assert first.view.worker_id == second.view.worker_id
    cores = sorted(os.sched_getaffinity(0))[:2]  # this machine's first two: what FLASHPOINT_CPUS=2 declares
    assert first.output == {"affinity": cores, "cores": ",".join(map(str, cores))}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a machine that may run on two CPUs")
async def test_two_one_cpu_workers_are_pinned_to_a_core_each(make_embedded, tmp_path: Path) -> None:
    # Given 2 declared CPUs (this machine's first two) and an endpoint of 1-vCPU workers, two of them at once
    make_embedded("", FLASHPOINT_CPUS="2", FLASHPOINT_MEMORY_GB="8")
    first_core, second_core = sorted(os.sched_getaffinity(0))[:2]
    gate = str(tmp_path / "gate")

    @Endpoint(name="pinned", cpu="cpu3c-1-2", workers=(0, 2), scaler_type="REQUEST_COUNT", scaler_value=1)
    async def pinned(gate: str) -> dict:
        return affinity_after(gate)

    jobs = [await pinned.run(gate), await pinned.run(gate)]
    for job in jobs:
        await becomes(job, "IN_PROGRESS")
    Path(gate).touch()
    for job in jobs:
        assert await job.wait(timeout=60) == "COMPLETED"

    # Then each worker may run on its own core only
    outputs = sorted((job.output["cores"], job.output["affinity"]) for job in jobs)
    assert outputs == [(str(first_core), [first_core]), (str(second_core), [second_core])]
