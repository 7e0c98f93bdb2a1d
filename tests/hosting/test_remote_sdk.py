"""Client mode: the same decorated functions, with FLASHPOINT_URL set, run on a `flashpoint serve` server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CLIENT = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[1])
    from runpod_app import count, echo, fail
    from flashpoint import Endpoint, JobFailedError

    async def main() -> None:
        print("call", await echo(text="héllo"))
        job = await echo.run(n=2)
        print("status", await job.status() in ("IN_QUEUE", "IN_PROGRESS", "COMPLETED"))
        print("wait", await job.wait(timeout=60), job.output["payload"], job.view.placement.gpu_model)
        print("stream", [chunk async for chunk in count.stream(n=3, delay=0.05)])
        try:
            await fail(message="remote boom")
        except JobFailedError as exc:
            print("failed", exc.remote_type, exc.remote_message, "Traceback" in (exc.remote_traceback or ""))
        served = Endpoint(id="echo")
        print("id-run", (await (await served.run({"k": 1})).result(timeout=60))["payload"])
        job = await served.runsync({"k": 2})
        print("id-runsync", job.output["payload"], job.done, job.error)
        print("explain", (await served.explain()).endpoint)

    asyncio.run(main())
    """
)


def test_decorated_functions_call_the_server_when_flashpoint_url_is_set(serve: Any, tmp_path: Path) -> None:
    served = serve()
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "FLASHPOINT_URL": served.url, "FLASHPOINT_API_KEY": served.key,
           "FLASHPOINT_STATE_DIR": str(tmp_path / "client-state")}  # fmt: skip
    env.pop("FLASHPOINT_SIMULATED_GPUS", None)
    done = subprocess.run(
        [sys.executable, str(script), str(ROOT / "tests" / "apps")], env=env, capture_output=True, text=True,
        timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines())
    assert lines["call"] == "{'payload': {'text': 'héllo'}, 'gpu': 'NVIDIA H200'}"
    assert lines["status"] == "True"
    assert lines["wait"] == "COMPLETED {'n': 2} NVIDIA H200"
    assert lines["stream"] == "[{'i': 0}, {'i': 1}, {'i': 2}]"
    assert lines["failed"] == "ValueError remote boom True"
    assert lines["id-run"] == "{'k': 1}"
    assert lines["id-runsync"] == "{'k': 2} True None"
    assert lines["explain"] == "apps.production.echo"  # serve APP's endpoints are app "apps" (its folder)
    # no control plane was started in the client: nothing was announced in its state dir
    assert not list((tmp_path / "client-state").glob("run/*.json"))


def test_sigterm_stops_workers_and_requeues_running_jobs(serve: Any, tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    first = serve("--grace-s", "1", db=db)  # the job outlives the grace period: cut short, requeued
    with httpx.Client(base_url=first.url, headers=first.headers, timeout=30) as client:
        job = client.post("/v2/slow/run", json={"input": {"seconds": 3600}}).json()["id"]
        deadline = time.monotonic() + 30
        while client.get(f"/v2/slow/status/{job}").json()["status"] != "IN_PROGRESS":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        worker_pids = _children(first.proc.pid)
        assert worker_pids
    # uvicorn re-raises the signal once its graceful shutdown (and ours: workers stopped, jobs requeued) is done
    assert first.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    for pid in worker_pids:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"worker {pid} outlived the server"
    second = serve(db=db)
    with httpx.Client(base_url=second.url, headers=second.headers, timeout=30) as client:
        state = client.get(f"/v2/slow/status/{job}").json()
        assert state["status"] in ("IN_QUEUE", "IN_PROGRESS")  # recorded as interrupted, and running again
        assert client.post(f"/v2/slow/cancel/{job}").json()["status"] == "CANCELLED"


def test_non_loopback_address_needs_an_api_key(tmp_path: Path) -> None:
    env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1"}
    env.pop("FLASHPOINT_API_KEY", None)
    done = subprocess.run(
        [sys.executable, "-m", "flashpoint", "serve", str(ROOT / "tests/apps/runpod_app.py"), "--host", "0.0.0.0",
         "--port", "0", "--db", str(tmp_path / "jobs.db")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "refusing to listen on 0.0.0.0 without an API key" in done.stderr
    assert "FLASHPOINT_API_KEY" in done.stderr


def test_metrics_after_jobs(serve: Any) -> None:
    served = serve()
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=30) as client:
        assert client.post("/v2/echo/runsync", json={"input": {"m": 1}}).json()["status"] == "COMPLETED"
        assert client.get("/metrics", headers={"Authorization": "wrong"}).status_code == 401
        text = client.get("/metrics").text
    finished = 'flashpoint_jobs_finished_total{endpoint="apps.production.echo",reason="completed",status="COMPLETED"}'
    assert f"{finished} 1.0" in text
    assert "flashpoint_job_execution_seconds_bucket" in text
    assert 'flashpoint_devices{model="NVIDIA H200",simulated="true",state="busy"}' in text
    assert "flashpoint_queue_depth" in text and "flashpoint_workers" in text


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_every_key_of_a_comma_separated_list_works(serve: Any) -> None:
    served = serve(key="first-key, second-key")
    for key in ("first-key", "second-key"):
        answer = httpx.get(f"{served.url}/v2/echo/health", headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert answer.status_code == 200, key
    wrong = httpx.get(f"{served.url}/v2/echo/health", headers={"Authorization": "Bearer first-key, second-key"})
    assert wrong.status_code == 401


def test_an_app_may_declare_its_simulated_fleet_when_imported(serve: Any) -> None:
    served = serve(app="tests/apps/self_fleet_app.py", env={"FLASHPOINT_SIMULATED_GPUS": ""})
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=60) as client:
        assert [d["model"] for d in client.get("/v1/fleet").json()["devices"]] == ["NVIDIA L40S"]
        assert client.post("/v2/where/runsync", json={"input": {}}).json()["output"] == "NVIDIA L40S"
