"""Unmodified Runpod SDK 2.x App files (``runpod==2.0.0rc2``) on flashpoint, end to end (issue 23, point 9; decisions
0108 to 0111).

- ``flashpoint serve FILE --data-dir`` of an rc2 App file declaring two Apps, ``alpha`` and ``beta``, each with a
  resource ``embed``; ``alpha`` also has a queue function calling its sibling from its worker, a generator, a raise,
  a resource naming a ``Secret`` (set in the server's store, as its CLI does), one mounting a ``NetworkVolume``, an
  ``@app.api`` class with ``@init`` and ``@post``, and a ``@schedule``. rc2's own client (the ``rc2_venv`` fixture,
  tests/rc2venv.py) calls them from a client file declaring the same resources, with ``RUNPOD_ENDPOINT_BASE_URL`` at
  the server; every other Runpod URL and any proxy point at a closed loopback port. The api class is called at
  flashpoint's route URL (rc2's client sends HTTP-route calls to Runpod's hosts).
- ``flashpoint deploy`` of a project folder holding ``App("shop")`` to the same server: app ``shop``, env ``default``,
  ``--env staging``, called by rc2's client in each environment.
- ``GET /v1/schedules`` lists the ``@schedule`` resource with its next run (the real-clock run is
  tests/e2e/test_schedules_e2e.py's).
- ``flashpoint run app.py`` of a file with a ``@runpod.local_entrypoint``: queue and task calls on the embedded plane,
  ``runpod.is_local()`` on each side, and an entrypoint that raises.

One server for the module. Simulated GPUs only. Without network the rc2 install fails: the client tests are skipped
locally and fail in CI.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from flashpoint.cli import app as cli_app
from tests.conftest import start_serve_process, stop_process
from tests.rc2venv import Rc2Venv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

KEY = "rc2-apps-key"
#: a closed port on loopback: rc2's other URLs and any proxied request fail here instead of reaching the internet
NOWHERE = "http://127.0.0.1:9"
#: devices enough for every resource's first worker at once (idle workers yield theirs anyway)
GPUS = "NVIDIA_H200:8"

#: the served file: unmodified rc2 code (it imports runpod, which flashpoint's loader and workers resolve)
SERVED = """
import hashlib
import os

import runpod
from runpod import App, GpuGroup, GpuType

alpha = App("alpha")
beta = App("beta")


# the first choice is not in the fleet: the fallback is walked as written
@alpha.queue(name="embed", gpu=[GpuType.NVIDIA_B200, GpuType.NVIDIA_H200])
def alpha_embed(text: str = "") -> dict:
    return {"app": "alpha", "text": text, "gpu": os.environ["FLASHPOINT_GPU_MODEL"]}


@beta.queue(name="embed", gpu=GpuGroup.ANY)
def beta_embed(text: str = "") -> dict:
    return {"app": "beta", "text": text}


@alpha.queue(gpu=GpuGroup.ANY)
def relay(text: str) -> dict:
    # a sibling's .remote from inside this resource's worker: to this server, this app, this environment
    return {"resource": os.environ["FLASH_RESOURCE_NAME"], "env": os.environ["FLASH_ENVIRONMENT"],
            "local": runpod.is_local(), "sibling": alpha_embed.remote(text)}


@alpha.queue(gpu=GpuGroup.ANY)
def count(n: int):
    for i in range(n):
        yield {"i": i}


@alpha.queue(gpu=GpuGroup.ANY)
def explode(why: str) -> None:
    raise ValueError(f"exploded: {why}")


@alpha.queue(gpu=GpuGroup.ANY)
async def slow(seconds: float) -> float:
    import asyncio

    await asyncio.sleep(seconds)
    return seconds


@alpha.queue(gpu=GpuGroup.ANY)
def flaky(marker: str) -> str:
    from pathlib import Path

    path = Path(marker)
    if not path.exists():
        path.write_text("failed once")
        raise RuntimeError("first try fails")
    return "recovered"


@alpha.queue(gpu=GpuGroup.ANY, env={"TOKEN": runpod.Secret("tok")})
def secretive(digest: str) -> dict:
    # says only whether the value arrived, never the value
    token = os.environ.get("TOKEN", "")
    return {"set": bool(token), "matches": hashlib.sha256(token.encode()).hexdigest() == digest}


