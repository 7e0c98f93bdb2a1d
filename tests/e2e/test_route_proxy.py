"""HTTP-route endpoints end to end: a real ``flashpoint serve`` on loopback proxying to real worker processes (the
stand-in Runpod load-balanced worker, ``tests/apps/route_stub_worker.py``, and flashpoint's own ``--routes`` worker),
placed on a simulated fleet. Every wait is bounded; nothing sleeps to synchronise."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.apps.route_app import FLEET
from tests.conftest import ROOT, Served, start_serve_process, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

APP = "tests/apps/route_app.py"
KEY = "route-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def start(tmp: Path, *args: str, app: str = APP, fleet: str = FLEET, ray: bool = False) -> Served:
    env = {
        **{k: v for k, v in os.environ.items() if not (ray and k.startswith("RAY_"))},
        "FLASHPOINT_SIMULATED_GPUS": fleet,
        "FLASHPOINT_API_KEY": KEY,
        "FLASHPOINT_STATE_DIR": str(tmp / "state"),
        "ROUTE_STUB_START_S": "0.3",
    }
    db = tmp / "jobs.db"
    command = [sys.executable, "-m", "flashpoint", "serve", str(ROOT / app), "--port", "0", "--db", str(db), *args]
    proc, url = start_serve_process(command, env)
    return Served(url, KEY, proc, db)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for the module: each test calls endpoints of its own (``route_app.py``)."""
    served = start(tmp_path_factory.mktemp("routes"), "--max-body-mb", "0.01", "--route-wait-s", "60")
    yield served
    served.stop()


def row(server: Served, endpoint: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/endpoints/{endpoint}", headers=AUTH, timeout=10)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def echo(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_each_method_reaches_the_worker_with_query_and_body_and_never_the_key(server: Served) -> None:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            content = None if method == "GET" else json.dumps({"method": method}).encode()
            got = echo(client.request(method, "/api/items/42?tag=a&tag=b", content=content))
            assert (got["method"], got["path"], got["query"]) == (method, "/items/42", "tag=a&tag=b")
            assert got["body"] == (content or b"").decode()
            names = [name for name, _ in got["headers"]]
            assert "authorization" not in names and KEY not in json.dumps(got)
        unauthorized = httpx.get(f"{server.url}/api/echo", timeout=10)
        assert unauthorized.status_code == 401 and unauthorized.json()["code"] == "unauthorized"
        too_large = client.post("/api/echo", content=b"x" * 20_000)
        assert too_large.status_code == 413 and too_large.json()["code"] == "payload_too_large"
    assert row(server, "api")["kind"] == "routes"


def test_client_sent_forwarding_headers_and_route_secrets_never_reach_the_worker(server: Served) -> None:
    claims = {
        "X-Forwarded-For": "203.0.113.9",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "attacker.example",
        "X-Forwarded-Prefix": "/admin",
        "Forwarded": "for=203.0.113.9",
        "X-Flashpoint-Route-Secret": "forged",
    }
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
        got = echo(client.get("/api/echo", headers=claims))
        presented = client.get("/api/whoami", headers=claims).json()["presented"]
    forwarding = sorted((n, v) for n, v in got["headers"] if n.startswith("x-forwarded-") or n == "forwarded")
    assert forwarding == [
        ("x-forwarded-for", "127.0.0.1"),
        ("x-forwarded-host", server.url.removeprefix("http://")),
        ("x-forwarded-prefix", "/api"),
        ("x-forwarded-proto", "http"),
    ]
    assert len(presented) == 1 and presented[0] != "forged"  # the proxy's, in place of the client's


def test_a_stream_comes_through_chunk_by_chunk(server: Served) -> None:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
        with client.stream("GET", "/api/stream?id=e2e") as response:
            chunks = response.iter_raw()
            assert next(chunks) == b"data: first\n\n"  # the worker sends the rest only once released
            assert client.post("/api/release/e2e").status_code == 200
            assert b"".join(chunks) == b"data: second\n\ndata: third\n\n"


def test_the_first_request_waits_for_a_cold_worker_scale_from_zero(server: Served) -> None:
    assert row(server, "cold")["workers"] == []
    began = time.monotonic()
    got = echo(httpx.get(f"{server.url}/cold/whoami", headers=AUTH, timeout=60))
    assert got["worker"].startswith("apps.production.cold-w1-")  # serve APP: app "apps"
    (worker,) = row(server, "cold")["workers"]
    assert worker["state"] == "IDLE" and worker["address"] == f"127.0.0.1:{got['port']}"
    # Runpod's load-balanced contract, plus the address to bind, the server's body limit (--max-body-mb 0.01) and the
    # route secret the proxy presents with every request (a command worker may check it)
    secret = got["env"].pop("FLASHPOINT_ROUTE_SECRET")
    assert len(secret) == 43 and got["presented"] == [secret]
    limit = got["env"].pop("FLASHPOINT_MAX_BODY_MB")
    assert got["env"] == {"PORT": got["port"], "PORT_HEALTH": got["port"], "FLASHPOINT_ROUTE_HOST": "127.0.0.1"}
    assert float(limit) * 2**20 == int(0.01 * 2**20)  # the server's own limit, in bytes exactly
    assert time.monotonic() - began < 60


def test_an_endpoint_that_can_never_run_answers_503_at_once_with_its_explanation(server: Served) -> None:
    response = httpx.get(f"{server.url}/nowhere/echo", headers=AUTH, timeout=10)
    body = response.json()
    assert response.status_code == 503 and body["code"] == "no_worker"
    assert body["explanation"]["never"] is True and body["explanation"]["reasons"][0]["code"] == "not_in_fleet"


def test_a_worker_killed_mid_request_is_502_and_the_plane_sees_it_go(server: Served) -> None:
    from tests.hardening.support import kill_worker, worker_processes

    echo(httpx.get(f"{server.url}/fragile/echo", headers=AUTH, timeout=60))  # a ready worker
    (worker,) = row(server, "fragile")["workers"]
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
        answered: list[httpx.Response] = []

        def call() -> None:
            answered.append(client.get("/fragile/slow?seconds=60"))

        caller = threading.Thread(target=call)
        caller.start()
        until(lambda: row(server, "fragile")["inFlight"] == 1, 30, "the request to be in flight")
        (proc,) = [p for p in worker_processes(server.proc.pid) if p.worker_id == worker["id"]]
        assert kill_worker(proc, server.proc.pid, signal.SIGKILL)
        caller.join(30)
    assert answered and answered[0].status_code == 502 and answered[0].json()["code"] == "worker_lost"
    until(lambda: all(w["id"] != worker["id"] for w in row(server, "fragile")["workers"]), 30, "the worker's exit")
    assert row(server, "fragile")["inFlight"] == 0


async def test_requests_spread_over_two_workers_by_fewest_in_flight(server: Served) -> None:
    until(lambda: [w["state"] for w in row(server, "pair")["workers"]] == ["IDLE", "IDLE"], 60, "both workers ready")
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60) as client:
        answers = await asyncio.gather(*(client.get("/pair/slow?seconds=1") for _ in range(2)))
    assert {echo(a)["worker"] for a in answers} == {w["id"] for w in row(server, "pair")["workers"]}


