"""The embedded plane's life cycle in real scripts: start on first call, stop workers at exit, survive nothing.

Covers ``flashpoint.backends.process`` (starting and stopping real worker processes) for tests/test_layout.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flashpoint import Endpoint, GpuType, JobFailedError
from tests.conftest import eventually, held_devices

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys
    from flashpoint import Endpoint, GpuGroup

    @Endpoint(name="pid", gpu=GpuGroup.ANY)
    async def worker_pid(data: dict) -> int:
        return os.getpid()

    async def main() -> None:
        print(await worker_pid({}), flush=True)
        if sys.argv[1] == "hang":
            await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is gone for our purposes once it is not running
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1",
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
    }


async def test_script_exit_stops_its_workers(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), "exit"], env=_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    worker = int(done.stdout.strip().splitlines()[-1])
    # the control plane stopped the worker before the interpreter exited
    assert not _alive(worker)
    assert list((tmp_path / "state" / "run").glob("*.json")) == []  # announcement removed too


async def test_workers_exit_when_the_caller_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), "hang"], env=_env(tmp_path), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        worker = int(proc.stdout.readline())
        assert _alive(worker)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 15
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling a process we do not own the exit of; bounded by the deadline
        assert not _alive(worker), "a worker outlived its control plane"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def test_worker_that_cannot_start_backs_off_then_fails_queued_jobs(make_embedded) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    # PYTHONPATH pointing nowhere and -I style isolation: the worker cannot import flashpoint and exits at once
    @Endpoint(name="broken", gpu=GpuType.NVIDIA_H200, env={"PYTHONPATH": "/nonexistent", "PYTHONNOUSERSITE": "1",
                                                          "PYTHONHOME": "/nonexistent"})  # fmt: skip
    async def broken(data: dict) -> dict:
        return data

    job = await broken.run({})
    explanation = None

    def backing_off() -> bool:
        nonlocal explanation
        explanation = embedded.run_sync(_explain(embedded, job.id), timeout=10)
        return any(r.code.value == "start_backoff" for r in explanation.reasons)

    await eventually(backing_off, what="a start back-off in the explanation")
    assert explanation is not None
    assert "worker start(s) failed" in explanation.reasons[0].detail
    with pytest.raises(JobFailedError) as caught:
        await job.result(timeout=60)
    assert caught.value.reason == "worker_start_failed"
    assert held_devices(embedded) == []


async def _explain(embedded, job_id: str):  # type: ignore[no-untyped-def]
    return embedded.plane.explain_job(job_id)
