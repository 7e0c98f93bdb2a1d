"""Fan-out end to end (issue 12 point 6): code in a worker awaiting another endpoint, with real worker processes.

Under a real ``flashpoint serve``, a route's handler awaits a GPU queue function (simulated H200) and answers
through the proxy, and the worker's caller key is refused where it must be; on the embedded server, a queue
function awaits another. Every wait is bounded; nothing sleeps to synchronise."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from flashpoint.hosting.embedded import EmbeddedServer
from tests.apps import fanout_app
from tests.conftest import ROOT, Served, start_serve_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KEY = "fanout-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("fanout")
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": fanout_app.FLEET,
        "FLASHPOINT_API_KEY": KEY,
        "FLASHPOINT_STATE_DIR": str(tmp / "state"),
    }
    db = tmp / "jobs.db"
    app = str(ROOT / "tests/apps/fanout_app.py")
    proc, url = start_serve_process(
        [sys.executable, "-m", "flashpoint", "serve", app, "--port", "0", "--db", str(db)], env
    )
    served = Served(url, KEY, proc, db)
    yield served
    served.stop()


def test_a_route_awaits_a_gpu_queue_function_through_the_proxy(server: Served) -> None:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as client:
        response = client.post("/fanout-api/classify", json={"text": "hello world"})
        assert response.status_code == 200, response.text
        assert response.json() == {"text": "hello world", "result": {"label": "long", "gpu": "NVIDIA H200"}}
        jobs = client.get("/v1/jobs", params={"endpoint": "fanout-classify"}).json()["jobs"]
        assert jobs and all(job["status"] == "COMPLETED" for job in jobs)


def test_the_caller_key_is_refused_beyond_calls_and_its_own_jobs(server: Served) -> None:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as client:
        other = client.post("/v2/fanout-classify/run", json={"input": {"text": "someone else's"}}).json()["id"]
        response = client.post("/fanout-api/probe", json={"other_job": other})
        assert response.status_code == 200, response.text
        codes = response.json()
    assert codes == {
        "own_status": 200,
        "own_wait": 200,
        "other_status": 404,
        "other_cancel": 404,
        "other_job": 404,
        "endpoint_check": 200,
        "v1_endpoints": 403,
        "v1_explain": 403,
        "v1_fleet": 403,
        "purge": 403,
        "health": 403,
        "worker_take": 401,
        "tampered": 401,
    }


async def test_a_queue_function_awaits_another_on_the_embedded_server(
    make_embedded: Callable[..., EmbeddedServer], tmp_path: Path
) -> None:
    embedded = make_embedded(fanout_app.FLEET)
    # the script calls fanout-pair only: the embedded plane registers fanout-classify with it, as pair's code names it
    job = await fanout_app.classify_pair.run("abc")
    got = await job.result(timeout=120)
    assert got == [{"label": "short", "gpu": "NVIDIA H200"}, {"label": "long", "gpu": "NVIDIA H200"}]
    assert {"fanout-pair", "fanout-classify"} <= set(embedded.plane.endpoints)
    # the worker's calls (a submit and a long-poll each) leave no httpx request lines in the job's log
    logs = embedded.plane.job(job.id).logs
    assert not any("HTTP Request" in line for line in logs), logs
