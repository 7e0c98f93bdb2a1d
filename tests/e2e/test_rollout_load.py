"""Rollouts under load on a real empty ``flashpoint serve --data-dir`` (decisions 0097, 0099): 200 concurrent callers,
half on a queue endpoint (``/v2/{id}/runsync``), half on an HTTP-route endpoint (``/{id}/v``), while version 2 of the
project is deployed over HTTP. No request fails; every answer is version 1 or 2; once the rollout reports ``serving``
every new request sees version 2. Twice: with room in the fleet for the new workers beside the old, and with a full
fleet, where each old worker retires before its successor starts. And a server killed (``kill -9``) during a rollout
whose workers are slow to start comes back serving version 1, version 2 failed as interrupted. Simulated GPUs
(labelled so) are the only fake; the load is bounded in requests and in time."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from flashpoint.hosting.artifacts import pack
from tests.conftest import start_serve_process, stop_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

KEY = "rollout-load-key"
APP, ENV = "shop", "production"
QUEUE_ID, ROUTE_ID = f"{APP}.{ENV}.which", f"{APP}.{ENV}.web"
#: concurrent callers (half on each endpoint), the most requests they send in all, and the most seconds they run
CALLERS = 200
MAX_REQUESTS = 8000
LOAD_DEADLINE_S = 150.0
#: answers of each endpoint the callers get before the deploy, and after the rollout reports serving
SEEN = 20

#: the project: a queue endpoint and a route endpoint that both answer their version; ``{slow}`` runs at import
PROJECT = """
import os
import time

from flashpoint import Endpoint, GpuType

if os.environ.get("FLASHPOINT_WORKER_ID"):
    time.sleep({slow})  # in workers only: the server's loader imports this module too


@Endpoint(name="which", gpu=GpuType.NVIDIA_H200, workers={queue_workers})
async def which(n: int) -> dict:
    return {{"version": {version}, "n": n}}


web = Endpoint(name="web", gpu=GpuType.NVIDIA_H200, workers=(1, 1))


@web.get("/v")
async def v() -> dict:
    return {{"version": {version}}}
"""


@dataclass(frozen=True)
class Fleet:
    """A variant: the simulated fleet and the queue endpoint's workers."""

    gpus: str
    queue_workers: tuple[int, int]
    #: old workers must retire to make room (the fleet holds no new worker beside the old)
    full: bool


#: room: old workers (at most 2 + 1) and new ones (as many) fit side by side
ROOM = Fleet("NVIDIA_H200:8", (1, 2), full=False)
#: full: one GPU for each endpoint's single worker; the new one starts only once the old one has retired
FULL = Fleet("NVIDIA_H200:2", (1, 1), full=True)
#: full, and two queue workers: they retire one at a time, while the route endpoint's one retires beside them
FULL_TWO = Fleet("NVIDIA_H200:3", (2, 2), full=True)


@dataclass(frozen=True)
class Answer:
    """One request as a caller saw it."""

    kind: str  # "queue" or "route"
    started: float
    ended: float
    status: int
    version: Any
    problem: str = ""


def project(folder: Path, version: int, fleet: Fleet, slow: float = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    source = PROJECT.format(version=version, queue_workers=fleet.queue_workers, slow=slow)
    (folder / "main.py").write_text(textwrap.dedent(source))
    return folder


def start(tmp_path: Path, gpus: str) -> tuple[Any, str, Path]:
    """A real server on an empty data dir (kept across restarts); its log goes to a file: (process, url, log)."""
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": gpus,
        "FLASHPOINT_API_KEY": KEY,
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "FLASHPOINT_TAKE_HOLD_S": "5",
    }
    command = [sys.executable, "-m", "flashpoint", "serve", "--port", "0", "--data-dir", str(tmp_path / "data")]
    log = tmp_path / f"server-{time.monotonic_ns()}.log"
    with log.open("w") as stderr:  # the child keeps its own copy of the descriptor
        proc, url = start_serve_process(command, env, stderr=stderr)
    return proc, url, log


