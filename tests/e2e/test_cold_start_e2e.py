"""Cold starts measured by phase with real processes (decision 0118; issue 25, point 6): ``flashpoint serve`` of an
app whose module sleeps 1 s on import and whose ``@init`` hook sleeps 1.5 s; its first job's ``coldStart`` holds
the phases, the worker's measured imports and init among them, and they sum to the job's observed queue-to-start
time; and a Flash class's constructor, which runs in its worker's first job, as that job's init. Simulated GPUs
only."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


CONSTRUCT_S = 1.0


async def test_a_class_s_constructor_is_its_first_job_s_init(make_embedded: Callable[..., Any]) -> None:
    from flashpoint import Endpoint, GpuType

    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="slow-model", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    class Model:
        def __init__(self, scale: int) -> None:
            import time

            time.sleep(CONSTRUCT_S)  # a slow model load, in the worker's first job
            self.scale = scale

        def predict(self, x: int) -> int:
            return self.scale * x

    # When the first call of a class endpoint at zero workers builds its instance
    assert await Model(3).predict(2) == 6
    # and a second call uses it
    assert await Model(3).predict(5) == 15

    headers = {"Authorization": embedded.api_key}
    async with httpx.AsyncClient(base_url=embedded.url, headers=headers, timeout=30) as client:
        jobs = sorted((await client.get("/v1/jobs")).json()["jobs"], key=lambda j: j["createdAt"])
        first, second = [(await client.get(f"/v1/jobs/{job['id']}")).json() for job in jobs]
        (endpoint,) = (await client.get("/v1/endpoints")).json()["endpoints"]

    # Then the constructor is the first job's init (measured by the worker, at least its sleep), and the worker's too
    phases = first["coldStart"]
    assert list(phases) == ["devices", "process", "imports", "init", "first_job"]
    assert CONSTRUCT_S <= phases["init"] < CONSTRUCT_S + 1.0
    # the job's phases sum to its wait plus the constructor, which ran inside it
    assert abs(sum(phases.values()) - phases["init"] - first["delayTime"] / 1000) <= TOLERANCE_S
    assert first["executionTime"] / 1000 >= phases["init"]
    (worker,) = endpoint["workers"]
    assert worker["phases"]["init"] == phases["init"]
    # and the second call waited on no cold start
    assert second.get("coldStart") is None