@alpha.queue(gpu=GpuGroup.ANY, mounts={"/runpod-volume": runpod.NetworkVolume("data")})
def keep(name: str, text: str) -> dict:
    vol = runpod.NetworkVolume("data")
    (vol.path / name).write_text(text)
    return {"read": (vol.path / name).read_text(), "path": str(vol.path)}


@alpha.api(name="gen", gpu=GpuGroup.ANY)
class Generator:
    @runpod.init
    def load(self):
        self.model = f"loaded in {os.getpid()}"

    @runpod.post("/generate")
    async def generate(self, body: dict) -> dict:
        return {"model": self.model, "prompt": body["prompt"], "resource": os.environ["FLASH_RESOURCE_NAME"]}


@alpha.queue(gpu=GpuGroup.ANY)
@runpod.schedule(cron="* * * * *")
def tick() -> dict:
    return {"ticked": True}
"""

#: rc2's client file: the same Apps and resources (bodies never run here), calls as rc2 users make them
CLIENT = """
import asyncio
import hashlib
import json
import sys
import time

import runpod
from runpod import App, EndpointNotFound, GpuGroup, GpuType
from runpod.apps import RemoteExecutionError

MARKER, DIGEST = sys.argv[1], sys.argv[2]

alpha = App("alpha")
beta = App("beta")


@alpha.queue(name="embed", gpu=[GpuType.NVIDIA_B200, GpuType.NVIDIA_H200])
def alpha_embed(text: str = "") -> dict: ...


@beta.queue(name="embed", gpu=GpuGroup.ANY)
def beta_embed(text: str = "") -> dict: ...


@alpha.queue(gpu=GpuGroup.ANY)
def relay(text: str) -> dict: ...


@alpha.queue(gpu=GpuGroup.ANY)
def count(n: int):
    yield "never here"


@alpha.queue(gpu=GpuGroup.ANY)
def explode(why: str) -> None: ...


@alpha.queue(gpu=GpuGroup.ANY)
async def slow(seconds: float) -> float: ...


@alpha.queue(gpu=GpuGroup.ANY)
def flaky(marker: str) -> str: ...


@alpha.queue(gpu=GpuGroup.ANY, env={"TOKEN": runpod.Secret("tok")})
def secretive(digest: str) -> dict: ...


@alpha.queue(gpu=GpuGroup.ANY, mounts={"/runpod-volume": runpod.NetworkVolume("data")})
def keep(name: str, text: str) -> dict: ...


@alpha.queue(gpu=GpuGroup.ANY)
def missing() -> None: ...


def record(case, call):
    try:
        line = {"case": case, "output": call()}
    except Exception as exc:
        line = {"case": case, "error": type(exc).__name__, "message": str(exc)}
    print(json.dumps(line), flush=True)


def until_running(job):
    deadline = time.monotonic() + 120
    while job.status() != "IN_PROGRESS":
        assert time.monotonic() < deadline, f"job {job.id} still {job.status()}"
        time.sleep(0.1)  # the poll interval of a bounded wait


def spawned():
    job = slow.spawn(0.2)
    first = job.status()
    return {"id": bool(job.id), "first": first, "result": job.result(), "done": job.done, "status": job.status()}


def by_id():
    job = alpha_embed.spawn("again")
    again = alpha_embed.job(job.id)
    return {"same": again.id == job.id, "result": again.result(), "status": again.status()}


cancelled_job = []


def cancelled():
    job = slow.spawn(120)
    until_running(job)
    job.cancel()
    cancelled_job.append(job)
    return {"status": job.status(), "done": job.done}


def retried():
    job = flaky.spawn(MARKER)
    try:
        first = {"output": job.result()}
    except RemoteExecutionError as exc:
        first = {"error": str(exc), "status": job.status()}
    job.retry()
    return {"first": first, "result": job.result(), "status": job.status()}


async def collect(chunks):
    return [chunk async for chunk in chunks]


def with_options():
    job = beta_embed.with_options(execution_timeout=60000, ttl=600000).with_options(low_priority=True).spawn("opt")
    return {"id": job.id, "result": job.result()}


