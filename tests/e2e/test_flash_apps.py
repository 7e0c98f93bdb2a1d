"""Flash's own client reaching deployed apps by its headers (issue 22 point 4, decision 0104).

A real empty ``flashpoint serve --data-dir`` takes two apps over HTTP (``flashpoint.deploy``): ``shop`` to
``production`` and ``lab`` to ``staging``, each with an endpoint of the same name, ``embed``, saying which app it is.
Then runpod-flash 1.21 (the ``flash_venv`` fixture, tests/flashvenv.py) runs an unmodified script calling ``embed``
with ``FLASH_APP``/``FLASH_ENV`` set per call: Flash's client sends ``X-Flash-App``, ``X-Flash-Environment`` and
``X-Flash-Endpoint`` (``runpod_flash/flash_sentinel.py``), with ``FLASH_APP`` defaulting to the working folder's name
and ``FLASH_ENV`` to ``production`` (``runpod_flash/flash_context.py``). Each call reaches its own app; an app or an
environment not deployed is Flash's "not deployed" 404; a bare Runpod call of the shared name is 409 naming both ids.

Simulated GPUs only. Without network the Flash install fails: skipped locally, a failure in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import flashpoint
from tests.conftest import SERVER_GPUS, start_serve_process, stop_process
from tests.flashvenv import FlashVenv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

KEY = "flash-apps-key"
#: a closed port on loopback: Flash's other URLs and any proxied request fail here instead of reaching the internet
NOWHERE = "http://127.0.0.1:9"

#: one project per app: the same endpoint name, saying which app (and which environment the worker was told) it is
PROJECT = """
import os

from flashpoint import Endpoint, GpuGroup


@Endpoint(name="embed", gpu=GpuGroup.ANY, workers=(0, 1), idle_timeout=300)
async def embed(text: str) -> dict:
    return {{"app": "{app}", "text": text, "flash_app": os.environ["FLASH_APP"], "flash_env": os.environ["FLASH_ENV"]}}
"""

#: an unmodified Flash script: it declares ``embed`` and awaits it once per (FLASH_APP, FLASH_ENV, folder) it is given,
#: setting them as a user's shell would (Flash reads them at each call); one JSON line per call
SCRIPT = """
import asyncio
import json
import os
import sys

from runpod_flash import Endpoint, GpuGroup


@Endpoint(name="embed", gpu=GpuGroup.ANY)
async def embed(text: str) -> dict:
    raise AssertionError("runs on the deployed app, never here")


async def main() -> None:
    for case in json.loads(sys.argv[1]):
        for name in ("FLASH_APP", "FLASH_ENV"):
            os.environ.pop(name, None)
            if case.get(name) is not None:
                os.environ[name] = case[name]
        os.chdir(case["cwd"])
        try:
            line = {"case": case["case"], "output": await embed("hi")}
        except Exception as exc:
            line = {"case": case["case"], "error": type(exc).__name__, "message": str(exc)}
        print(json.dumps(line), flush=True)


