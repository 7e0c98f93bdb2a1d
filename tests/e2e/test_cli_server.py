"""The CLI against a real `flashpoint serve` process on a simulated fleet: it finds the server through its
announcement (no --url), sees the GPU a worker holds, lists, shows, follows, cancels and retries jobs, calls
endpoints; and `flashpoint run app.py::fn --arg value` runs an endpoint on a worker."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashpoint import ConfigError
from flashpoint.cli import app
from flashpoint.hosting.server import app_name_of
from tests.conftest import ROOT, Served, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

APP = textwrap.dedent(
    """
    import asyncio, os
    from flashpoint import Endpoint, GpuType

    @Endpoint(name="echo", gpu=GpuType.NVIDIA_H200, workers=(0, 1), idle_timeout=120)
    async def echo(**payload):
        return {"payload": payload, "gpu": os.environ["FLASHPOINT_GPU_MODEL"]}

    @Endpoint(name="talk", gpu=GpuType.NVIDIA_A100_80GB_PCIe)
    async def talk(n: int, delay: float = 0.2) -> int:
        for i in range(n):
            print(f"line {i}", flush=True)
            await asyncio.sleep(delay)
        return n

    @Endpoint(name="fail", gpu=GpuType.NVIDIA_A100_80GB_PCIe)
    async def fail(message: str) -> None:
        raise ValueError(message)

    @Endpoint(name="slow", gpu=GpuType.NVIDIA_H200)
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "slept"
    """
)

runner = CliRunner()


def write_app(tmp_path: Path) -> Path:
    path = tmp_path / "cli_served_app.py"
    path.write_text(APP)
    return path


def cli(tmp_path: Path, *args: str, **env: str | None) -> Any:
    """The CLI in this process, looking where the `serve` fixture's server announces itself."""
    base: dict[str, str | None] = {
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "FLASHPOINT_URL": None,
        "FLASHPOINT_API_KEY": None,
    }
    return runner.invoke(app, list(args), env={**base, **env})


def job_status(tmp_path: Path, job_id: str) -> str:
    status: str = json.loads(cli(tmp_path, "job", job_id, "--json").stdout)["status"]
    return status


