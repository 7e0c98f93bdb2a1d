"""Cold starts measured by phase with real processes (decision 0118; issue 25, point 6): ``flashpoint serve`` of an
app whose module sleeps 1 s on import and whose ``@init`` hook sleeps 1.5 s; its first job's ``coldStart`` holds
the phases, the worker's measured imports and init among them, and they sum to the job's observed queue-to-start
time. Simulated GPUs only."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_serve_process, stop_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

IMPORT_S, INIT_S = 1.0, 1.5
#: how far the phases' sum may be from the job's queue-to-start time: the plane's monotonic phases against its wall
#: clock's delay (milliseconds, rounded), and the worker's own clock for imports and init
TOLERANCE_S = 0.05

APP = f"""
import time

import runpod
from runpod import App, GpuGroup

time.sleep({IMPORT_S})  # a slow import

lab = App("lab")


@lab.queue(name="slow", gpu=GpuGroup.ANY, workers=(0, 1))
def slow(x: int) -> int:
    return x


@slow.init
def load() -> None:
    time.sleep({INIT_S})  # a slow model load
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(APP))
    env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1", "FLASHPOINT_STATE_DIR": str(tmp_path / "st")}
    env.pop("FLASHPOINT_API_KEY", None)
    command = [sys.executable, "-m", "flashpoint", "serve", str(app), "--port", "0", "--data-dir", str(tmp_path / "d")]
    proc, url = start_serve_process(command, env)
    try:
        yield url
    finally:
        stop_process(proc)


def test_a_cold_start_s_phases_are_recorded_and_sum_to_the_job_s_wait(server: str) -> None:
    with httpx.Client(base_url=server, timeout=90) as client:
        # When the first job of an endpoint at zero workers runs
        done = client.post("/v2/lab.default.slow/runsync", json={"input": {"x": 7}}).json()
        assert done["status"] == "COMPLETED" and done["output"] == 7

        # Then the job carries its cold start, every phase of a flashpoint worker but the environment's
        job = client.get(f"/v1/jobs/{done['id']}").json()
        phases = job["coldStart"]
        assert list(phases) == ["devices", "process", "imports", "init", "first_job"]
        assert all(seconds >= 0 for seconds in phases.values())
        # the worker measured its import and init hook (each at least its sleep, and not much more)
        assert IMPORT_S <= phases["imports"] < IMPORT_S + 1.0
        assert INIT_S <= phases["init"] < INIT_S + 1.0
        # and the phases sum to the job's queue-to-start time
        assert abs(sum(phases.values()) - job["delayTime"] / 1000) <= TOLERANCE_S

        # the worker's row shows the same start
        (endpoint,) = client.get("/v1/endpoints").json()["endpoints"]
        (worker,) = endpoint["workers"]
        assert worker["phases"] == {name: s for name, s in phases.items() if name != "devices"}

        # and Prometheus has one observation per phase
        metrics = client.get("/metrics").text
        for name in phases:
            assert f'flashpoint_cold_start_seconds_count{{endpoint="lab.default.slow",phase="{name}"}} 1.0' in metrics
