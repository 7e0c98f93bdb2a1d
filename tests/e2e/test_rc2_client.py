"""Runpod SDK 2.x's own client (``runpod==2.0.0rc2``, the ``rc2_venv`` fixture, tests/rc2venv.py) calling deployed
apps through the sentinel routes (``/v2/flash/...``, ``api/flashroute.py``, decision 0110).

A real empty ``flashpoint serve --data-dir`` takes two Flash 1.x-style projects over HTTP (``flashpoint.deploy``):
``my-app`` and ``other-app``, both to rc2's default environment ``default``, both with an endpoint ``add`` saying which
app it is. An unmodified rc2 script declares ``App("my-app")`` and ``App("other-app")`` with ``@app.queue`` functions
of the same names and calls them as rc2 users do: ``.remote``, ``.remote.aio``, ``.spawn`` and its ``Job``
(``status``, ``result``, ``done``, ``cancel``, ``retry``), ``fn.job(id)``, ``.stream`` over a generator,
``.with_options``, a remote raise, a resource not deployed. rc2 reaches only ``RUNPOD_ENDPOINT_BASE_URL`` (this
server); every other Runpod URL and any proxy point at a closed loopback port.

Simulated GPUs only. Without network the rc2 install fails: skipped locally, a failure in CI.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import flashpoint
from tests.conftest import SERVER_GPUS, start_serve_process, stop_process
from tests.rc2venv import Rc2Venv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

KEY = "rc2-client-key"
#: a closed port on loopback: rc2's other URLs and any proxied request fail here instead of reaching the internet
NOWHERE = "http://127.0.0.1:9"

#: the deployed project of each app: Flash 1.x endpoints (flashpoint does not load rc2 App files for this test)
PROJECT = """
import asyncio
import os
from pathlib import Path

from flashpoint import Endpoint, GpuGroup


@Endpoint(name="add", gpu=GpuGroup.ANY, workers=(0, 1), idle_timeout=300)
async def add(a: int, b: int) -> dict:
    return {{"app": "{app}", "sum": a + b}}
"""

#: what only my-app has
MY_APP_EXTRA = """

@Endpoint(name="hello", gpu=GpuGroup.ANY, workers=(0, 1), idle_timeout=300)
def hello() -> str:
    return "hello"


@Endpoint(name="count", gpu=GpuGroup.ANY, workers=(0, 1), idle_timeout=300)
def count(n: int):
    for i in range(n):
        yield {"i": i}


@Endpoint(name="explode", gpu=GpuGroup.ANY, workers=(0, 1), idle_timeout=300)
def explode(why: str) -> None:
    raise ValueError(f"exploded: {why}")