def test_the_cli_sees_and_steers_a_running_server(serve: Callable[..., Served], tmp_path: Path) -> None:
    served = serve(app=str(write_app(tmp_path)))

    # Its announcement: private, this server's URL, and a key of its own rather than the configured one
    (announcement,) = (tmp_path / "state" / "run").glob("*.json")
    body = json.loads(announcement.read_text())
    assert stat.S_IMODE(announcement.stat().st_mode) == 0o600
    assert (body["kind"], body["url"], body["pid"]) == ("server", served.url, served.proc.pid)
    assert body["key"] and body["key"] != served.key and served.key not in announcement.read_text()

    # call: submits, waits, prints the output as JSON
    called = cli(tmp_path, "call", "echo", '{"x": 1}')
    assert called.exit_code == 0, called.output
    assert json.loads(called.stdout) == {"payload": {"x": 1}, "gpu": "NVIDIA H200"}

    # status and gpus see the GPU the server's warm worker holds (before, `gpus` called every GPU free)
    (plane,) = json.loads(cli(tmp_path, "status", "--json").stdout)["planes"]
    assert (plane["kind"], plane["pid"], plane["gpus"]["held"]) == ("server", served.proc.pid, 1)
    # serve APP's endpoints are an app named after APP's folder, environment production
    eid = f"{app_name_of(str(tmp_path))}.production.echo"
    echo = next(e for e in plane["endpoints"] if e["name"] == eid)
    assert echo["workers"] == {"IDLE": 1}
    (held,) = echo["gpusHeld"]
    assert held["model"] == "NVIDIA H200"
    gpus = json.loads(cli(tmp_path, "gpus", "--json").stdout)
    assert gpus["source"] == "live"
    (fleet,) = gpus["fleets"]
    assert [d["endpoint"] for d in fleet["devices"] if d["worker"]] == [eid]
    text = cli(tmp_path, "gpus").output
    assert "GPUs of flashpoint serve" in text and f"held by {eid} (worker " in text
    assert "1 idle (0..1)" in cli(tmp_path, "status").output

    # jobs and job: the call's job, where it ran and what it returned
    (listed,) = json.loads(cli(tmp_path, "jobs", "--endpoint", "echo", "--json").stdout)["jobs"]
    assert listed["status"] == "COMPLETED"
    shown = cli(tmp_path, "job", listed["id"]).output
    assert "COMPLETED" in shown and "NVIDIA H200 on " in shown and '"x": 1' in shown and "(ran " in shown

    # logs -f follows a job's lines as it prints them, until it ends
    talk = cli(tmp_path, "call", "talk", '{"n": 5, "delay": 0.2}', "--async").stdout.strip()
    followed = cli(tmp_path, "logs", "-f", talk)
    assert followed.exit_code == 0, followed.output
    assert followed.stdout.splitlines() == [f"line {i}" for i in range(5)]
    assert f"-- job {talk} COMPLETED" in followed.stderr
    assert cli(tmp_path, "logs", talk).stdout.splitlines() == [f"line {i}" for i in range(5)]
    # a job keeps its first 1,000 lines: logs says when it was cut
    chatty = cli(tmp_path, "call", "talk", '{"n": 1010, "delay": 0}', "--async").stdout.strip()
    cut = cli(tmp_path, "logs", "--follow", chatty)
    printed = cut.stdout.splitlines()
    assert len(printed) == 1000 and printed[-2] == "line 998"
    assert printed[-1].startswith("[flashpoint] log cut here: a job keeps its first 999 lines")

    # cancel stops a running job
    slow = cli(tmp_path, "call", "slow", '{"seconds": 120}', "--async").stdout.strip()
    until(lambda: job_status(tmp_path, slow) == "IN_PROGRESS", 60, "the slow job to start")
    cancelled = cli(tmp_path, "cancel", slow)
    assert cancelled.output.strip() == f"job {slow} CANCELLED"
    assert job_status(tmp_path, slow) == "CANCELLED"

    # a failed call exits 1 with the remote error; retry puts the job back, and it fails again
    failed = cli(tmp_path, "call", "fail", '{"message": "boom"}')
    assert failed.exit_code == 1
    assert "FAILED (user_error): ValueError: boom" in failed.stderr
    match = re.search(r"job (\S+-fp) on flashpoint serve", failed.stderr)
    assert match is not None, failed.stderr
    retried = cli(tmp_path, "retry", match.group(1))
    assert retried.exit_code == 0 and "IN_QUEUE again" in retried.output
    again = cli(tmp_path, "logs", "-f", match.group(1))
    assert f"-- job {match.group(1)} FAILED" in again.stderr

    # From elsewhere: --url with one of the server's keys, or FLASHPOINT_URL and FLASHPOINT_API_KEY; without a key,
    # the error says which variable to set
    elsewhere = str(tmp_path / "other-state")
    remote = cli(tmp_path, "jobs", "--url", served.url, "--key", served.key, FLASHPOINT_STATE_DIR=elsewhere)
    assert remote.exit_code == 0 and talk in remote.output
    from_env = cli(tmp_path, "status", FLASHPOINT_URL=served.url, FLASHPOINT_API_KEY=served.key,
                   FLASHPOINT_STATE_DIR=elsewhere)  # fmt: skip
    assert from_env.exit_code == 0 and f"flashpoint server at {served.url}" in from_env.output
    keyless = cli(tmp_path, "jobs", "--url", served.url, FLASHPOINT_STATE_DIR=elsewhere)
    assert isinstance(keyless.exception, ConfigError) and "set FLASHPOINT_API_KEY" in str(keyless.exception)

    # flashpoint run --url: the app's function called on the server, not in a plane of its own
    env = {**os.environ, "FLASHPOINT_STATE_DIR": elsewhere}
    env.pop("FLASHPOINT_SIMULATED_GPUS", None)
    ran = subprocess.run(
        [sys.executable, "-m", "flashpoint", "run", "--url", served.url, "--key", served.key,
         f"{tmp_path / 'cli_served_app.py'}::echo", "--y", "2"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"payload": {"y": 2}, "gpu": "NVIDIA H200"}
    assert not list(Path(elsewhere).glob("run/*.json"))  # no plane was started there

    # Stopped, the server takes its announcement with it
    served.stop()
    assert list((tmp_path / "state" / "run").glob("*.json")) == []
    assert "no running flashpoint process found" in cli(tmp_path, "status").stderr


def test_run_calls_one_endpoint_of_a_file_on_the_embedded_plane(tmp_path: Path) -> None:
    path = tmp_path / "run_endpoint_app.py"
    path.write_text(
        textwrap.dedent(
            """
            import os
            from flashpoint import Endpoint, GpuGroup

            @Endpoint(name="double", gpu=GpuGroup.ANY)
            async def double(x: int, label: str = "n") -> dict:
                print("doubling", x, flush=True)
                return {label: x * 2, "gpu": os.environ["FLASHPOINT_GPU_MODEL"]}

            @Endpoint(name="count", gpu=GpuGroup.ANY)
            async def count(n: int):
                for i in range(n):
                    yield {"i": i}
            """
        )
    )
    env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_L40S:1", "FLASHPOINT_STATE_DIR": str(tmp_path / "state")}
    env.pop("FLASHPOINT_URL", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "flashpoint", "run", *args], env=env, cwd=tmp_path, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip

    doubled = run("run_endpoint_app.py::double", "--x", "21", "--label", "out")
    streamed = run("run_endpoint_app.py::count", "--n", "3")

    assert doubled.returncode == 0, doubled.stderr
    assert json.loads(doubled.stdout) == {"out": 42, "gpu": "NVIDIA L40S"}
    assert "doubling 21" in doubled.stderr  # the worker's print, through the plane's log
    assert streamed.returncode == 0, streamed.stderr
    assert [json.loads(line) for line in streamed.stdout.splitlines()] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert list((tmp_path / "state" / "run").glob("*.json")) == []  # the plane stopped with the command
