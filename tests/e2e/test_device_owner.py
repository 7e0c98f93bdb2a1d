"""One owner per device on a machine, end to end: a `flashpoint serve` process and a script (real processes, real
workers, real lock files) declaring the same simulated fleet (`NVIDIA_H200:1`, the only fake) never run workers on
the device at once. The second's job waits `busy`, naming the first's pid and endpoint, while the first's worker holds
the device, and runs once the first lets it go (its worker idles out) or is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.explain import WaitReason
from flashpoint.hosting.server import app_name_of
from tests.conftest import Served, eventually_async, native, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

FLEET = {"FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1", "FLASHPOINT_NODE": "node-a"}

#: the endpoint both processes declare: it holds its device until the file it is given exists
APP = textwrap.dedent(
    """
    import asyncio
    import os
    from pathlib import Path

    from flashpoint import Endpoint, GpuType

    @Endpoint(name="holder", gpu=GpuType.NVIDIA_H200, idle_timeout=0)
    async def hold(path: str) -> int:
        while not Path(path).exists():
            await asyncio.sleep(0.05)
        return os.getpid()
    """
)

#: a script that runs one job of the app and says so once the job runs (then waits to be ended)
SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    from app import hold

    async def main() -> None:
        job = await hold.run(sys.argv[1])
        while await job.status() != "IN_PROGRESS":
            await asyncio.sleep(0.05)
        print("running", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def _run(served: Served, path: Path) -> str:
    response = httpx.post(
        f"{served.url}/v2/holder/run", json={"input": {"path": str(path)}}, headers=served.headers, timeout=30
    )
    response.raise_for_status()
    job_id: str = response.json()["id"]
    return job_id


def _status(served: Served, job_id: str) -> dict[str, Any]:
    response = httpx.get(f"{served.url}/v2/holder/status/{job_id}", headers=served.headers, timeout=30)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


async def test_a_script_waits_busy_for_the_device_a_server_holds_and_runs_once_the_server_lets_it_go(
    serve: Callable[..., Served], make_embedded: Callable[..., Any], tmp_path: Path
) -> None:
    # Given `flashpoint serve` running a job that holds the one simulated H200
    app = tmp_path / "app.py"
    app.write_text(APP)
    served = serve(app=str(app), env=FLEET)
    release = tmp_path / "release"
    held = _run(served, release)
    until(lambda: _status(served, held)["status"] == "IN_PROGRESS", 60, "the server's job to run")

    # When a script (this process's embedded server, declaring the same fleet) submits a job for an H200
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="mine", gpu=GpuType.NVIDIA_H200)
    async def mine(data: dict[str, Any]) -> int:
        return os.getpid()

    job = await mine.run({})

    # Then it waits busy, naming the server's pid, URL and endpoint
    found: list[WaitReason] = []

    async def named() -> bool:
        found[:] = [r for r in (await job.explain()).reasons if r.processes]
        return bool(found)

    await eventually_async(named, 30, "the script's job to name the server")
    (reason,) = found
    (other,) = reason.processes
    assert reason.code.value == "busy" and await job.status() == "IN_QUEUE"
    assert (other.pid, other.endpoint, other.kind, other.url) == (
        served.proc.pid,
        f"{app_name_of(str(app))}.production.holder",  # serve APP's endpoints: the app of APP's folder
        "flashpoint serve",
        served.url,
    )
    assert f"pid {served.proc.pid}" in reason.detail and "flashpoint serve" in reason.detail

    # When the server's job ends and its worker idles out (idle_timeout=0), giving the device back
    release.touch()
    until(lambda: _status(served, held)["status"] == "COMPLETED", 60, "the server's job to end")
    # Then the script's job runs on it
    assert isinstance(await job.result(timeout=60), int)


async def test_a_server_waits_busy_for_the_device_a_script_holds_and_runs_once_the_script_is_killed(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    # Given a script (a real process with its embedded server) whose job holds the one simulated H200
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "script.py").write_text(SCRIPT)
    served = serve(app=str(tmp_path / "app.py"), env=FLEET)
    script = subprocess.Popen(
        [sys.executable, str(tmp_path / "script.py"), str(tmp_path / "never")],
        cwd=tmp_path,
        env={**os.environ, **FLEET, "FLASHPOINT_STATE_DIR": str(tmp_path / "script-state")},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert script.stdout is not None
        assert script.stdout.readline().strip() == "running"
        # When the server gets a job for the same endpoint (its handler would end at once)
        (tmp_path / "done").touch()
        job_id = _run(served, tmp_path / "done")

        # Then it waits busy, and `explain` names the script's pid and endpoint
        def named() -> dict[str, Any] | None:
            reasons = native(served, f"/jobs/{job_id}/explain")["reasons"]
            return reasons[0] if reasons and reasons[0]["processes"] else None

        reason = until(named, 30, "the server's job to name the script")
        (other,) = reason["processes"]
        assert reason["code"] == "busy" and _status(served, job_id)["status"] == "IN_QUEUE"
        assert (other["pid"], other["endpoint"], other["kind"]) == (script.pid, "holder", "script")
        assert f"pid {script.pid}" in reason["detail"] and "script.py" in reason["detail"]
        rows = native(served, "/fleet")["devices"]
        assert [row["process"]["pid"] for row in rows] == [script.pid]
    finally:
        # When the script is killed with SIGKILL (no clean-up runs in it)
        script.send_signal(signal.SIGKILL)
        script.wait(30)
        if script.stdout is not None:
            script.stdout.close()
    # Then its lease is gone with it, and the server's job runs
    done = until(lambda: (s := _status(served, job_id))["status"] == "COMPLETED" and s, 30, "the server's job to run")
    assert isinstance(done["output"], int)


#: an endpoint whose idle worker stays warm for ten minutes
WARM_APP = textwrap.dedent(
    """
    import os

    from flashpoint import Endpoint, GpuType

    @Endpoint(name="warm", gpu=GpuType.NVIDIA_H200, idle_timeout=600)
    async def warm(n: int) -> int:
        return os.getpid()
    """
)


async def test_a_servers_idle_worker_gives_the_device_to_a_script_waiting_for_it_at_once(
    serve: Callable[..., Served], make_embedded: Callable[..., Any], tmp_path: Path
) -> None:
    # Given `flashpoint serve` whose worker ran a job and stays warm, idle, on the one simulated H200
    app = tmp_path / "warm_app.py"
    app.write_text(WARM_APP)
    served = serve(app=str(app), env=FLEET)
    response = httpx.post(
        f"{served.url}/v2/warm/runsync", json={"input": {"n": 1}}, headers=served.headers, timeout=60
    )  # fmt: skip
    assert response.json()["status"] == "COMPLETED", response.text
    served_worker = response.json()["output"]
    (row,) = native(served, "/fleet")["devices"]
    assert row["worker"], row  # its idle worker holds the device

    # When a script (this process's embedded server, declaring the same fleet) calls an H200 endpoint
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="mine", gpu=GpuType.NVIDIA_H200)
    async def mine(data: dict[str, Any]) -> int:
        return os.getpid()

    job = await mine.run({})

    # Then the server's idle worker yields the device well before its idle_timeout of 600 s, and the script's job
    # runs on it (the job's own bound is 60 s)
    ran_on = await job.result(timeout=60)
    assert isinstance(ran_on, int) and ran_on != served_worker
    placement = job.view.placement
    assert placement is not None and placement.gpu_model == "NVIDIA H200"
