"""Unmodified Runpod handler files as endpoint workers, driven by the official runpod client over a real server."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Served, native, wait_status

runpod = pytest.importorskip("runpod")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def server(runpod_served: Any) -> Served:
    return runpod_served(app="tests/apps/handlers_app.py")


def test_echo_handler_is_placed_like_any_worker(server: Served) -> None:
    out = runpod.Endpoint("echo").run_sync({"text": "héllo ✓"}, timeout=90)
    assert out["input"] == {"text": "héllo ✓"}
    assert out["gpu"] == "NVIDIA H200" and out["cuda"] == "0"  # first declared candidate, device 0
    job = native(server, "/jobs?endpoint=echo")["jobs"][0]
    assert job["workerId"] == out["worker"]
    assert job["placement"] == {"node": job["placement"]["node"], "gpuModel": "NVIDIA H200", "deviceIds": [0],
                                "simulated": True}  # fmt: skip
    health = runpod.Endpoint("echo").health()
    assert health["jobs"]["completed"] == 1 and health["workers"]["idle"] + health["workers"]["running"] == 1


def test_raised_and_returned_errors(server: Served) -> None:
    endpoint = runpod.Endpoint("errors")
    raised = endpoint.run({"mode": "raise", "why": "boom"})
    returned = endpoint.run({"mode": "return", "why": "nope"})
    assert wait_status(raised, {"FAILED"}) == "FAILED" and wait_status(returned, {"FAILED"}) == "FAILED"
    first = native(server, f"/jobs/{raised.job_id}")["error"]
    assert (first["type"], first["message"]) == ("ValueError", "raised boom")
    assert "Traceback" in first["traceback"] and "errors.py" in first["traceback"]
    second = native(server, f"/jobs/{returned.job_id}")["error"]
    assert second["message"] == "returned nope"


def test_progress_update_is_not_a_completion(server: Served, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    job = runpod.Endpoint("progress").run({"gate": str(gate)})
    deadline = time.monotonic() + 60
    while True:
        state = httpx.get(f"{server.url}/v2/progress/status/{job.job_id}", headers=server.headers).json()
        if state.get("output") == {"step": "half"}:
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.05)
    assert state["status"] == "IN_PROGRESS"
    gate.touch()
    assert job.output(timeout=60) == {"step": "done"}
    assert job.status() == "COMPLETED"


@pytest.mark.parametrize(("name", "final"), [("stream", []), ("stream-aggregate", [{"i": i} for i in range(4)])])
def test_generator_handler_streams(server: Served, name: str, final: list[Any]) -> None:
    job = runpod.Endpoint(name).run({"n": 4})
    assert list(job.stream()) == [{"i": i} for i in range(4)]
    assert job.output(timeout=60) == final  # return_aggregate_stream decides the final output


def test_concurrency_modifier_takes_a_batch_and_runs_it_at_once(server: Served, tmp_path: Path) -> None:
    paths = [str(tmp_path / f"started-{i}") for i in range(3)]
    endpoint = runpod.Endpoint("concurrent")
    jobs = [endpoint.run({"mine": path, "others": paths}) for path in paths]
    workers = {job.output(timeout=90) for job in jobs}
    assert len(workers) == 1  # one worker ran the three jobs together


def test_cancel_of_a_running_sync_handler_and_execution_timeout(server: Served) -> None:
    endpoint = runpod.Endpoint("sleepy")
    job = endpoint.run({"seconds": 2})
    wait_status(job, {"IN_PROGRESS"})
    assert job.cancel()["status"] == "CANCELLED"
    timed = endpoint.run({"input": {"seconds": 30}, "policy": {"executionTimeout": 1500}})
    assert wait_status(timed, {"TIMED_OUT"}) == "TIMED_OUT"
    assert native(server, f"/jobs/{timed.job_id}")["reason"] == "execution_timeout"
    # A sync handler blocks Runpod's worker loop: the worker took `timed` only after the cancelled job returned and
    # its late result was posted. That result must not have counted.
    assert native(server, f"/jobs/{job.job_id}")["status"] == "CANCELLED"
    replacement = endpoint.run_sync({"seconds": 0}, timeout=90)
    assert replacement != native(server, f"/jobs/{timed.job_id}")["workerId"]  # the timed-out worker was replaced


def test_refresh_worker_gives_each_job_a_fresh_worker(server: Served) -> None:
    endpoint = runpod.Endpoint("refresh")
    first = endpoint.run_sync({}, timeout=90)
    second = endpoint.run_sync({}, timeout=90)
    assert first != second


def test_handler_that_crashes_at_start_backs_off_then_fails_queued_jobs(server: Served) -> None:
    endpoint = runpod.Endpoint("crash")
    job = endpoint.run({"x": 1})
    deadline = time.monotonic() + 60
    while True:
        explanation = native(server, "/endpoints/crash/explain")
        backoff = [r for r in explanation["reasons"] if r["code"] == "start_backoff"]
        if backoff:
            break
        assert time.monotonic() < deadline, explanation
        time.sleep(0.1)
    assert "model weights not found at /models/sdxl" in backoff[0]["detail"]  # the captured stderr
    assert wait_status(job, {"FAILED"}, timeout=120) == "FAILED"
    failed = native(server, f"/jobs/{job.job_id}")
    assert failed["reason"] == "worker_start_failed"
    assert "model weights not found" in failed["error"]["message"]
    assert all(device["worker"] is None for device in native(server, "/fleet")["devices"]
               if device["model"] == "NVIDIA H200")  # fmt: skip


def test_handler_killed_mid_job_is_retried_and_its_devices_return(server: Served, tmp_path: Path) -> None:
    job = runpod.Endpoint("killed").run({"marker": str(tmp_path / "killed-once")})
    second_worker = job.output(timeout=120)
    view = native(server, f"/jobs/{job.job_id}")
    assert view["status"] == "COMPLETED" and view["retries"] == 1
    assert view["workerId"] == second_worker
    # both A100s went back to the fleet when the first worker died: the retry could use them again
    assert view["placement"]["deviceIds"] == [2, 3]