async def test_request_count_scales_up_under_concurrent_requests_and_idle_workers_stop_after(server: Served) -> None:
    assert row(server, "burst")["workers"] == []
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=90) as client:
        calls = [asyncio.ensure_future(client.get("/burst/slow?seconds=2")) for _ in range(3)]
        seen: set[str] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 3 and not all(c.done() for c in calls):  # held requests are demand: one worker each
            seen |= {w["id"] for w in row(server, "burst")["workers"]}
            assert time.monotonic() < deadline, f"only {len(seen)} worker(s) started"
            await asyncio.sleep(0.05)
        answers = await asyncio.gather(*calls)
    assert len(seen) == 3 and all(a.status_code == 200 for a in answers)
    until(lambda: row(server, "burst")["workers"] == [], 60, "idle workers to stop (idle_timeout=1)")


def test_the_fleet_and_the_explanation_show_route_endpoints(server: Served) -> None:
    until(lambda: row(server, "holder")["workers"], 60, "holder's worker")
    fleet = httpx.get(f"{server.url}/v1/fleet", headers=AUTH, timeout=10).json()
    assert "apps.production.holder" in {d["endpoint"] for d in fleet["devices"]}
    explanation = httpx.get(f"{server.url}/v1/endpoints/holder/explain", headers=AUTH, timeout=10).json()
    assert explanation["summary"].startswith("no request waiting") and explanation["never"] is False
    echo(httpx.put(f"{server.url}/api/items/1", headers=AUTH, timeout=60))
    metrics = httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=10).text
    put = (
        'flashpoint_route_requests_total{endpoint="apps.production.api",method="PUT",route="/items/{item_id}",'
        'status="200"}'
    )
    assert put in metrics and 'flashpoint_route_requests_in_flight{endpoint="apps.production.holder"} 0.0' in metrics


def test_a_request_that_cannot_be_placed_gets_503_after_the_wait_bound(tmp_path: Path) -> None:
    served = start(tmp_path, "--route-wait-s", "1")
    try:
        until(lambda: row(served, "holder")["workers"], 60, "holder to take the only A100")
        began = time.monotonic()
        response = httpx.get(f"{served.url}/blocked/echo", headers=AUTH, timeout=30)
        waited = time.monotonic() - began
        body = response.json()
        assert response.status_code == 503 and body["code"] == "no_worker" and 1.0 <= waited < 20
        assert body["explanation"]["queueDepth"] == 1
        assert [(r["code"], r["holders"]) for r in body["explanation"]["reasons"]] == [
            ("busy", ["apps.production.holder"])
        ]
    finally:
        served.stop()