@Endpoint(name="slow", gpu=GpuGroup.ANY, workers=(0, 1), idle_timeout=300)
async def slow(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@Endpoint(name="flaky", gpu=GpuGroup.ANY, workers=(0, 1), idle_timeout=300)
def flaky(marker: str) -> str:
    path = Path(marker)
    if not path.exists():
        path.write_text("failed once")
        raise RuntimeError("first try fails")
    return "recovered"
"""

#: an unmodified rc2 script: App declarations of the same names, calls as rc2 users make them; one JSON line a case
SCRIPT = """
import asyncio
import json
import sys
import time

from runpod import App, EndpointNotFound, GpuGroup
from runpod.apps import RemoteExecutionError

MARKER = sys.argv[1]

app = App("my-app")
other = App("other-app")


@app.queue(gpu=GpuGroup.ANY)
async def add(a: int, b: int) -> dict:
    raise AssertionError("runs on the deployed app, never here")


@other.queue(name="add", gpu=GpuGroup.ANY)
async def other_add(a: int, b: int) -> dict:
    raise AssertionError("runs on the deployed app, never here")


@app.queue(gpu=GpuGroup.ANY)
def hello() -> str:
    raise AssertionError("runs on the deployed app, never here")


@app.queue(gpu=GpuGroup.ANY)
def count(n: int):
    yield "never here"


@app.queue(gpu=GpuGroup.ANY)
def explode(why: str) -> None:
    raise AssertionError("runs on the deployed app, never here")


@app.queue(gpu=GpuGroup.ANY)
async def slow(seconds: float) -> float:
    raise AssertionError("runs on the deployed app, never here")


@app.queue(gpu=GpuGroup.ANY)
def flaky(marker: str) -> str:
    raise AssertionError("runs on the deployed app, never here")


@app.queue(gpu=GpuGroup.ANY)
def missing() -> None:
    raise AssertionError("declared here only: not deployed")


def record(case, call):
    try:
        line = {"case": case, "output": call()}
    except Exception as exc:
        line = {"case": case, "error": type(exc).__name__, "message": str(exc)}
    print(json.dumps(line), flush=True)


def until_running(job):
    deadline = time.monotonic() + 120
    while job.status() != "IN_PROGRESS":
        assert time.monotonic() < deadline, f"job {job.id} still {job.status()}"
        time.sleep(0.1)


def spawned():
    job = slow.spawn(0.2)
    first = job.status()
    return {"id": bool(job.id), "first": first, "result": job.result(), "done": job.done, "status": job.status()}


def by_id():
    job = add.spawn(6, b=7)
    again = add.job(job.id)
    return {"same": again.id == job.id, "result": again.result(), "status": again.status()}


cancelled_job = []


def cancelled():
    job = slow.spawn(120)
    until_running(job)
    job.cancel()
    cancelled_job.append(job)
    return {"status": job.status(), "done": job.done}


def retried():
    job = flaky.spawn(MARKER)
    try:
        first = {"output": job.result()}
    except RemoteExecutionError as exc:
        first = {"error": str(exc), "status": job.status()}
    job.retry()
    return {"first": first, "result": job.result(), "status": job.status()}


async def collect(chunks):
    return [chunk async for chunk in chunks]


def with_options():
    job = hello.with_options(execution_timeout=60000, ttl=600000).with_options(low_priority=True).spawn()
    return {"id": job.id, "result": job.result()}


record("remote", lambda: add.remote(2, 3))
record("remote kwargs", lambda: add.remote(a=1, b=1))
record("aio", lambda: asyncio.run(add.remote.aio(4, 5)))
record("no arguments", lambda: hello.remote())
record("other app", lambda: other_add.remote(2, 3))
record("spawn", spawned)
record("job by id", by_id)
record("cancel", cancelled)
record("cancelled result", lambda: cancelled_job[0].result())
record("retry", retried)
record("stream", lambda: list(count.stream(4)))
record("stream aio", lambda: asyncio.run(collect(count.stream.aio(3))))
record("with options", with_options)
record("raise", lambda: explode.remote("boom"))
record("missing", lambda: missing.remote())
record("execution timeout", lambda: slow.with_options(execution_timeout=1500).remote(60))
"""


@dataclass(frozen=True)
class Server:
    url: str
    key: str
    db: Path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("rc2-client")
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS,
        "FLASHPOINT_API_KEY": KEY,
        "FLASHPOINT_STATE_DIR": str(tmp / "state"),
        "FLASHPOINT_TAKE_HOLD_S": "5",
    }
    command = [sys.executable, "-m", "flashpoint", "serve", "--port", "0", "--data-dir", str(tmp / "data")]
    proc, url = start_serve_process(command, env)
    try:
        for app, extra in (("my-app", MY_APP_EXTRA), ("other-app", "")):
            folder = tmp / "projects" / app
            folder.mkdir(parents=True)
            (folder / "main.py").write_text(textwrap.dedent(PROJECT.format(app=app)) + textwrap.dedent(extra))
            result = flashpoint.deploy(folder, app=app, env="default", url=url, key=KEY, timeout=180)
            assert f"{app}.default.add" in [e.id for e in result.endpoints]
        yield Server(url, KEY, tmp / "data" / "jobs.db")
    finally:
        stop_process(proc)


def job_data(db: Path, job_id: str) -> dict[str, Any]:
    """A job's record as the server stored it (read-only: the server is running)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (text,) = conn.execute("select data from jobs where id = ?", (job_id,)).fetchone()
    data: dict[str, Any] = json.loads(text)
    return data


def test_rc2s_client_calls_deployed_apps_through_the_sentinel_routes(
    rc2_venv: Rc2Venv, server: Server, tmp_path: Path
) -> None:
    script = tmp_path / "rc2_calls.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = rc2_venv.env(
        RUNPOD_ENDPOINT_BASE_URL=f"{server.url}/v2",
        RUNPOD_API_KEY=server.key,
        RUNPOD_SKIP_AUTO_SYSTEM_CHECKS="true",
        RUNPOD_API_BASE_URL=NOWHERE,
        RUNPOD_HAPI_URL=NOWHERE,
        RUNPOD_CONSOLE_URL=NOWHERE,
        HTTP_PROXY=NOWHERE,
        HTTPS_PROXY=NOWHERE,
        ALL_PROXY=NOWHERE,
        NO_PROXY="127.0.0.1,localhost",
    )

    # When rc2's client runs the unmodified script against the server
    run = subprocess.run(
        [str(rc2_venv.python), str(script), str(tmp_path / "flaky-marker")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )

    # Then every call answers as on Runpod
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    got = {line.pop("case"): line for line in lines}
    assert got["remote"] == {"output": {"app": "my-app", "sum": 5}}
    assert got["remote kwargs"] == {"output": {"app": "my-app", "sum": 2}}
    assert got["aio"] == {"output": {"app": "my-app", "sum": 9}}
    assert got["no arguments"] == {"output": "hello"}
    # the same resource name in another app reaches that app's endpoint
    assert got["other app"] == {"output": {"app": "other-app", "sum": 5}}
    spawn = got["spawn"]["output"]
    assert spawn["id"] and spawn["first"] in ("IN_QUEUE", "IN_PROGRESS", "COMPLETED")
    assert (spawn["result"], spawn["done"], spawn["status"]) == (0.2, True, "COMPLETED")
    assert got["job by id"] == {"output": {"same": True, "result": {"app": "my-app", "sum": 13}, "status": "COMPLETED"}}
    assert got["cancel"] == {"output": {"status": "CANCELLED", "done": True}}
    assert got["cancelled result"]["error"] == "RemoteExecutionError"
    assert got["cancelled result"]["message"] == "remote execution failed: Cancelled: cancelled before it finished"
    retry = got["retry"]["output"]
    assert retry["first"] == {"error": "remote execution failed: RuntimeError: first try fails", "status": "FAILED"}
    assert (retry["result"], retry["status"]) == ("recovered", "COMPLETED")
    assert got["stream"] == {"output": [{"i": i} for i in range(4)]}
    assert got["stream aio"] == {"output": [{"i": i} for i in range(3)]}
    assert got["raise"] == {
        "error": "RemoteExecutionError",
        "message": "remote execution failed: ValueError: exploded: boom",
    }
    # POST runsync's 404: rc2 raises at once, in its own words
    assert got["missing"] == {
        "error": "EndpointNotFound",
        "message": "'missing' in app 'my-app' is not deployed. run `rp flash deploy` first, or use .local() to run "
        "it here.",
    }
    assert got["execution timeout"] == {
        "error": "RemoteExecutionError",
        "message": "remote execution failed: TimeoutError: execution exceeded 1500 ms",
    }
    # the options reached the job: its timeouts, and low priority recorded for the scheduler
    options = got["with options"]["output"]
    assert options["result"] == "hello"
    job = job_data(server.db, options["id"])
    assert job["execution_timeout_ms"] == 60000 and job["ttl_ms"] == 600000
    assert job["low_priority"] is True
    assert job["extra"]["policy"] == {"executionTimeout": 60000, "ttl": 600000, "lowPriority": True}
