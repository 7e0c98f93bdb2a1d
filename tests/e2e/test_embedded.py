"""End to end on the embedded server: real worker processes pulling over HTTP on loopback; simulated GPUs only.

What only processes show lives here: environments, handlers, signals, exits, output. The scheduling rules (fallback
order, scaling, yielding, retries, timeouts by the clock) are unit tests through the test door (tests/scheduler).
Tests that start worker processes are marked ``slow``; three quick ones stay in the quick suite as a smoke test.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flashpoint import Endpoint, GpuGroup, GpuType, JobCancelledError, JobFailedError, JobTimeoutError
from tests.conftest import eventually, held_devices, snapshot

pytestmark = pytest.mark.timeout(90)


def gate_file(tmp_path: Path, name: str) -> str:
    return str(tmp_path / f"gate-{name}")


def open_gate(path: str) -> None:
    Path(path).touch()


async def test_call_returns_output_and_records_placement(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2")

    @Endpoint(name="inference", gpu=GpuGroup.AMPERE_80, env={"GREETING": "hi"})
    async def infer(data: dict) -> dict:
        import os

        keys = (
            "CUDA_VISIBLE_DEVICES",
            "FLASHPOINT_GPU_MODEL",
            "FLASHPOINT_GPU_SIMULATED",
            "FLASHPOINT_ENDPOINT",
            "FLASHPOINT_WORKER_ID",
            "GREETING",
        )
        return {"echo": data, "env": {k: os.environ.get(k) for k in keys}}

    out = await infer({"x": 1})
    assert out["echo"] == {"x": 1}
    env = out["env"]
    # fleet order: H200 is device 0, the two A100 PCIe are 1 and 2; AMPERE_80 lists PCIe first
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["FLASHPOINT_GPU_MODEL"] == "NVIDIA A100 80GB PCIe"
    assert env["FLASHPOINT_GPU_SIMULATED"] == "1"
    assert env["FLASHPOINT_ENDPOINT"] == "inference"
    assert env["FLASHPOINT_WORKER_ID"].startswith("inference-")
    assert env["GREETING"] == "hi"

    job = await infer.run({"x": 2})
    assert await job.status() in ("IN_QUEUE", "IN_PROGRESS", "COMPLETED")
    assert await job.wait(timeout=30) == "COMPLETED"
    assert job.output["echo"] == {"x": 2}
    view = job.view
    assert view.placement is not None
    assert (view.placement.node, view.placement.gpu_model, view.placement.device_ids, view.placement.simulated) == (
        "node-a",
        "NVIDIA A100 80GB PCIe",
        (1,),
        True,
    )
    assert view.worker_id == env["FLASHPOINT_WORKER_ID"]
    assert view.delay_time_ms is not None and view.execution_time_ms is not None
    assert view.reason is not None and view.reason.value == "completed"


async def test_new_job_first_status_is_in_queue(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    async def never(data: dict) -> dict:
        return data

    job = await never.run({"x": 1})
    assert await job.status() == "IN_QUEUE"
    await job.cancel()


async def test_impossible_request_warns_at_once_and_waits_in_queue(make_embedded, caplog) -> None:
    make_embedded("NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2")
    caplog.set_level(logging.WARNING, logger="flashpoint.plane")

    @Endpoint(name="too-big", gpu=GpuGroup.AMPERE_80, gpu_count=4)
    async def big(data: dict) -> dict:
        return data

    job = await big.run({"x": 1})
    warnings = [r.getMessage() for r in caplog.records if r.name == "flashpoint.plane"]
    assert len(warnings) == 1
    assert "no node of this fleet can ever provide" in warnings[0]
    assert "2 x NVIDIA A100 80GB PCIe" in warnings[0]  # names what the fleet has
    assert "lower gpu_count to 2" in warnings[0] and "fallback" not in warnings[0]  # fewer, not another model
    explanation = await job.explain()
    assert explanation.never is True
    assert explanation.position == 1
    assert [r.code.value for r in explanation.reasons] == ["not_in_fleet", "not_in_fleet"]
    assert "most on one node is 2" in explanation.reasons[0].detail
    assert await job.status() == "IN_QUEUE"
    assert await job.cancel() == "CANCELLED"
    with pytest.raises(JobCancelledError):
        await job.result(timeout=5)


@pytest.mark.slow
async def test_cancel_in_progress_stops_the_handler_and_worker_stays_usable(make_embedded, tmp_path: Path) -> None:
    embedded = make_embedded("NVIDIA_H200:1")
    marker = tmp_path / "cancelled"

    @Endpoint(name="cancel-me", gpu=GpuType.NVIDIA_H200)
    async def slow(seconds: float, marker: str) -> str:
        import asyncio
        import os

        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            open(marker, "w").close()
            raise
        return os.environ["FLASHPOINT_WORKER_ID"]

    job = await slow.run(60, str(marker))
    await eventually(lambda: [w for w in snapshot(embedded, "cancel-me")["workers"] if w["jobs"]], what="job running")
    assert await job.cancel() == "CANCELLED"
    await eventually(marker.exists, what="the handler to receive CancelledError")
    assert job.error is not None and job.error.status == "CANCELLED"
    worker = await slow(0, str(marker))
    assert worker == job.view.worker_id  # the same worker took the next job


@pytest.mark.slow
async def test_execution_timeout_ends_job_and_replaces_worker(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="slowpoke", gpu=GpuType.NVIDIA_H200, execution_timeout_ms=500)
    def stuck(seconds: float) -> str:  # a sync handler: it cannot be interrupted, so the worker must go
        import os
        import time

        time.sleep(seconds)
        return os.environ["FLASHPOINT_WORKER_ID"]

    job = await stuck.run(60)
    assert await job.wait(timeout=30) == "TIMED_OUT"
    assert job.view.reason is not None and job.view.reason.value == "execution_timeout"
    with pytest.raises(JobTimeoutError):
        await job.result(timeout=1)
    replacement = await stuck(0)
    assert replacement != job.view.worker_id


@pytest.mark.slow
async def test_worker_lost_twice_fails_with_worker_lost_and_devices_return(make_embedded) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="doomed", gpu=GpuType.NVIDIA_H200)
    async def always_crash(data: dict) -> None:
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)

    job = await always_crash.run({})
    assert await job.wait(timeout=60) == "FAILED"
    assert job.view.reason is not None and job.view.reason.value == "worker_lost"
    assert job.view.retries == 1
    await eventually(lambda: held_devices(embedded) == [], what="devices back in the fleet")


@pytest.mark.slow
async def test_remote_exception_carries_type_message_and_traceback(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="boom", gpu=GpuType.NVIDIA_H200)
    async def explode(data: dict) -> None:
        raise ValueError(f"bad input {data['x']}")

    with pytest.raises(JobFailedError) as caught:
        await explode({"x": 7})
    error = caught.value
    assert error.remote_type == "ValueError"
    assert error.remote_message == "bad input 7"
    assert error.remote_traceback is not None and "in explode" in error.remote_traceback
    assert error.reason == "user_error"


@pytest.mark.slow
async def test_class_endpoint_is_instantiated_once_and_keeps_state(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="model", gpu=GpuGroup.HOPPER_141)
    class Counter:
        def __init__(self, start: int = 0) -> None:
            self.count = start

        async def bump(self, by: int) -> int:
            self.count += by
            return self.count

        def peek(self) -> int:
            return self.count

    model = Counter(10)
    assert await model.bump(1) == 11
    assert await model.bump(2) == 13
    assert await model.peek() == 13
    other = Counter(100)  # other constructor arguments: another instance on the same warm worker
    assert await other.bump(1) == 101
    assert await model.peek() == 13


@pytest.mark.slow
async def test_max_concurrency_runs_async_handlers_together(make_embedded, tmp_path: Path) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="together", gpu=GpuType.NVIDIA_H200, max_concurrency=2)
    async def meet(me: str, other: str) -> str:
        import asyncio
        import os

        open(me, "w").close()
        while not os.path.exists(other):  # only finishes if the other job runs at the same time
            await asyncio.sleep(0.01)
        return os.environ["FLASHPOINT_WORKER_ID"]

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    job_a = await meet.run(a, b)
    job_b = await meet.run(b, a)
    assert await job_a.result(timeout=30) == await job_b.result(timeout=30)  # one worker ran both at once


@pytest.mark.slow
async def test_a_dependency_that_cannot_be_installed_fails_the_job_naming_it(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="deps", gpu=GpuType.NVIDIA_H200, dependencies=["surely-not-installed-flashpoint-dep>=1"])
    async def needs(data: dict) -> dict:
        return data

    with pytest.raises(JobFailedError) as caught:
        await needs({})
    assert caught.value.reason == "environment_failed"  # its environment could not be built (scheduler/envgate.py)
    assert "surely-not-installed-flashpoint-dep" in str(caught.value)


@pytest.mark.slow
async def test_cpu_endpoint_runs_without_gpus(make_embedded) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="cpu-only", cpu="cpu3c-1-2")
    def where(data: dict) -> dict:
        import os

        return {"visible": os.environ["CUDA_VISIBLE_DEVICES"], "model": os.environ["FLASHPOINT_GPU_MODEL"]}

    job = await where.run({})
    assert await job.result(timeout=30) == {"visible": "", "model": ""}
    assert job.view.placement is not None and job.view.placement.gpu_model is None
    assert held_devices(embedded) == []


@pytest.mark.slow
async def test_worker_output_reaches_caller_log_and_job(make_embedded, caplog) -> None:
    make_embedded("NVIDIA_H200:1")
    caplog.set_level(logging.INFO, logger="flashpoint.worker")

    @Endpoint(name="chatty", gpu=GpuType.NVIDIA_H200)
    async def chatty(word: str) -> None:
        import sys

        print(f"said {word}")
        print(f"warned {word}", file=sys.stderr)

    job = await chatty.run("hello")
    await job.result(timeout=30)
    # stdout and stderr are two pipes: their lines arrive in either order, possibly just after the result
    expected = sorted([f"[chatty job={job.id}] said hello", f"[chatty job={job.id}] warned hello"])
    await eventually(lambda: sorted(_logs(caplog, job.id)) == expected, what="tagged log lines")
    await job.status()
    assert sorted(job.view.logs) == ["said hello", "warned hello"]


def _logs(caplog, job_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "flashpoint.worker" and job_id in r.getMessage()]


@pytest.mark.slow
async def test_values_json_cannot_carry_travel_in_the_binary_encoding(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="binary", gpu=GpuType.NVIDIA_H200)
    async def reverse(items: tuple, blob: bytes) -> tuple:
        return tuple(reversed(items)), blob[::-1], {1, 2}

    assert await reverse((1, "a"), b"xy") == (("a", 1), b"yx", {1, 2})


@pytest.mark.slow
async def test_generator_endpoint_streams_chunks_as_they_are_produced(make_embedded, tmp_path: Path) -> None:
    make_embedded("NVIDIA_H200:1")
    gate = gate_file(tmp_path, "second-chunk")

    @Endpoint(name="tokens", gpu=GpuType.NVIDIA_H200)
    async def tokens(n: int, gate: str):  # type: ignore[no-untyped-def]
        import asyncio
        import os

        yield "first"
        while not os.path.exists(gate):  # the rest only after the caller saw the first chunk
            await asyncio.sleep(0.01)
        for i in range(n):
            yield i

    seen = []
    async for chunk in tokens.stream(3, gate):
        seen.append(chunk)
        if chunk == "first":
            open_gate(gate)
    assert seen == ["first", 0, 1, 2]
    open_gate(gate)
    assert await tokens(2, gate) == ["first", 0, 1]  # awaited whole, a generator's output is every chunk


@pytest.mark.slow
async def test_workers_reach_the_plane_at_the_worker_url(make_embedded) -> None:
    import socket

    with socket.socket() as probe:  # a free port for the plane to listen on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    embedded = make_embedded("NVIDIA_H200:1", FLASHPOINT_WORKER_URL=url)
    assert embedded.url == url

    @Endpoint(name="reach", gpu=GpuType.NVIDIA_H200)
    async def reach() -> str:
        import os

        return os.environ["RUNPOD_WEBHOOK_GET_JOB"]

    assert (await reach()).startswith(f"{url}/v2/reach/job-take/")
