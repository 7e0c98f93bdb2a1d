"""A real empty ``flashpoint serve --data-dir`` process taking deploys over HTTP (``flashpoint.api.approutes``,
``hosting/deploying.py``): a project becomes version 1 and serves under its id; version 2 takes over; a project that
does not load is refused with its error and takes no number; one whose workers never start fails and the version
before serves on; two apps with one endpoint name are kept apart (a bare name is 409 naming the ids); what was
deployed comes back after ``kill -9``. Simulated GPUs (labelled so) are the only fake."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from flashpoint.hosting.artifacts import pack
from tests.conftest import SERVER_GPUS, start_serve_process, stop_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KEY = "deploy-test-key"

ECHO = """
from flashpoint import Endpoint, GpuGroup


@Endpoint(name="echo", gpu=GpuGroup.ANY, workers=(0, 1))
async def echo(text: str) -> dict:
    return {{"version": {version}, "text": text}}
"""

#: imports fine where the server loads it, and fails in every worker: a version that never becomes ready
BROKEN_WORKER = """
import os

from flashpoint import Endpoint, GpuGroup

if os.environ.get("FLASHPOINT_WORKER_ID"):
    raise SystemExit("this worker refuses to start")


@Endpoint(name="echo", gpu=GpuGroup.ANY, workers=(1, 1))
async def echo(text: str) -> dict:
    return {"version": "never"}
"""


def project(folder: Path, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.py").write_text(textwrap.dedent(source))
    return folder


def start(tmp_path: Path) -> tuple[Any, str]:
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS,
        "FLASHPOINT_API_KEY": KEY,
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "FLASHPOINT_TAKE_HOLD_S": "5",
    }
    command = [sys.executable, "-m", "flashpoint", "serve", "--port", "0", "--data-dir", str(tmp_path / "data")]
    return start_serve_process(command, env)


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


def upload(http: httpx.Client, folder: Path, app: str, env: str = "production") -> httpx.Response:
    packed = pack(folder)
    return http.post(
        f"/v1/apps/{app}/envs/{env}/versions", content=packed.data, headers={"Content-Type": "application/gzip"}
    )


def settle(http: httpx.Client, app: str, env: str, number: int, timeout: float = 120) -> dict[str, Any]:
    """Poll a version until its rollout ends (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rollout: dict[str, Any] = http.get(f"/v1/apps/{app}/envs/{env}/versions/{number}").json()
        if rollout["state"] != "pending":
            return rollout
        time.sleep(0.1)
    raise AssertionError(f"version {number} of {app}/{env} still rolling out after {timeout} s")


def deploy(http: httpx.Client, folder: Path, app: str, env: str = "production") -> dict[str, Any]:
    answer = upload(http, folder, app, env)
    assert answer.status_code == 202, answer.text
    return settle(http, app, env, answer.json()["version"])


def call(http: httpx.Client, endpoint: str, text: str = "hi") -> httpx.Response:
    return http.post(f"/v2/{endpoint}/runsync", json={"input": {"text": text}})


def test_versions_switch_refusals_take_no_number_and_failures_keep_the_old(tmp_path: Path) -> None:
    proc, url = start(tmp_path)
    try:
        with client(url) as http:
            assert http.get("/v1/apps/shop").status_code == 404
            assert "deploy it first with 'flashpoint deploy'" in http.get("/v1/apps/shop").json()["message"]

            first = deploy(http, project(tmp_path / "v1", ECHO.format(version=1)), "shop")
            assert first["state"] == "serving", first
            assert first["endpoints"] == [
                {"name": "echo", "id": "shop.production.echo", "kind": "queue", "url": f"{url}/v2/shop.production.echo"}
            ]
            assert call(http, "shop.production.echo").json()["output"] == {"version": 1, "text": "hi"}
            assert call(http, "echo").json()["output"] == {"version": 1, "text": "hi"}  # unique: a bare name works

            second = deploy(http, project(tmp_path / "v2", ECHO.format(version=2)), "shop")
            assert (second["version"], second["state"]) == (2, "serving")
            assert call(http, "shop.production.echo").json()["output"] == {"version": 2, "text": "hi"}

            refused = upload(http, project(tmp_path / "bad", "import no_such_module_here\n"), "shop")
            assert refused.status_code == 400, refused.text
            assert "no_such_module_here" in refused.json()["message"]

            failed = deploy(http, project(tmp_path / "broken", BROKEN_WORKER), "shop")
            assert (failed["version"], failed["state"]) == (3, "failed"), failed  # the refused upload took no number
            assert failed["detail"], failed
            assert call(http, "shop.production.echo").json()["output"] == {"version": 2, "text": "hi"}

            env = http.get("/v1/apps/shop/envs/production").json()
            assert [(v["number"], v["outcome"]) for v in env["versions"]] == [  # newest first
                (3, "failed"),
                (2, "serving"),
                (1, "replaced"),
            ]
            assert env["env"]["serving"] == 2
    finally:
        stop_process(proc)


def test_apps_apart_and_back_after_kill_9(tmp_path: Path) -> None:
    proc, url = start(tmp_path)
    try:
        with client(url) as http:
            assert deploy(http, project(tmp_path / "a", ECHO.format(version=10)), "shop")["state"] == "serving"
            assert deploy(http, project(tmp_path / "b", ECHO.format(version=20)), "lab", "staging")["state"] == (
                "serving"
            )
            assert call(http, "shop.production.echo").json()["output"]["version"] == 10
            assert call(http, "lab.staging.echo").json()["output"]["version"] == 20
            ambiguous = call(http, "echo")
            assert ambiguous.status_code == 409, ambiguous.text
            assert "shop.production.echo" in ambiguous.json()["message"]
            assert "lab.staging.echo" in ambiguous.json()["message"]
    finally:
        stop_process(proc, signal.SIGKILL)

    proc, url = start(tmp_path)
    try:
        with client(url) as http:
            assert call(http, "shop.production.echo").json()["output"]["version"] == 10
            assert call(http, "lab.staging.echo").json()["output"]["version"] == 20
            assert [a["name"] for a in http.get("/v1/apps").json()["apps"]] == ["lab", "shop"]
    finally:
        stop_process(proc)


def test_serve_app_serves_it_as_an_app_named_after_its_folder(tmp_path: Path) -> None:
    folder = project(tmp_path / "shopfront", ECHO.format(version=7))
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS,
        "FLASHPOINT_API_KEY": KEY,
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
    }
    command = [sys.executable, "-m", "flashpoint", "serve", str(folder / "main.py"), "--port", "0", "--data-dir",
               str(tmp_path / "data")]  # fmt: skip
    proc, url = start_serve_process(command, env)
    try:
        with client(url) as http:
            assert call(http, "shopfront.production.echo").json()["output"] == {"version": 7, "text": "hi"}
            assert call(http, "echo").json()["output"]["version"] == 7  # unique: a bare name works
            refused = upload(http, project(tmp_path / "v2", ECHO.format(version=8)), "shopfront")
            assert refused.status_code == 409, refused.text
            assert "is served from" in refused.json()["message"] and "--app" in refused.json()["message"]
            beside = deploy(http, project(tmp_path / "lab", ECHO.format(version=9)), "lab")
            assert beside["state"] == "serving"
            assert call(http, "lab.production.echo").json()["output"]["version"] == 9
            assert call(http, "shopfront.production.echo").json()["output"]["version"] == 7
            assert call(http, "echo").status_code == 409  # two now: the ids are needed
    finally:
        stop_process(proc)


