"""Preemption with real worker processes on the embedded plane and one simulated GPU (decision 0115): a job of a
low-class preemptible endpoint is running when a high-class job arrives; its worker is told to stop, the job goes
back to its queue (``IN_QUEUE``, reason ``preempted``, not a retry), the high-class job runs, and the preempted job
completes later on a new worker, with its first run listed as an attempt."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashpoint import Endpoint, GpuType
from tests.conftest import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_a_preempted_job_returns_to_its_queue_and_completes_later(make_embedded, tmp_path: Path) -> None:
    embedded = make_embedded("NVIDIA_H200:1", FLASHPOINT_PREEMPT_GRACE_S="2")

    @Endpoint(name="train", gpu=GpuType.NVIDIA_H200, priority="low", preemptible=True, idle_timeout=0)
    async def train(marker: str) -> dict:
        import asyncio
        import os
        from pathlib import Path

        first = not Path(marker).exists()
        Path(marker).write_text(os.environ["FLASHPOINT_WORKER_ID"])
        if first:  # the first run holds the GPU far longer than the test waits: only preemption ends it
            await asyncio.sleep(600)
        return {"worker": os.environ["FLASHPOINT_WORKER_ID"], "first": first}

    @Endpoint(name="chat", gpu=GpuType.NVIDIA_H200, priority="high", idle_timeout=0)
    async def chat(text: str) -> str:
        return text.upper()

    marker = tmp_path / "train-started"
    training = await train.run(marker=str(marker))
    await eventually(marker.exists, timeout=60, what="the training job to start on its worker")
    first_worker = marker.read_text()

    answer = await chat.run(text="hi")
    assert await answer.wait(timeout=60) == "COMPLETED"
    assert answer.output == "HI"

    assert await training.wait(timeout=90) == "COMPLETED"
    view = training.view
    assert training.output == {"worker": view.worker_id, "first": False}
    assert view.worker_id != first_worker and view.retries == 0  # a new worker; not counted as a retry
    (attempt,) = view.attempts
    assert attempt["outcome"] == "preempted" and attempt["workerId"] == first_worker
    assert attempt["placement"]["gpuModel"] == "NVIDIA H200" and attempt["placement"]["simulated"] is True

    # it was cut short because chat came: its run ended after chat's job was submitted, and it started again after
    assert attempt["startedAt"] < answer.view.created_at <= attempt["endedAt"]
    assert embedded.plane.job(training.id).started_at >= attempt["endedAt"]
