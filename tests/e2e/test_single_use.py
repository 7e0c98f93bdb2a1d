"""A single-use (run-to-completion) endpoint on the embedded plane with real worker processes and simulated GPUs
(decision 0111): each call runs on a worker of its own, which ends with its job."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from tests.conftest import eventually, held_devices, snapshot

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _alive(pid: int) -> bool:
    """The process runs (a zombie does not count: it has ended, only its parent has not read its status yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


async def test_three_calls_run_on_three_workers_each_gone_after_its_job(make_embedded, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="flashpoint.plane")
    # two devices for three jobs: the third job's worker starts when one of the first two has ended
    embedded = make_embedded("NVIDIA_H200:2")

    @Endpoint(name="once", gpu=GpuType.NVIDIA_H200, workers=3)
    async def once(data: dict) -> dict:
        import os

        return {"n": data["n"], "pid": os.getpid(), "worker": os.environ["FLASHPOINT_WORKER_ID"]}

    once.spec = dataclasses.replace(once.spec, single_use=True)  # as the rc2 bridge declares an @app.task
    jobs = [await once.run({"n": n}) for n in range(3)]
    assert [await job.wait(timeout=60) for job in jobs] == ["COMPLETED"] * 3

    outputs: list[dict[str, Any]] = [job.output for job in jobs]
    assert [out["n"] for out in outputs] == [0, 1, 2]
    workers = [job.view.worker_id for job in jobs]
    assert len(set(workers)) == 3  # each job recorded on a worker of its own
    assert workers == [out["worker"] for out in outputs]
    assert len({out["pid"] for out in outputs}) == 3 and os.getpid() not in {out["pid"] for out in outputs}

    # every worker ended with its job: the plane has forgotten them (it does so once their process has exited) and
    # their devices are back
    await eventually(lambda: snapshot(embedded, "once")["workers"] == [], what="the workers to end")
    assert held_devices(embedded) == []
    assert not [out["pid"] for out in outputs if _alive(out["pid"])]
    # ...as normal stops: no failed start, no back-off, no "ended unexpectedly"
    ep = embedded.plane.endpoints["once"]
    assert (ep.start_failures, ep.start_losses) == (0, 0)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