def test_two_teams_deploy_two_apps_with_their_own_deploy_keys(tmp_path: Path) -> None:
    proc, url = start(tmp_path)
    try:
        with client(url) as admin:
            keys = {
                team: admin.post("/v1/keys", json={"name": team, "scope": "deploy", "app": team}).json()["key"]
                for team in ("shop", "lab")
            }
        shop = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {keys['shop']}"}, timeout=60)
        lab = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {keys['lab']}"}, timeout=60)
        with shop, lab:
            assert deploy(shop, project(tmp_path / "shop", ECHO.format(version=1)), "shop")["state"] == "serving"
            assert deploy(lab, project(tmp_path / "lab", ECHO.format(version=2)), "lab")["state"] == "serving"
            # each calls its own app; the other's is absent to it, for calls and for deploys alike
            assert call(shop, "shop.production.echo").json()["output"]["version"] == 1
            assert call(lab, "lab.production.echo").json()["output"]["version"] == 2
            assert call(shop, "lab.production.echo").status_code == 404
            assert upload(lab, tmp_path / "lab", "shop").status_code == 404
            assert call(shop, "echo").json()["output"]["version"] == 1  # a bare name among what the key sees
            history = shop.get("/v1/apps/shop/envs/production").json()["versions"]
            assert [(v["number"], v["created_by"]) for v in history] == [(1, "shop")]
            jobs = shop.get("/v1/jobs").json()["jobs"]
            assert {j["submittedBy"] for j in jobs} == {"shop"}
    finally:
        stop_process(proc)
