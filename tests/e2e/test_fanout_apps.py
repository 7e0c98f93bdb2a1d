"""Fan-out stays inside its own app and environment (issue 22 point 10, decision 0104).

A real empty ``flashpoint serve --data-dir`` takes two apps over HTTP (``flashpoint.deploy``), ``shop`` and ``lab``,
both to ``production``, both with endpoints ``front`` and ``rank``. ``front`` awaits ``rank`` by its bare name with
flashpoint's SDK (the worker calls the plane with its caller key, as tests/e2e/test_fanout.py does): shop's front
reaches shop's rank and lab's front lab's, though ``rank`` is ambiguous on the server (a bare call of it is 409). Run
on a server with a key and on one without (loopback only), where the caller key still counts as itself.

Simulated GPUs only; every wait is bounded.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import flashpoint
from tests.conftest import SERVER_GPUS, start_serve_process, stop_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

KEY = "fanout-apps-key"

PROJECT = """
import os

from flashpoint import Endpoint

APP = "{app}"


@Endpoint(name="rank", cpu="cpu3c-1-2", workers=(0, 1), idle_timeout=300)
async def rank(items: list) -> dict:
    return {{"app": APP, "ranked": sorted(items), "worker_app": os.environ["FLASHPOINT_APP"]}}


@Endpoint(name="front", cpu="cpu3c-1-2", workers=(0, 1), idle_timeout=300)
async def front(items: list) -> dict:
    return {{"app": APP, "rank": await rank(items)}}
"""


@dataclass(frozen=True)
class Server:
    url: str
    key: str | None


@pytest.fixture(scope="module", params=["key", "keyless"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(f"fanout-apps-{request.param}")
    key = KEY if request.param == "key" else None
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS,
        "FLASHPOINT_STATE_DIR": str(tmp / "state"),
        "FLASHPOINT_TAKE_HOLD_S": "5",
    }
    env.pop("FLASHPOINT_API_KEY", None)
    if key is not None:
        env["FLASHPOINT_API_KEY"] = key
    command = [sys.executable, "-m", "flashpoint", "serve", "--port", "0", "--data-dir", str(tmp / "data")]
    proc, url = start_serve_process(command, env)
    try:
        for app in ("shop", "lab"):
            folder = project(tmp / "projects" / app, app)
            result = flashpoint.deploy(folder, app=app, url=url, key=key, timeout=180)
            assert sorted(e.id for e in result.endpoints) == [f"{app}.production.front", f"{app}.production.rank"]
        yield Server(url, key)
    finally:
        stop_process(proc)


def project(folder: Path, app: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "main.py").write_text(textwrap.dedent(PROJECT.format(app=app)))
    return folder


def client(server: Server) -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.key}"} if server.key else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=120)


def test_front_reaches_the_rank_of_its_own_app(server: Server) -> None:
    with client(server) as http:
        # rank is ambiguous on the server: a bare call names both ids
        bare = http.post("/v2/rank/runsync", json={"input": {"items": [2, 1]}})
        assert bare.status_code == 409, bare.text
        assert "lab.production.rank" in bare.json()["message"]
        assert "shop.production.rank" in bare.json()["message"]

        for app in ("shop", "lab"):
            answer = http.post(f"/v2/{app}.production.front/runsync", json={"input": {"items": [3, 1, 2]}})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["status"] == "COMPLETED", body
            assert body["output"] == {"app": app, "rank": {"app": app, "ranked": [1, 2, 3], "worker_app": app}}

        # each front's call was a job of its own app's rank, submitted by the front's worker
        for app in ("shop", "lab"):
            jobs = http.get("/v1/jobs", params={"endpoint": f"{app}.production.rank"}).json()["jobs"]
            assert len(jobs) == 1 and jobs[0]["status"] == "COMPLETED", jobs
            if server.key is not None:
                assert jobs[0]["submittedBy"].startswith(f"worker:{app}.production.front-"), jobs