asyncio.run(main())
"""


@dataclass(frozen=True)
class Server:
    url: str
    key: str


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("flash-apps")
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
        for app, app_env in (("shop", "production"), ("lab", "staging")):
            folder = tmp / "projects" / app
            folder.mkdir(parents=True)
            (folder / "main.py").write_text(textwrap.dedent(PROJECT.format(app=app)))
            result = flashpoint.deploy(folder, app=app, env=app_env, url=url, key=KEY, timeout=180)
            assert [e.id for e in result.endpoints] == [f"{app}.{app_env}.embed"]
        yield Server(url, KEY)
    finally:
        stop_process(proc)


def flash_calls(flash_venv: FlashVenv, server: Server, tmp_path: Path, cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Run the Flash script once over ``cases``: its JSON lines by case."""
    script = tmp_path / "flash_calls.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = flash_venv.env(
        RUNPOD_ENDPOINT_BASE_URL=f"{server.url}/v2",
        RUNPOD_API_KEY=server.key,
        RUNPOD_API_BASE_URL=NOWHERE,
        RUNPOD_REST_API_URL=NOWHERE,
        RUNPOD_HAPI_URL=NOWHERE,
        RUNPOD_CONSOLE_URL=NOWHERE,
        HTTP_PROXY=NOWHERE,
        HTTPS_PROXY=NOWHERE,
        ALL_PROXY=NOWHERE,
        NO_PROXY="127.0.0.1,localhost",
    )
    for name in ("FLASH_APP", "FLASH_ENV"):
        env.pop(name, None)
    run = subprocess.run(
        [str(flash_venv.python), str(script), json.dumps(cases)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return {line.pop("case"): line for line in lines}


def test_flashs_client_reaches_each_app_by_its_headers(flash_venv: FlashVenv, server: Server, tmp_path: Path) -> None:
    # a folder named after an app: Flash's default FLASH_APP when none is set
    (tmp_path / "shop").mkdir()
    here, shop_folder = str(tmp_path), str(tmp_path / "shop")
    cases = [
        {"case": "shop", "FLASH_APP": "shop", "FLASH_ENV": "production", "cwd": here},
        {"case": "lab", "FLASH_APP": "lab", "FLASH_ENV": "staging", "cwd": here},
        # nothing set: the folder's name and production (Flash's defaults)
        {"case": "defaults", "cwd": shop_folder},
        # FLASH_ENV unset: Flash sends production, where lab is not deployed
        {"case": "lab default env", "FLASH_APP": "lab", "cwd": here},
        {"case": "ghost", "FLASH_APP": "ghost", "FLASH_ENV": "production", "cwd": here},
    ]

    got = flash_calls(flash_venv, server, tmp_path, cases)

    shop = {"app": "shop", "text": "hi", "flash_app": "shop", "flash_env": "production"}
    assert got["shop"] == {"output": shop}
    assert got["lab"] == {"output": {"app": "lab", "text": "hi", "flash_app": "lab", "flash_env": "staging"}}
    assert got["defaults"] == {"output": shop}
    # what Flash raises for a 404: its own words, naming the app and environment it asked for
    assert got["lab default env"] == {
        "error": "RuntimeError",
        "message": "endpoint 'embed' not found in app 'lab' environment 'production'. deploy it first with 'flash "
        "deploy'.",
    }
    assert got["ghost"] == {
        "error": "RuntimeError",
        "message": "endpoint 'embed' not found in app 'ghost' environment 'production'. deploy it first with 'flash "
        "deploy'.",
    }


def sentinel(http: httpx.Client, app: str | None, env: str | None, endpoint: str = "embed") -> httpx.Response:
    """A call as Flash's client makes it (``_sentinel_qb_post``), the headers it would not send left out."""
    headers = {"X-Flash-Endpoint": endpoint}
    if app is not None:
        headers["X-Flash-App"] = app
    if env is not None:
        headers["X-Flash-Environment"] = env
    return http.post("/v2/flash/runsync", json={"input": {"text": "hi"}}, headers=headers)


def test_what_the_server_answers_flashs_headers(server: Server) -> None:
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as http:
        assert sentinel(http, "shop", "production").json()["output"]["app"] == "shop"
        # no environment header (Flash 1.21 always sends one): Flash's default, production
        assert sentinel(http, "shop", None).json()["output"]["app"] == "shop"
        # the body of a 404 says what to do, for whoever reads it (Flash's client prints its own words)
        ghost = sentinel(http, "ghost", "production")
        assert ghost.status_code == 404, ghost.text
        assert ghost.json()["message"] == (
            "app 'ghost' is not deployed; deploy it first with 'flashpoint deploy'; 'embed' is deployed as "
            "lab.staging.embed, shop.production.embed"
        )
        no_env = sentinel(http, "lab", "production")
        assert no_env.status_code == 404, no_env.text
        assert no_env.json()["message"].startswith("app 'lab' has no environment 'production'")
        no_endpoint = sentinel(http, "lab", "staging", "rank")
        assert no_endpoint.status_code == 404, no_endpoint.text
        assert "'lab.staging.rank'" in no_endpoint.json()["message"]
        # a bare Runpod call of the shared name: 409 naming both ids
        bare = http.post("/v2/embed/runsync", json={"input": {"text": "hi"}})
        assert bare.status_code == 409, bare.text
        assert "shop.production.embed" in bare.json()["message"]
        assert "lab.staging.embed" in bare.json()["message"]
