"""The worker runtime's pull loop against a small recording plane on loopback (real HTTP): jobs come in batches,
results that finish together leave in one post whose answer carries the next jobs, and stopping drains."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from flashpoint.worker.runtime import Runtime, Urls

pytestmark = pytest.mark.timeout(60)


class RecordingPlane:
    """Serves job-take-batch and job-done-batch from a list of jobs, and records every request."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.queue = list(jobs)
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.results: dict[str, Any] = {}
        #: the error records of failed results
        self.errors: dict[str, Any] = {}
        self.all_done = asyncio.Event()
        self.total = len(jobs)

    def _jobs(self, count: int) -> Response:
        handed, self.queue = self.queue[:count], self.queue[count:]
        return JSONResponse(handed) if handed else Response(status_code=204)

    async def take_batch(self, request: Request) -> Response:
        self.requests.append(("take-batch", dict(request.query_params), None))
        if not self.queue:
            await asyncio.sleep(0.05)  # a short hold, as the plane's long-poll
        return self._jobs(int(request.query_params["batch_size"]))

    async def done_batch(self, request: Request) -> Response:
        results = json.loads(await request.body())
        self.requests.append(("done-batch", dict(request.query_params), [r["id"] for r in results]))
        for result in results:
            self.results[result["id"]] = result.get("output")
            if "error" in result:
                self.errors[result["id"]] = json.loads(result["error"])
        if len(self.results) == self.total:
            self.all_done.set()
        return self._jobs(int(request.query_params.get("take", "0")))

    async def other(self, request: Request) -> Response:
        if "job-stop" in request.url.path:
            await asyncio.sleep(0.2)
            return Response(status_code=204)
        return JSONResponse({})


async def serve(plane: RecordingPlane) -> AsyncIterator[str]:
    app = Starlette(
        routes=[
            Route("/v2/ep/job-take-batch/w1", plane.take_batch),
            Route("/v2/ep/job-done-batch/w1", plane.done_batch, methods=["POST"]),
            Route("/v2/ep/{rest:path}", plane.other, methods=["GET", "POST"]),
        ]
    )
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms delayed-ACK waits between head and body
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not serving.done()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
        sock.close()


def urls(base: str) -> Urls:
    return Urls(
        take=f"{base}/v2/ep/job-take/w1?gpu=x",
        done=f"{base}/v2/ep/job-done/w1/$ID?gpu=x",
        chunk=f"{base}/v2/ep/job-stream/w1/$ID?gpu=x",
        ping="",
    )


async def test_results_that_finish_together_leave_in_one_post_that_takes_the_next_jobs() -> None:
    gate = asyncio.Event()

    async def handler(job: dict[str, Any], emit: Any) -> int:
        await gate.wait()
        return int(job["input"]["n"]) * 10

    plane = RecordingPlane([{"id": f"j{n}", "input": {"n": n}} for n in range(6)])
    async for base in serve(plane):
        runtime = Runtime(handler, urls(base), "key", concurrency=3)
        running = asyncio.create_task(runtime.run())
        for _ in range(500):  # bounded wait for the first batch to be running
            if len(runtime.running) == 3:
                break
            await asyncio.sleep(0.01)
        assert sorted(runtime.running) == ["j0", "j1", "j2"]
        gate.set()
        await asyncio.wait_for(plane.all_done.wait(), 20)
        runtime.stop()
        await asyncio.wait_for(running, 20)

    assert plane.results == {f"j{n}": n * 10 for n in range(6)}
    kinds = [(kind, query.get("batch_size") or query.get("take"), ids) for kind, query, ids in plane.requests]
    assert kinds[0] == ("take-batch", "3", None)  # three free slots, one request
    # the three results of the first batch in one post, which asked for three more jobs and got them
    assert ("done-batch", "3", ["j0", "j1", "j2"]) in kinds
    assert ("done-batch", "3", ["j3", "j4", "j5"]) in kinds or ("done-batch", None, ["j3", "j4", "j5"]) in kinds
    assert sum(1 for kind, _, _ in kinds if kind == "done-batch") == 2


async def test_a_result_finishing_while_a_take_is_held_goes_out_at_once_and_stop_drains() -> None:
    release = {"slow": asyncio.Event()}

    async def handler(job: dict[str, Any], emit: Any) -> str:
        if job["id"] == "slow":
            await release["slow"].wait()
        return str(job["id"])

    plane = RecordingPlane([{"id": "fast", "input": {}}, {"id": "slow", "input": {}}])
    async for base in serve(plane):
        runtime = Runtime(handler, urls(base), "key", concurrency=3)
        running = asyncio.create_task(runtime.run())
        for _ in range(500):  # the fast result is posted while the slow job still runs
            if "fast" in plane.results:
                break
            await asyncio.sleep(0.01)
        assert plane.results == {"fast": "fast"} and list(runtime.running) == ["slow"]
        runtime.stop()  # stop taking; the running job still finishes and is posted
        release["slow"].set()
        await asyncio.wait_for(running, 20)
    assert plane.results == {"fast": "fast", "slow": "slow"}
    assert plane.requests[-1][0] == "done-batch" and plane.requests[-1][1].get("take") is None


