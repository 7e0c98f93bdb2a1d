"""A real ``flashpoint dev`` process on a temporary project (simulated H200, CPU workers, real worker processes, real
HTTP on 127.0.0.1): Flash's dev URLs for a GPU function, a CPU function, a class's methods and a route endpoint; and a
file edited while a job runs with another queued behind it: the running job ends on the old code, the queued one on
the new.

Covers ``flashpoint.cli.dev`` (the ``flashpoint dev`` command) for tests/test_layout.py."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, stop_process, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

GPU_WORKER = '''
import asyncio
import os
import time
from pathlib import Path

from runpod_flash import Endpoint, GpuGroup

VERSION = "v1"


@Endpoint(name="gpu_worker", gpu=GpuGroup.ANY)
async def process(tag: str, gate: str = "") -> dict:
    """Answer with this code's version; with a gate, say so in GATE.started and wait for GATE to exist first."""
    if gate:
        Path(gate + ".started").write_text(tag)
        deadline = time.monotonic() + 90
        while not Path(gate).exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    return {"version": VERSION, "tag": tag, "gpu": os.environ.get("FLASHPOINT_GPU_MODEL")}
'''
CPU_WORKER = """
from runpod_flash import Endpoint


@Endpoint(name="cpu_worker", cpu="cpu3c-1-2")
def double(x: int) -> int:
    return 2 * x
"""
MODEL = """
from runpod_flash import Endpoint


@Endpoint(name="model", cpu="cpu3c-1-2")
class Model:
    def predict(self, text: str) -> str:
        return text.upper()

    def info(self) -> dict:
        return {"kind": "model"}
"""
LB_WORKER = """
from runpod_flash import Endpoint

api = Endpoint(name="lb-api", cpu="cpu3c-1-2")


@api.post("/compute")
async def compute(numbers: list) -> dict:
    return {"sum": sum(numbers)}


@api.get("/items/{item_id}")
async def item(item_id: str, q: int = 0) -> dict:
    return {"item": item_id, "q": q}
"""


@dataclass
class Dev:
    """A running ``flashpoint dev``: its URL, its process, and its stdout lines as they arrive."""

    proc: subprocess.Popen[str]
    url: str = ""
    lines: list[str] = field(default_factory=list)

    def said(self, pattern: str, timeout: float = 60) -> str:
        """The first stdout line matching ``pattern``, waiting for it (``timeout`` seconds at most)."""
        return until(
            lambda: next((line for line in list(self.lines) if re.search(pattern, line)), None),
            timeout,
            f"flashpoint dev to print {pattern!r}; it printed:\n{''.join(self.lines)}",
        )


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Callable[..., Dev]]:
    """``dev(files, *args)``: write a project and run ``flashpoint dev`` on it; SIGINT (then SIGKILL) at teardown."""
    started: list[Dev] = []

    def start(files: dict[str, str], *args: str) -> Dev:
        root = tmp_path / "project"
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(textwrap.dedent(text))
        env = {
            **os.environ,
            "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1",
            "FLASHPOINT_CPUS": "4",
            "FLASHPOINT_MEMORY_GB": "16",
            "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
            "FLASHPOINT_TAKE_HOLD_S": "5",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("FLASHPOINT_API_KEY", None)
        env.pop("FLASHPOINT_URL", None)
        with (tmp_path / "dev.err").open("w") as err:  # the plane's and the workers' log lines
            proc = subprocess.Popen(
                [sys.executable, "-m", "flashpoint", "dev", str(root), "--host", "127.0.0.1", *args],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        dev = Dev(proc)
        started.append(dev)
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=lambda: dev.lines.extend(iter(stdout.readline, "")), daemon=True).start()
        line = dev.said(r"^flashpoint dev serving http://", 90)
        dev.url = line.split()[3]
        return dev

    yield start
    for dev in started:
        stop_process(dev.proc, signal.SIGINT)
    print((tmp_path / "dev.err").read_text(errors="replace")[-4000:])


def test_flash_dev_urls_over_real_http(dev: Callable[..., Dev]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        served = dev(
            {
                "gpu_worker.py": GPU_WORKER,
                "cpu_worker.py": CPU_WORKER,
                "models/model.py": MODEL,
                "lb_worker.py": LB_WORKER,
            },
            "--port",
            str(port),
        )
        # a busy port: the next free one, and it says so
        assert port < int(served.url.rsplit(":", 1)[1]) < port + 20
        assert f"port {port} was busy" in served.lines[0]
    for row in ("POST  /gpu_worker/runsync", "POST  /models/model/predict/runsync", "GET   /lb_worker/items/{item_id}"):
        assert any(row in line for line in served.lines), row
    with httpx.Client(base_url=served.url, timeout=120) as client:
        assert client.get("/").json() == {"message": "flashpoint dev server", "docs": "/docs"}
        assert client.get("/ping").json() == {"status": "healthy"}
        docs = client.get("/docs").text
        assert "/cpu_worker/runsync" in docs and "/lb_worker/compute" in docs and "<script" not in docs
        gpu = client.post("/gpu_worker/runsync", json={"input": {"tag": "a"}})
        assert gpu.status_code == 200, gpu.text
        assert gpu.json()["status"] == "COMPLETED"
        assert gpu.json()["output"] == {"version": "v1", "tag": "a", "gpu": "NVIDIA H200"}
        assert client.post("/cpu_worker/runsync", json={"input": {"x": 21}}).json()["output"] == 42
        assert client.post("/models/model/predict/runsync", json={"input": {"text": "hi"}}).json()["output"] == "HI"
        assert client.post("/models/model/info/runsync").json()["output"] == {"kind": "model"}
        compute = client.post("/lb_worker/compute", json={"numbers": [1, 2, 3]})
        assert compute.status_code == 200, compute.text
        assert compute.json() == {"sum": 6}
        assert client.get("/lb_worker/items/7", params={"q": 2}).json() == {"item": "7", "q": 2}
        empty = client.post("/gpu_worker/runsync", json={"input": {}})
        assert empty.status_code == 422 and "Empty or null input" in empty.json()["detail"]
        # the server's own API is there too: the job by id on Runpod's routes
        status = client.get(f"/v2/gpu_worker/status/{gpu.json()['id']}").json()
        assert status["status"] == "COMPLETED"


def test_an_edit_reloads_the_endpoint_without_losing_its_queued_job(dev: Callable[..., Dev], tmp_path: Path) -> None:
    # Given a GPU function on the only GPU, running job A (held at a gate) with job B queued behind it
    served = dev({"gpu_worker.py": GPU_WORKER}, "--port", "0")
    gate = tmp_path / "gate"
    with httpx.Client(base_url=served.url, timeout=150) as client, ThreadPoolExecutor(2) as pool:

        def runsync(data: dict[str, Any]) -> Future[httpx.Response]:
            return pool.submit(client.post, "/gpu_worker/runsync", json={"input": data})

        def queued() -> int:
            jobs: dict[str, int] = client.get("/v2/gpu_worker/health").json()["jobs"]
            return jobs["inQueue"]

        a = runsync({"tag": "A", "gate": str(gate)})
        until(lambda: Path(f"{gate}.started").exists() or a.done(), 90, "job A to start")
        assert not a.done(), a.result().text
        b = runsync({"tag": "B"})
        until(lambda: queued() == 1 or b.done(), 30, "job B to be queued")
        # When the file changes (saved whole, as editors do)
        source = served_file(tmp_path)
        edited = source.with_suffix(".tmp")
        edited.write_text(source.read_text().replace('VERSION = "v1"', 'VERSION = "v2"'))
        os.replace(edited, source)
        served.said(r"reloaded: replaced gpu_worker \(1 worker\(s\) retiring\)")
        # Then B is still queued; A, let go, ends on the old code, and B runs on the new
        assert queued() == 1 and not a.done() and not b.done()
        gate.write_text("go")
        first, second = a.result(timeout=60), b.result(timeout=90)
    assert first.status_code == 200 and first.json()["output"]["version"] == "v1", first.text
    assert second.status_code == 200 and second.json()["output"] == {"version": "v2", "tag": "B", "gpu": "NVIDIA H200"}


def test_the_cli_sees_a_dev_server_and_forgets_it_when_it_stops(dev: Callable[..., Dev], tmp_path: Path) -> None:
    served = dev({"cpu_worker.py": CPU_WORKER}, "--port", "0")
    run = tmp_path / "state" / "run"
    [announcement] = list(run.glob("*-dev.json"))
    body = json.loads(announcement.read_text())
    assert body["kind"] == "dev" and body["pid"] == served.proc.pid and body["url"] == served.url
    assert stat.S_IMODE(announcement.stat().st_mode) == 0o600
    env = {**os.environ, "FLASHPOINT_STATE_DIR": str(tmp_path / "state")}
    env.pop("FLASHPOINT_URL", None)
    status = subprocess.run(
        [sys.executable, "-m", "flashpoint", "status", "--json"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    [plane] = json.loads(status.stdout)["planes"]
    assert plane["kind"] == "dev" and plane["url"] == served.url, plane
    assert [endpoint["name"] for endpoint in plane["endpoints"]] == ["cpu_worker"], plane
    served.proc.send_signal(signal.SIGINT)
    assert served.proc.wait(30) == 130  # stopped by ctrl+c, as a shell reports it
    assert not announcement.exists()


def served_file(tmp_path: Path) -> Path:
    return tmp_path / "project" / "gpu_worker.py"