def devices_started(log: str) -> list[tuple[str, str]]:
    """(endpoint, devices) of each worker the server's log says it started, in order."""
    return re.findall(r"starting worker \S+ for (\S+) on (.+)$", log, flags=re.MULTILINE)


def client(url: str) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=CALLERS + 20, max_keepalive_connections=CALLERS + 20)
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120, limits=limits)


async def upload(http: httpx.AsyncClient, folder: Path) -> int:
    packed = pack(folder)
    answer = await http.post(
        f"/v1/apps/{APP}/envs/{ENV}/versions", content=packed.data, headers={"Content-Type": "application/gzip"}
    )
    assert answer.status_code == 202, answer.text
    number: int = answer.json()["version"]
    return number


async def settle(http: httpx.AsyncClient, number: int, timeout: float = 120) -> tuple[dict[str, Any], float]:
    """Poll a version until its rollout ends (bounded): its rollout, and when the answer saying so arrived."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rollout: dict[str, Any] = (await http.get(f"/v1/apps/{APP}/envs/{ENV}/versions/{number}")).json()
        if rollout["state"] != "pending":
            return rollout, time.monotonic()
        await asyncio.sleep(0.1)
    raise AssertionError(f"version {number} still rolling out after {timeout} s")


async def wait_for_stage(http: httpx.AsyncClient, number: int, stage: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rollout: dict[str, Any] = (await http.get(f"/v1/apps/{APP}/envs/{ENV}/versions/{number}")).json()
        if rollout["stage"] == stage and rollout["state"] == "pending":
            return rollout
        assert rollout["state"] == "pending", rollout
        await asyncio.sleep(0.05)
    raise AssertionError(f"version {number} never reached stage {stage!r} in {timeout} s")


async def call(http: httpx.AsyncClient, kind: str, n: int) -> Answer:
    started = time.monotonic()
    body: Any
    try:
        if kind == "queue":
            response = await http.post(f"/v2/{QUEUE_ID}/runsync", json={"input": {"n": n}})
            body = response.json()
            ok = response.status_code == 200 and body.get("status") == "COMPLETED"
            version = body.get("output", {}).get("version") if ok else None
        else:
            response = await http.get(f"/{ROUTE_ID}/v")
            ok = response.status_code == 200
            body = response.json() if ok else response.text
            version = body["version"] if ok else None
    except (httpx.HTTPError, ValueError) as exc:
        return Answer(kind, started, time.monotonic(), 0, None, f"{type(exc).__name__}: {exc}")
    problem = "" if ok else f"{response.status_code} {str(body)[:300]}"
    return Answer(kind, started, time.monotonic(), response.status_code, version, problem)


async def load(http: httpx.AsyncClient, answers: list[Answer], stop: asyncio.Event) -> None:
    """``CALLERS`` callers, each sending one request after another until ``stop`` (or the bounds) end them."""
    deadline = time.monotonic() + LOAD_DEADLINE_S
    sent = 0

    async def caller(kind: str) -> None:
        nonlocal sent
        while not stop.is_set() and sent < MAX_REQUESTS and time.monotonic() < deadline:
            sent += 1
            answers.append(await call(http, kind, sent))

    await asyncio.gather(*(caller("queue" if i % 2 else "route") for i in range(CALLERS)))


async def answered(answers: list[Answer], callers: asyncio.Task[None], since: float) -> None:
    """Wait until ``SEEN`` requests to each endpoint sent after ``since`` have an answer (or the callers ended)."""
    while not callers.done():
        if all(sum(1 for a in answers if a.kind == kind and a.started > since) >= SEEN for kind in ("queue", "route")):
            return
        await asyncio.sleep(0.05)


async def versions(http: httpx.AsyncClient) -> list[tuple[int, str, str]]:
    env = (await http.get(f"/v1/apps/{APP}/envs/{ENV}")).json()
    return [(v["number"], v["outcome"], v["detail"]) for v in env["versions"]]  # newest first


@pytest.mark.parametrize("fleet", [ROOM, FULL, FULL_TWO], ids=["room", "full", "full-two"])
async def test_a_rollout_under_load_drops_nothing_and_switches(tmp_path: Path, fleet: Fleet) -> None:
    proc, url, log = start(tmp_path, fleet.gpus)
    try:
        async with client(url) as http:
            # Given version 1 serving, and 200 callers on its two endpoints
            first, _ = await settle(http, await upload(http, project(tmp_path / "v1", 1, fleet)))
            assert first["state"] == "serving", first
            answers: list[Answer] = []
            stop = asyncio.Event()
            callers = asyncio.create_task(load(http, answers, stop))
            await answered(answers, callers, 0)  # some answers from version 1 before the deploy

            # When version 2 is deployed while they call
            uploading = time.monotonic()
            second, serving_at = await settle(http, await upload(http, project(tmp_path / "v2", 2, fleet)))
            await answered(answers, callers, serving_at)
            stop.set()
            await callers

            # Then nothing failed, and every answer is one of the two versions
            failed = [a for a in answers if a.problem]
            assert not failed, f"{len(failed)} of {len(answers)} failed, e.g. {failed[:3]}"
            assert second["state"] == "serving", second
            assert Counter(a.version for a in answers).keys() <= {1, 2}, Counter(a.version for a in answers)
            # ... and the answers switched: version 1 before the deploy, only version 2 once it serves
            for kind in ("queue", "route"):
                mine = [a for a in answers if a.kind == kind]
                before = [a.version for a in mine if a.ended < uploading]
                after = [a.version for a in mine if a.started > serving_at]
                assert before and set(before) == {1}, (kind, Counter(before))
                assert len(after) >= SEEN and set(after) == {2}, (kind, Counter(after))
            assert [(n, outcome) for n, outcome, _ in await versions(http)] == [(2, "serving"), (1, "replaced")]
            # and with a full fleet, each new worker got its devices from an old worker of its own endpoint that
            # retired for it (not from another endpoint's, which would leave that one with no worker meanwhile)
            if fleet.full:
                text = log.read_text()
                assert "to make room for the new version" in text
                started = devices_started(text)
                assert len(started) == 2 * (fleet.queue_workers[1] + 1), started
                half = len(started) // 2
                for key in (QUEUE_ID, ROUTE_ID):
                    old = sorted(d for k, d in started[:half] if k == key)
                    new = sorted(d for k, d in started[half:] if k == key)
                    assert old == new, (key, started)
    finally:
        stop_process(proc)


async def test_a_server_killed_mid_rollout_comes_back_on_the_version_before(tmp_path: Path) -> None:
    proc, url, _ = start(tmp_path, ROOM.gpus)
    try:
        async with client(url) as http:
            # Given version 1 serving, and version 2 whose workers take seconds to start, warming
            first, _ = await settle(http, await upload(http, project(tmp_path / "v1", 1, ROOM)))
            assert first["state"] == "serving", first
            number = await upload(http, project(tmp_path / "v2", 2, ROOM, slow=5))
            assert number == 2
            await wait_for_stage(http, number, "warm")
    finally:
        # When the server is killed mid-rollout
        stop_process(proc, signal.SIGKILL)

    # Then, restarted on the same data dir, version 1 serves (and only it), version 2 failed as interrupted
    proc, url, _ = start(tmp_path, ROOM.gpus)
    try:
        async with client(url) as http:
            history = await versions(http)
            assert [(n, outcome) for n, outcome, _ in history] == [(2, "failed"), (1, "serving")], history
            assert "interrupted" in history[0][2], history
            env = (await http.get(f"/v1/apps/{APP}/envs/{ENV}")).json()
            assert env["env"]["serving"] == 1, env
            queued = await asyncio.gather(*(call(http, "queue", n) for n in range(10)))
            routed = await asyncio.gather(*(call(http, "route", n) for n in range(10)))
            assert [(a.problem, a.version) for a in [*queued, *routed]] == [("", 1)] * 20
    finally:
        stop_process(proc)
