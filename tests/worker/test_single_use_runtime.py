"""A single-use worker's runtime (decision 0111) against the recording plane of ``test_runtime.py`` on loopback: it
asks for one job, runs it, posts its result without asking for more, and ``run`` returns by itself."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flashpoint.worker.runtime import Runtime
from tests.worker.test_runtime import RecordingPlane, serve, urls

pytestmark = pytest.mark.timeout(60)


async def test_a_single_use_worker_takes_one_job_posts_its_result_and_returns() -> None:
    async def handler(job: dict[str, Any], emit: Any) -> int:
        return int(job["input"]["n"]) * 10

    plane = RecordingPlane([{"id": f"j{n}", "input": {"n": n}} for n in range(3)])
    async for base in serve(plane):
        runtime = Runtime(handler, urls(base), "key", concurrency=4, single_use=True)
        await asyncio.wait_for(runtime.run(), 20)  # returns by itself: nobody called stop()

    assert plane.results == {"j0": 0}
    assert [job["id"] for job in plane.queue] == ["j1", "j2"]  # the others are left for other workers
    kinds = [(kind, query.get("batch_size"), query.get("take"), ids) for kind, query, ids in plane.requests]
    assert kinds == [("take-batch", "1", None, None), ("done-batch", None, None, ["j0"])]


async def test_a_single_use_worker_whose_job_was_stopped_before_it_started_ends_too() -> None:
    ran: list[str] = []

    async def handler(job: dict[str, Any], emit: Any) -> str:
        ran.append(job["id"])
        return "done"

    plane = RecordingPlane([{"id": "early", "input": {}}, {"id": "later", "input": {}}])
    async for base in serve(plane):
        runtime = Runtime(handler, urls(base), "key", single_use=True)
        runtime.apply_stops(["early"])  # the cancel reached the worker before its job did
        await asyncio.wait_for(runtime.run(), 20)

    assert ran == [] and plane.results == {}
    assert [job["id"] for job in plane.queue] == ["later"]