def secret():
    job = secretive.spawn(DIGEST)
    return {"id": job.id, "result": job.result()}


record("alpha embed", lambda: alpha_embed.remote("a"))
record("beta embed", lambda: beta_embed.remote(text="b"))
record("aio", lambda: asyncio.run(alpha_embed.remote.aio("aio")))
record("sibling", lambda: relay.remote("via relay"))
record("spawn", spawned)
record("job by id", by_id)
record("cancel", cancelled)
record("cancelled result", lambda: cancelled_job[0].result())
record("retry", retried)
record("stream", lambda: list(count.stream(4)))
record("stream aio", lambda: asyncio.run(collect(count.stream.aio(2))))
record("with options", with_options)
record("raise", lambda: explode.remote("boom"))
record("missing", lambda: missing.remote())
record("secret", secret)
record("volume", lambda: keep.remote("note.txt", "kept"))
"""

#: a project folder's one App file, deployed with `flashpoint deploy`
SHOP = """
import os

from runpod import App, GpuGroup

app = App("shop")


@app.queue(gpu=GpuGroup.ANY)
def price(item: str) -> dict:
    return {"item": item, "env": os.environ["FLASH_ENVIRONMENT"], "app": os.environ["FLASH_APP"]}
"""

#: rc2's client of the deployed shop: its default environment, and staging by App(env=)
SHOP_CLIENT = """
import json

from runpod import App, GpuGroup

shop = App("shop")
staging = App("shop", env="staging")


@shop.queue(gpu=GpuGroup.ANY)
def price(item: str) -> dict: ...


@staging.queue(name="price", gpu=GpuGroup.ANY)
def staging_price(item: str) -> dict: ...


print(json.dumps({"shop": price.remote("tea"), "staging": staging_price.remote("cake")}))
"""


@dataclass(frozen=True)
class Server:
    """The module's ``flashpoint serve rc2_apps.py --data-dir``."""

    url: str
    data: Path
    volumes: Path
    #: the value of the secret ``tok`` of app ``alpha`` in the server's store
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {KEY}"}

    def get(self, path: str) -> httpx.Response:
        answer = httpx.get(f"{self.url}{path}", headers=self.headers, timeout=30)
        answer.raise_for_status()
        return answer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("rc2-apps")
    (tmp / "app").mkdir()
    (tmp / "app" / "rc2_apps.py").write_text(textwrap.dedent(SERVED))
    data = tmp / "data"
    token = f"tok-{secrets.token_hex(16)}"
    # the secret in the server's store before it starts (it refuses an endpoint naming one it lacks), as the CLI sets
    # it with no server running
    stored = CliRunner().invoke(
        cli_app, ["secret", "set", "tok", "--app", "alpha", "--data-dir", str(data)], input=token + "\n"
    )
    assert stored.exit_code == 0, stored.output
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": GPUS,
        "FLASHPOINT_API_KEY": KEY,
        "FLASHPOINT_STATE_DIR": str(tmp / "state"),
        "FLASHPOINT_VOLUMES_DIR": str(tmp / "volumes"),
        "FLASHPOINT_TAKE_HOLD_S": "5",
        # a decoy: serve's plane reads its store, not its environment, for the secrets of its apps
        "RUNPOD_SECRET_tok": "decoy-from-the-environment",
    }
    command = [sys.executable, "-m", "flashpoint", "serve", str(tmp / "app" / "rc2_apps.py"), "--port", "0"]
    proc, url = start_serve_process([*command, "--data-dir", str(data)], env)
    try:
        yield Server(url, data, tmp / "volumes", token)
    finally:
        stop_process(proc)


def rc2_env(rc2_venv: Rc2Venv, server: Server, **extra: str) -> dict[str, str]:
    """rc2's environment: the server as its endpoint base URL, every other Runpod URL and any proxy nowhere."""
    return rc2_venv.env(
        RUNPOD_ENDPOINT_BASE_URL=f"{server.url}/v2",
        RUNPOD_API_KEY=KEY,
        RUNPOD_SKIP_AUTO_SYSTEM_CHECKS="true",
        RUNPOD_API_BASE_URL=NOWHERE,
        RUNPOD_HAPI_URL=NOWHERE,
        RUNPOD_CONSOLE_URL=NOWHERE,
        HTTP_PROXY=NOWHERE,
        HTTPS_PROXY=NOWHERE,
        ALL_PROXY=NOWHERE,
        NO_PROXY="127.0.0.1,localhost",
        **extra,
    )


