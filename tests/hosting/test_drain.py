"""SIGTERM drains a real ``flashpoint serve`` (``hosting/server.py`` ``drain``, ``scheduler/draining.py``): new work is
refused with 503 while a running job finishes within the grace period, then the server exits; a job longer than the
grace period is cut short, back in the queue and counted as a retry. Simulated GPUs are the only fake."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from flashpoint.jobs import JobStatus
from flashpoint.store.sqlite import SQLiteJobStore
from tests.conftest import SERVER_GPUS, start_serve_process, stop_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

KEY = "drain-key"
APP = """
import asyncio

from flashpoint import Endpoint, GpuGroup


@Endpoint(name="slow", gpu=GpuGroup.ANY, workers=(1, 1))
async def slow(seconds: float) -> dict:
    await asyncio.sleep(seconds)
    return {"slept": seconds}
"""


def start(tmp_path: Path, grace_s: float) -> tuple[object, str]:
    app = tmp_path / "app" / "main.py"
    app.parent.mkdir(exist_ok=True)
    app.write_text(textwrap.dedent(APP))
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS,
        "FLASHPOINT_API_KEY": KEY,
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
    }
    command = [sys.executable, "-m", "flashpoint", "serve", str(app), "--port", "0", "--data-dir",
               str(tmp_path / "data"), "--grace-s", str(grace_s)]  # fmt: skip
    return start_serve_process(command, env)


def run_until(http: httpx.Client, job: str, status: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if http.get(f"/v2/slow/status/{job}").json()["status"] == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job} never {status}")


def refused_while_stopping(http: httpx.Client, timeout: float = 20) -> httpx.Response:
    """Submit until the server refuses (it starts draining a moment after the signal); bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = http.post("/v2/slow/run", json={"input": {"seconds": 0}})
        if answer.status_code != 200:
            return answer
    raise AssertionError("the server kept taking jobs after SIGTERM")


def test_sigterm_lets_the_running_job_finish_and_refuses_new_work(tmp_path: Path) -> None:
    proc, url = start(tmp_path, grace_s=30)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as http:
            job = http.post("/v2/slow/run", json={"input": {"seconds": 3}}).json()["id"]
            run_until(http, job, "IN_PROGRESS")
            proc.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
            refused = refused_while_stopping(http)
            assert refused.status_code == 503, refused.text
            assert "the server is stopping" in refused.json()["message"]
        # uvicorn raises the signal again once it has shut down: the exit of a process stopped by SIGTERM
        assert proc.wait(60) == -signal.SIGTERM  # type: ignore[attr-defined]
    finally:
        stop_process(proc)  # type: ignore[arg-type]
    store = SQLiteJobStore(tmp_path / "data" / "jobs.db")
    done = store.get(job)
    assert done is not None and done.status is JobStatus.COMPLETED, done
    assert (done.output, done.retries) == ({"slept": 3}, 0)


def test_a_job_longer_than_the_grace_period_goes_back_to_the_queue_as_a_retry(tmp_path: Path) -> None:
    proc, url = start(tmp_path, grace_s=0.5)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as http:
            job = http.post("/v2/slow/run", json={"input": {"seconds": 120}}).json()["id"]
            run_until(http, job, "IN_PROGRESS")
            proc.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
        # uvicorn raises the signal again once it has shut down: the exit of a process stopped by SIGTERM
        assert proc.wait(60) == -signal.SIGTERM  # type: ignore[attr-defined]
    finally:
        stop_process(proc)  # type: ignore[arg-type]
    cut = SQLiteJobStore(tmp_path / "data" / "jobs.db").get(job)
    assert cut is not None and cut.status is JobStatus.IN_QUEUE, cut
    assert cut.retries == 1