class FlakyPlane(RecordingPlane):
    """Answers the first ``failures`` take requests with 503, then serves as RecordingPlane."""

    def __init__(self, jobs: list[dict[str, Any]], failures: int) -> None:
        super().__init__(jobs)
        self.failures = failures

    async def take_batch(self, request: Request) -> Response:
        if self.failures > 0:
            self.failures -= 1
            self.requests.append(("503", dict(request.query_params), None))
            return JSONResponse({"error": "busy"}, status_code=503)
        return await super().take_batch(request)


async def test_back_off_ends_when_its_timer_fires_even_a_hair_early() -> None:
    # Timers may fire a little before the loop's clock reaches their time (seen under uvloop). Here every timer fires
    # at half its delay: a back-off that compared the clock with a resume time waited forever on a wake-up nobody sent.
    loop = asyncio.get_running_loop()
    call_later = loop.call_later

    def early(delay: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        return call_later(delay / 2, callback, *args, **kwargs)

    async def handler(job: dict[str, Any], emit: Any) -> int:
        return int(job["input"]["n"])

    plane = FlakyPlane([{"id": "j1", "input": {"n": 7}}], failures=3)
    async for base in serve(plane):
        runtime = Runtime(handler, urls(base), "key")
        loop.call_later = early  # type: ignore[method-assign]
        try:
            running = asyncio.create_task(runtime.run())
            await asyncio.wait_for(plane.all_done.wait(), 20)
        finally:
            loop.call_later = call_later  # type: ignore[method-assign]
        runtime.stop()
        await asyncio.wait_for(running, 20)
    assert plane.results == {"j1": 7}
    assert [kind for kind, _, _ in plane.requests][:3] == ["503", "503", "503"]


async def test_results_are_batched_under_the_post_limit_and_an_oversized_one_becomes_its_error() -> None:
    gate = asyncio.Event()

    async def handler(job: dict[str, Any], emit: Any) -> str:
        await gate.wait()
        return "x" * int(job["input"]["size"])

    sizes = {"a": 400, "b": 400, "c": 400, "huge": 5000}
    plane = RecordingPlane([{"id": job_id, "input": {"size": size}} for job_id, size in sizes.items()])
    async for base in serve(plane):
        runtime = Runtime(handler, urls(base), "key", concurrency=4, max_post_bytes=1000)
        running = asyncio.create_task(runtime.run())
        for _ in range(500):  # bounded wait for all four to be running
            if len(runtime.running) == 4:
                break
            await asyncio.sleep(0.01)
        gate.set()
        await asyncio.wait_for(plane.all_done.wait(), 20)
        runtime.stop()
        await asyncio.wait_for(running, 20)
    assert {job_id: len(plane.results[job_id] or "") for job_id in "abc"} == {"a": 400, "b": 400, "c": 400}
    assert plane.results["huge"] is None  # its result became an error: the plane could never take it
    posts = [ids for kind, _, ids in plane.requests if kind == "done-batch"]
    assert all(len(ids) <= 2 for ids in posts)  # 3 x 400 bytes of output do not fit one post of 1000 bytes
    assert sorted(job_id for ids in posts for job_id in ids) == ["a", "b", "c", "huge"]
    assert plane.errors["huge"]["reason"] == "output_too_large"


async def test_a_stop_that_comes_before_its_job_started_keeps_it_from_running() -> None:
    # The take's answer and the stop travel on two connections: a cancel can reach the worker first
    ran: list[str] = []

    async def handler(job: dict[str, Any], emit: Any) -> str:
        ran.append(job["id"])
        return "done"

    runtime = Runtime(handler, urls("http://127.0.0.1:9"), "key")
    runtime.apply_stops(["early"])
    runtime._start({"id": "early", "input": {}})
    runtime._start({"id": "other", "input": {}})
    await asyncio.gather(*runtime.running.values())
    assert ran == ["other"]
    # a late stop for a job that already ended here does not stop a later run of the same id
    runtime.apply_stops(["other"])
    runtime._start({"id": "other", "input": {}})
    await asyncio.gather(*runtime.running.values())
    assert ran == ["other", "other"]
    # and a stop for a running job cancels it
    gate = asyncio.Event()

    async def blocked(job: dict[str, Any], emit: Any) -> str:
        await gate.wait()
        return "never"

    runtime.handler = blocked
    runtime._start({"id": "slow", "input": {}})
    task = runtime.running["slow"]
    await asyncio.sleep(0)
    runtime.apply_stops(["slow", 7, None])
    with pytest.raises(asyncio.CancelledError):
        await task