def run_rc2(rc2_venv: Rc2Venv, env: dict[str, str], script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(
        [str(rc2_venv.python), str(script), *args],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    return run


def job_data(db: Path, job_id: str) -> dict[str, Any]:
    """A job's record as the server stored it (read-only: the server is running)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (text,) = conn.execute("select data from jobs where id = ?", (job_id,)).fetchone()
    data: dict[str, Any] = json.loads(text)
    return data


def database_text(db: Path) -> str:
    """Every row of every table of the server's job database, as SQL text."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return "\n".join(conn.iterdump())
    finally:
        conn.close()


# --------------------------------------------------------------------------------------------------------------------
# serve: rc2's own client against a served rc2 App file


def test_rc2s_client_calls_a_served_rc2_app_file(rc2_venv: Rc2Venv, server: Server, tmp_path: Path) -> None:
    script = tmp_path / "rc2_client.py"
    script.write_text(textwrap.dedent(CLIENT))
    digest = hashlib.sha256(server.token.encode()).hexdigest()

    # When rc2's client runs its unmodified client file against the served App file
    run = run_rc2(rc2_venv, rc2_env(rc2_venv, server), script, str(tmp_path / "flaky-marker"), digest)

    # Then every call answers as on Runpod
    got = {line.pop("case"): line for line in map(json.loads, run.stdout.splitlines()) if "case" in line}
    # each App's `embed` answers for its own app; alpha's walked its GPU fallback as written (no B200 here)
    assert got["alpha embed"] == {"output": {"app": "alpha", "text": "a", "gpu": "NVIDIA H200"}}
    assert got["beta embed"] == {"output": {"app": "beta", "text": "b"}}
    assert got["aio"]["output"]["text"] == "aio"
    spawn = got["spawn"]["output"]
    assert spawn["id"] and spawn["first"] in ("IN_QUEUE", "IN_PROGRESS", "COMPLETED")
    assert (spawn["result"], spawn["done"], spawn["status"]) == (0.2, True, "COMPLETED")
    again = got["job by id"]["output"]
    assert again["same"] and again["status"] == "COMPLETED" and again["result"]["text"] == "again"
    assert got["cancel"] == {"output": {"status": "CANCELLED", "done": True}}
    assert got["cancelled result"] == {
        "error": "RemoteExecutionError",
        "message": "remote execution failed: Cancelled: cancelled before it finished",
    }
    retry = got["retry"]["output"]
    assert retry["first"] == {"error": "remote execution failed: RuntimeError: first try fails", "status": "FAILED"}
    assert (retry["result"], retry["status"]) == ("recovered", "COMPLETED")
    assert got["stream"] == {"output": [{"i": i} for i in range(4)]}
    assert got["stream aio"] == {"output": [{"i": 0}, {"i": 1}]}
    assert got["raise"] == {
        "error": "RemoteExecutionError",
        "message": "remote execution failed: ValueError: exploded: boom",
    }
    assert got["missing"] == {
        "error": "EndpointNotFound",
        "message": "'missing' in app 'alpha' is not deployed. run `rp flash deploy` first, or use .local() to run it "
        "here.",
    }

    # the options reached the job: its timeouts, and low priority recorded for the scheduler
    options = got["with options"]["output"]
    assert options["result"] == {"app": "beta", "text": "opt"}
    job = job_data(server.data / "jobs.db", options["id"])
    assert job["execution_timeout_ms"] == 60000 and job["ttl_ms"] == 600000
    assert job["low_priority"] is True

    # the sibling call went from relay's worker, with its caller key, to this server's alpha.default.embed
    assert got["sibling"] == {
        "output": {
            "resource": "relay",
            "env": "default",
            "local": False,
            "sibling": {"app": "alpha", "text": "via relay", "gpu": "NVIDIA H200"},
        }
    }
    jobs = server.get("/v1/jobs?limit=500").json()["jobs"]
    (sibling,) = [j for j in jobs if j["endpoint"] == "alpha.default.embed" and j["output"]["text"] == "via relay"]
    assert sibling["submittedBy"].startswith("worker:alpha.default.relay-")

    # the store's secret reached the worker (not the server's environment's decoy)...
    secret = got["secret"]["output"]
    assert secret["result"] == {"set": True, "matches": True}
    # ...and appears in no answer of the server and nowhere in its job database
    answers = [
        server.get(path).text
        for path in (
            "/v1/fleet",
            "/v1/endpoints",
            "/v1/endpoints/alpha.default.secretive",
            "/v1/endpoints/alpha.default.secretive/explain",
            "/v1/jobs?limit=500",
            f"/v1/jobs/{secret['id']}",
            f"/v1/jobs/{secret['id']}/explain",
            f"/v1/jobs/{secret['id']}/logs",
            "/v1/secrets",
            "/v1/apps",
            "/v1/schedules",
            f"/v2/alpha.default.secretive/status/{secret['id']}",
            "/metrics",
        )
    ]
    assert '"tok"' in server.get("/v1/secrets").text  # the name is listed, its value is not
    assert not [text for text in answers if server.token in text]
    assert server.token not in database_text(server.data / "jobs.db")

    # the volume is the app's directory, where the worker's file stays
    volume = server.volumes / "apps" / "alpha" / "default" / "data"
    assert got["volume"] == {"output": {"read": "kept", "path": str(volume)}}
    assert (volume / "note.txt").read_text() == "kept"


def test_an_api_class_answers_at_flashpoints_route_url(server: Server) -> None:
    # Given the @app.api class served as the route endpoint alpha.default.gen (a request finding no worker waits for
    # one to start)
    url = f"{server.url}/alpha.default.gen/generate"

    # When its route is called with the server's key
    first = httpx.post(url, json={"prompt": "hi"}, headers=server.headers, timeout=120)
    second = httpx.post(url, json={"prompt": "again"}, headers=server.headers, timeout=120)

    # Then the method answers, on an instance whose @init ran before the worker took requests
    assert first.status_code == 200, first.text
    assert first.json()["prompt"] == "hi" and first.json()["resource"] == "gen"
    assert first.json()["model"].startswith("loaded in ")
    assert second.json()["model"] == first.json()["model"]  # one instance per worker, kept
    # and the route takes the server's key, like every route of the server
    assert httpx.post(url, json={"prompt": "x"}, timeout=30).status_code == 401


# --------------------------------------------------------------------------------------------------------------------
# deploy: an App file's project goes to its App's app


def test_deploy_sends_an_rc2_project_to_its_apps_name_and_env(
    rc2_venv: Rc2Venv, server: Server, tmp_path: Path
) -> None:
    project = tmp_path / "storefront"  # not the App's name: the App names the app
    project.mkdir()
    (project / "main.py").write_text(textwrap.dedent(SHOP))
    runner = CliRunner()
    target = ["--url", server.url, "--key", KEY, "--json"]
    env = {"FLASHPOINT_URL": None, "FLASHPOINT_API_KEY": None, "FLASHPOINT_STATE_DIR": str(tmp_path / "state")}

    # When the folder is deployed without --app, then with --env staging
    deployed = runner.invoke(cli_app, ["deploy", str(project), *target], env=env)
    staged = runner.invoke(cli_app, ["deploy", str(project), "--env", "staging", *target], env=env)

    # Then each went to app shop, first its App's env (default), then staging
    for result in (deployed, staged):
        assert result.exit_code == 0, (result.output, result.exception)
    first, second = json.loads(deployed.stdout), json.loads(staged.stdout)
    assert (first["app"], first["env"], first["version"]) == ("shop", "default", 1)
    assert [e["id"] for e in first["endpoints"]] == ["shop.default.price"]
    assert (second["app"], second["env"], second["version"]) == ("shop", "staging", 1)
    assert [e["id"] for e in second["endpoints"]] == ["shop.staging.price"]

    # And rc2's client reaches each by App(env=), and with FLASH_ENVIRONMENT its default App goes to staging
    script = tmp_path / "shop_client.py"
    script.write_text(textwrap.dedent(SHOP_CLIENT))
    plain = run_rc2(rc2_venv, rc2_env(rc2_venv, server), script)
    assert json.loads(plain.stdout) == {
        "shop": {"item": "tea", "env": "default", "app": "shop"},
        "staging": {"item": "cake", "env": "staging", "app": "shop"},
    }
    chosen = run_rc2(rc2_venv, rc2_env(rc2_venv, server, FLASH_ENVIRONMENT="staging"), script)
    assert json.loads(chosen.stdout)["shop"] == {"item": "tea", "env": "staging", "app": "shop"}


# --------------------------------------------------------------------------------------------------------------------
# schedules: an rc2 @schedule on a served file


def test_a_scheduled_rc2_resource_is_listed_with_its_next_run(server: Server) -> None:
    before = time.time()
    rows = server.get("/v1/schedules").json()["schedules"]
    after = time.time()
    (row,) = [r for r in rows if r["endpoint"] == "alpha.default.tick"]
    assert (row["cron"], row["timezone"], row["active"]) == ("* * * * *", "UTC", True)
    # every minute: the next one is a whole minute (UTC) within the coming minute (or one just due, not yet fired)
    assert row["nextAt"] % 60 == 0 and before - 60 < row["nextAt"] <= after + 60
    assert row["next"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(row["nextAt"]))
    assert [r["endpoint"] for r in rows] == ["alpha.default.tick"]  # no other resource has a schedule
    # and its history is at its id
    history = server.get("/v1/schedules/alpha.default.tick").json()
    assert (history["endpoint"], history["cron"], history["active"]) == ("alpha.default.tick", "* * * * *", True)
    assert isinstance(history["runs"], list)


# --------------------------------------------------------------------------------------------------------------------
# flashpoint run: a @runpod.local_entrypoint


ENTRYPOINT_APP = """
import os
import sys

import runpod
from runpod import App, GpuType

app = App("runner")


@app.queue(gpu=GpuType.NVIDIA_H200)
def square(x: int) -> dict:
    return {"square": x * x, "local": runpod.is_local()}


@app.task(gpu=GpuType.NVIDIA_H200)
def train(steps: int) -> dict:
    return {"steps": steps, "pid": os.getpid(), "local": runpod.is_local()}


@runpod.local_entrypoint
def main():
    assert runpod.is_local() is True
    print("square:", square.remote(7), flush=True)
    spawned = train.spawn(3).result()
    remote = train.remote(2)
    print("spawn:", {"steps": spawned["steps"], "local": spawned["local"]}, flush=True)
    print("remote:", {"steps": remote["steps"], "local": remote["local"]}, flush=True)
    # each task call ran to completion on a worker of its own
    print("workers:", len({spawned["pid"], remote["pid"], os.getpid()}), flush=True)
    if sys.argv[1:] == ["fail"]:
        raise RuntimeError("the entrypoint gives up")
"""


def flashpoint_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1",
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "FLASHPOINT_DASHBOARD": "0",
    }
    env.pop("FLASHPOINT_URL", None)  # the embedded plane
    return subprocess.run(
        [sys.executable, "-m", "flashpoint", "run", "app.py", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_flashpoint_run_runs_a_local_entrypoint_with_its_resources_on_workers(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(ENTRYPOINT_APP))

    # When `flashpoint run` runs the file, then its entrypoint ran here and its resources on workers
    run = flashpoint_run(tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "square: {'square': 49, 'local': False}",
        "spawn: {'steps': 3, 'local': False}",
        "remote: {'steps': 2, 'local': False}",
        "workers: 3",
    ]

    # And an entrypoint that raises exits 1 with its traceback, from the file's own frame
    failed = flashpoint_run(tmp_path, "fail")
    assert failed.returncode == 1
    assert "workers: 3" in failed.stdout
    assert "Traceback (most recent call last):" in failed.stderr, failed.stderr
    assert 'app.py", line ' in failed.stderr and ", in main" in failed.stderr
    assert failed.stderr.rstrip().endswith("RuntimeError: the entrypoint gives up")