def test_flashpoints_own_route_worker_serves_through_the_proxy(tmp_path: Path) -> None:
    served = start(tmp_path, app="tests/apps/routes_app.py", fleet="NVIDIA_H200:1")
    try:
        with httpx.Client(base_url=served.url, headers=AUTH, timeout=60) as client:
            health = client.get("/routes-app/health")
            assert health.status_code == 200 and health.json()["endpoint"] == "apps.production.routes-app"
            assert client.post("/routes-app/compute", json={"numbers": [1, 2], "scale": 2}).json() == {"sum": 6.0}
            seen = client.get("/routes-app/headers", headers={"X-Flashpoint-Route-Secret": "forged"}).json()
            assert "x-flashpoint-route-secret" not in seen  # presented by the proxy, taken out by the worker
        # a local process calling the worker directly, without the server's key, is refused
        addresses = [w["address"] for w in row(served, "routes-app")["workers"]]
        assert addresses
        for address in addresses:
            direct = httpx.post(f"http://{address}/compute", json={"numbers": [7, 7]}, timeout=10)
            assert direct.status_code == 403 and direct.json()["code"] == "forbidden"
            assert httpx.get(f"http://{address}/health", headers=AUTH, timeout=10).status_code == 403
    finally:
        served.stop()


def test_the_embedded_plane_serves_route_endpoints_and_flashpoint_gpus_shows_them(
    make_embedded: Any, tmp_path: Path
) -> None:
    from tests.apps.route_app import api

    embedded = make_embedded("NVIDIA_H200:1")

    async def register() -> None:
        embedded.plane.register(api.spec, api.worker_target())

    embedded.run_sync(register(), timeout=10)
    spoofed = {"Authorization": embedded.api_key, "X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
    got = echo(httpx.get(f"{embedded.url}/api/echo", headers=spoofed, timeout=60))
    assert got["worker"].startswith("api-w1-")
    # the embedded server takes no client's word for its address either
    forwarding = {n: v for n, v in got["headers"] if n in ("x-forwarded-for", "x-forwarded-proto")}
    assert forwarding == {"x-forwarded-for": "127.0.0.1", "x-forwarded-proto": "http"}
    env = {**os.environ, "FLASHPOINT_STATE_DIR": str(tmp_path / "state"), "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1"}
    shown = subprocess.run(
        [sys.executable, "-m", "flashpoint", "gpus", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    (fleet,) = json.loads(shown.stdout)["fleets"]  # the embedded plane's, found through its announcement
    assert fleet["pid"] == os.getpid() and [d["endpoint"] for d in fleet["devices"]] == ["api"]
    explained = subprocess.run(
        [sys.executable, "-m", "flashpoint", "explain", "api"], env=env, capture_output=True, text=True, timeout=60
    )
    assert explained.returncode == 0 and "endpoint api: no request waiting" in explained.stdout, explained.stdout


@pytest.mark.ray
def test_a_route_worker_on_ray_serves_on_its_nodes_address_through_the_proxy(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    served = start(tmp_path, "--backend", "ray", app=f"{APP}:cold", fleet="NVIDIA_H200:1", ray=True)
    try:
        got = echo(httpx.get(f"{served.url}/cold/whoami", headers=AUTH, timeout=120))
        (worker,) = row(served, "cold")["workers"]
        host, _, port = worker["address"].rpartition(":")
        assert got["worker"] == worker["id"] and got["port"] == port  # the port the actor chose on its node
        assert host  # the node's address, which the server reaches
    finally:
        served.stop()


ROUTE_CLIENT = """
import asyncio, json
from flashpoint import Endpoint

async def main() -> None:
    api = Endpoint(id="api")
    posted = await api.post("/items/7", {"a": 1})
    got = await api.get("/echo", {"tag": "x"})
    print(json.dumps({"post": posted, "get": got}))

asyncio.run(main())
"""


def test_flashs_client_verbs_call_a_route_endpoint_through_the_proxy(server: Served, tmp_path: Path) -> None:
    # Endpoint(id=...).post/get, as a Flash client script calls a load-balanced endpoint, against the real proxy
    script = tmp_path / "route_client.py"
    script.write_text(ROUTE_CLIENT)
    env = {**os.environ, "FLASHPOINT_URL": server.url, "FLASHPOINT_API_KEY": KEY,
           "FLASHPOINT_STATE_DIR": str(tmp_path / "client-state")}  # fmt: skip
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    posted, got = answers["post"], answers["get"]
    assert (posted["method"], posted["path"]) == ("POST", "/items/7")
    assert json.loads(posted["body"]) == {"a": 1}
    assert (got["method"], got["path"], got["query"]) == ("GET", "/echo", "tag=x")
    assert all(name != "authorization" for name, _ in posted["headers"] + got["headers"])
