"""Servers without a key against web pages (issue 20, point 1): a request naming another host (DNS rebinding) is 421 and
one a page of another origin sends (``Origin``, ``Sec-Fetch-Site``) is 403, on every route, HTTP-route endpoints
included; a job body not declared JSON is 415 and stores nothing; programs (curl-like JSON, the route endpoint, the
dashboard's own page) keep working, and a server with a key keeps today's behaviour. Real ``flashpoint serve`` and
``flashpoint dev`` processes and a real embedded plane, real HTTP on 127.0.0.1; a real browser:
tests/hardening/test_browser.py."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from flashpoint.hosting.embedded import EmbeddedServer
from tests.conftest import ROOT, Served, stop_process, until
from tests.hosting.test_hostile_connections import wait_closed

pytestmark = [pytest.mark.slow, pytest.mark.hardening, pytest.mark.timeout(180)]

APP = "tests/apps/keyless_app.py"
#: a page of attacker.example that pointed its name at 127.0.0.1
REBOUND = {"Host": "attacker.example:8000"}
#: what a page of another origin cannot help sending
PAGES = [
    {"Origin": "http://attacker.example"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Origin": "http://localhost:1234", "Sec-Fetch-Site": "same-site"},  # another port of this machine
]
BODY = b'{"input": {"a": 1}}'


def refused(answer: httpx.Response, status: int, code: str) -> None:
    assert answer.status_code == status, f"{answer.request.method} {answer.request.url}: {answer.text}"
    body = answer.json()
    assert body["code"] == code and body["error"] == body["message"], body


def job_count(client: httpx.Client) -> int:
    return len(client.get("/v1/jobs").raise_for_status().json()["jobs"])


def test_a_keyless_serve_answers_only_this_machines_names_and_its_own_pages(serve: Callable[..., Served]) -> None:
    served = serve(app=APP, key="")
    with httpx.Client(base_url=served.url, timeout=60) as client:
        for method, path in [("GET", "/v1/jobs"), ("GET", "/v1/fleet"), ("GET", "/metrics"), ("GET", "/"),
                             ("GET", "/docs"), ("POST", "/v2/echo/run"), ("POST", "/v2/echo/runsync"),
                             ("GET", "/v2/echo/health"), ("POST", "/api/compute")]:  # fmt: skip
            body = {"json": {"input": {"a": 1}}} if method == "POST" else {}
            refused(client.request(method, path, headers=REBOUND, **body), 421, "misdirected_request")
        for headers in PAGES:
            for path in ("/v2/echo/run", "/api/compute", "/v2/echo/purge-queue"):
                refused(client.post(path, json={"input": {"a": 1}}, headers=headers), 403, "cross_origin")
            refused(client.get("/v1/jobs", headers=headers), 403, "cross_origin")
        # a body any page could send without asking: not declared JSON
        for kind in ("text/plain;charset=UTF-8", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": kind} if kind else {}
            for path in ("/v2/echo/run", "/v2/echo/runsync"):
                refused(client.post(path, content=BODY, headers=headers), 415, "unsupported_media_type")
        flash = {"X-Flash-Endpoint": "echo", "Content-Type": "text/plain"}
        refused(client.post("/v2/flash/runsync", content=BODY, headers=flash), 415, "unsupported_media_type")
        assert job_count(client) == 0
        # programs keep working: JSON as curl -H 'Content-Type: application/json' sends it, a route, the dashboard
        done = client.post(
            "/v2/echo/runsync", content=BODY, headers={"Content-Type": "application/json; charset=utf-8"}
        )
        assert done.status_code == 200 and done.json()["output"] == {"payload": {"a": 1}}, done.text
        routed = client.post("/api/compute", json={"numbers": [1, 2]})
        assert routed.status_code == 200 and routed.json() == {"total": 3}, routed.text
        page = client.get("/", headers={"Accept": "text/html", "Sec-Fetch-Site": "none"})
        assert page.status_code == 200 and "<html" in page.text.lower()
        own = {"Origin": served.url, "Sec-Fetch-Site": "same-origin", "Host": served.url.removeprefix("http://")}
        assert client.get("/v1/jobs", headers=own).status_code == 200
        assert client.get("/v1/fleet", headers={"Host": "localhost"}).status_code == 200
        assert job_count(client) == 1


def test_a_serve_with_a_key_keeps_answering_other_names_and_types(serve: Callable[..., Served]) -> None:
    # a page cannot send the key (a browser asks first, and the server never answers a CORS preflight)
    served = serve(app=APP, key="k")
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=60) as client:
        assert client.get("/v1/jobs", headers=REBOUND).status_code == 200
        typed = client.post("/v2/echo/run", content=BODY, headers={"Content-Type": "text/plain"})
        assert typed.status_code == 200, typed.text
        assert job_count(client) == 1


# --------------------------------------------------------------------------------------------------------------------
# flashpoint dev


class Dev:
    """A running ``flashpoint dev`` process: its URL, the lines it printed, and the file its log goes to."""

    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc = proc
        self.log = log
        self.lines: list[str] = []
        self.url = ""

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGINT)


def start_dev(folder: Path, *args: str) -> Dev:
    """``flashpoint dev`` (no key) of a project in ``folder``/project (a queue endpoint, ``worker``, and a route
    endpoint, ``lb``) on 127.0.0.1 port 0, its log in ``folder``/dev.err; ``stop`` it."""
    root = folder / "project"
    root.mkdir()
    (root / "worker.py").write_text(
        'from flashpoint import Endpoint\n\n@Endpoint(name="worker", cpu="cpu3c-1-2")\n'
        "async def double(x: int) -> int:\n    return 2 * x\n"
    )
    (root / "lb.py").write_text(
        'from flashpoint import Endpoint\n\napi = Endpoint(name="lb", cpu="cpu3c-1-2")\n\n\n@api.post("/compute")\n'
        "async def compute(numbers: list[int]) -> dict[str, int]:\n    return {'total': sum(numbers)}\n"
    )
    env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1", "FLASHPOINT_CPUS": "4",
           "FLASHPOINT_MEMORY_GB": "16", "FLASHPOINT_STATE_DIR": str(folder / "state"),
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("FLASHPOINT_API_KEY", None)
    env.pop("FLASHPOINT_URL", None)
    command = [sys.executable, "-m", "flashpoint", "dev", str(root), "--host", "127.0.0.1", "--port", "0", *args]
    log = folder / "dev.err"
    with log.open("w") as err:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    served = Dev(proc, log)
    stdout = proc.stdout
    assert stdout is not None
    threading.Thread(target=lambda: served.lines.extend(iter(stdout.readline, "")), daemon=True).start()
    try:
        line = until(
            lambda: (
                next((line for line in list(served.lines) if line.startswith("flashpoint dev serving")), None)
                or proc.poll() is not None
            ),
            90,
            "flashpoint dev to start",
        )
        assert isinstance(line, str), log.read_text()[-3000:]
    except BaseException:
        served.stop()
        raise
    served.url = line.split()[3]
    return served


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Callable[..., Dev]]:
    """``dev(*args)``: ``start_dev`` in tmp_path; stopped at teardown."""
    started: list[Dev] = []

    def start(*args: str) -> Dev:
        started.append(start_dev(tmp_path, *args))
        return started[-1]

    yield start
    for served in started:
        served.stop()


def test_a_keyless_dev_server_answers_only_this_machines_names_and_its_own_pages(dev: Callable[..., Dev]) -> None:
    served = dev()
    with httpx.Client(base_url=served.url, timeout=60) as client:
        for method, path in [("POST", "/worker/runsync"), ("GET", "/docs"), ("GET", "/ping"), ("GET", "/v1/jobs"),
                             ("GET", "/metrics"), ("POST", "/v2/worker/run"), ("POST", "/lb/compute")]:  # fmt: skip
            body = {"json": {"input": {"x": 1}}} if method == "POST" else {}
            refused(client.request(method, path, headers=REBOUND, **body), 421, "misdirected_request")
        for headers in PAGES:
            refused(client.post("/worker/runsync", json={"input": {"x": 1}}, headers=headers), 403, "cross_origin")
            refused(client.post("/lb/compute", json={"numbers": [1]}, headers=headers), 403, "cross_origin")
        for kind in ("text/plain", None):
            headers = {"Content-Type": kind} if kind else {}
            answer = client.post("/worker/runsync", content=b'{"input": {"x": 1}}', headers=headers)
            assert answer.status_code == 415 and "application/json" in answer.json()["detail"], answer.text
            refused(client.post("/v2/worker/run", content=b'{"input": {"x": 1}}', headers=headers), 415,
                    "unsupported_media_type")  # fmt: skip
        assert job_count(client) == 0
        done = client.post("/worker/runsync", json={"input": {"x": 21}})
        assert done.status_code == 200 and done.json()["output"] == 42, done.text
        routed = client.post("/lb/compute", json={"numbers": [1, 2]})
        assert routed.status_code == 200 and routed.json() == {"total": 3}, routed.text
        assert client.get("/docs", headers={"Host": "localhost"}).status_code == 200


def test_dev_closes_half_sent_heads_at_its_header_deadline(dev: Callable[..., Dev]) -> None:
    # flashpoint dev listens with serve's hardened transport (api/transport.py): a head that never ends does not hold
    served = dev("--header-timeout-s", "0.5")
    address = served.url.removeprefix("http://").split(":")
    heads = [socket.create_connection((address[0], int(address[1])), timeout=30) for _ in range(40)]
    try:
        for sock in heads:
            sock.sendall(b"POST /worker/runsync HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 100\r\n")
        for sock in heads:
            assert wait_closed(sock, 30).startswith(b"HTTP/1.1 408")
    finally:
        for sock in heads:
            sock.close()
    with httpx.Client(base_url=served.url, timeout=60) as client:
        assert client.get("/ping").status_code == 200


# --------------------------------------------------------------------------------------------------------------------
# the embedded plane: its API takes its key, but its dashboard's page does not


def test_the_embedded_plane_answers_only_this_machines_names_and_its_own_pages(
    make_embedded: Callable[..., EmbeddedServer],
) -> None:
    embedded = make_embedded("NVIDIA_H200:1")
    keyed = {"Authorization": f"Bearer {embedded.api_key}"}
    with httpx.Client(base_url=embedded.url, headers=keyed, timeout=30) as client:
        for method, path in [("GET", "/"), ("GET", "/static/dashboard/dashboard.js"), ("GET", "/v1/fleet"),
                             ("POST", "/v2/anything/run")]:  # fmt: skip
            answer = client.request(method, path, headers=REBOUND)
            refused(answer, 421, "misdirected_request")
            assert "FLASHPOINT_WORKER_URL" in answer.json()["message"]
        for headers in PAGES:
            refused(client.get("/v1/fleet", headers=headers), 403, "cross_origin")
        assert client.get("/v1/fleet").status_code == 200
        assert client.get("/", headers={"Accept": "text/html"}).status_code == 200
        assert re.search(r"<html", client.get("/").text, re.I)
