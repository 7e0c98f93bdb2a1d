"""Real route workers (``python -m flashpoint.worker --routes``): each serves its endpoint's routes over real HTTP on
127.0.0.1:$PORT, only to requests carrying its route secret, answers /ping once ready, and exits on SIGTERM and when
its parent dies; loaded by import path (``tests/apps/routes_app.py``) and from a pickled routes table (routes declared
in a function).

Covers ``flashpoint.worker.__main__`` (``python -m flashpoint.worker``) and ``flashpoint.worker.routeserver`` (the
route worker's server) for tests/test_layout.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from flashpoint import Endpoint
from flashpoint.sdk.routes import route_target
from tests.conftest import ROOT, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: the route secret the tests' workers get (FLASHPOINT_ROUTE_SECRET), and the header that presents it
SECRET = "route-secret-for-tests"
PRESENTED = {"X-Flashpoint-Route-Secret": SECRET}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    url: str
    out: Path
    err: Path

    def output(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, and the exit status (10 s at most)."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(10)


def _spawn(tmp_path: Path, source: list[str], env: dict[str, str], name: str) -> Worker:
    port = _free_port()
    out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    # without PYTHONUNBUFFERED (set on these machines), so that lines arriving while it runs are the worker's doing
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with out.open("wb") as stdout, err.open("wb") as stderr:  # the worker keeps its own copies
        proc = subprocess.Popen(
            [sys.executable, "-m", "flashpoint.worker", "--routes", *source],
            cwd=ROOT,
            env={
                **inherited,
                "PORT": str(port),
                "PORT_HEALTH": str(port),
                "FLASHPOINT_ENDPOINT": "routes-app",
                "FLASHPOINT_ROUTE_SECRET": SECRET,
                **env,
            },
            stdout=stdout,
            stderr=stderr,
        )
    return Worker(proc, f"http://127.0.0.1:{port}", out, err)


def _ready(worker: Worker) -> bool:
    if worker.proc.poll() is not None:
        raise AssertionError(f"the worker exited ({worker.proc.returncode}) before it was ready:\n{worker.output()}")
    try:
        return httpx.get(f"{worker.url}/ping", headers=PRESENTED, timeout=5).status_code == 200
    except httpx.TransportError:  # not listening yet: the code is still loading
        return False


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start a route worker and wait (60 s at most) for its /ping to answer 200; killed at teardown if still alive."""
    workers: list[Worker] = []

    def start(*source: str, **env: str) -> Worker:
        worker = _spawn(tmp_path, list(source), env, f"worker{len(workers)}")
        workers.append(worker)
        until(lambda: _ready(worker), timeout=60, what=f"the route worker at {worker.url} to be ready")
        return worker

    yield start
    for worker in workers:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(10)


def _stream_with_gate(client: httpx.Client, method: str, path: str, gate: str, **request: Any) -> list[str]:
    """The stream's lines; its first line is read before the gate opens, so it arrived while the stream went on."""
    with client.stream(method, path, **request) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        first = next(lines)
        assert client.post(f"/gates/{gate}").json() == {"opened": gate}
        return [first, *lines]


def test_a_worker_serves_its_routes_by_import_path_and_exits_on_sigterm(start_worker: Callable[..., Worker]) -> None:
    worker = start_worker("--import", "tests.apps.routes_app:api")

    with httpx.Client(base_url=worker.url, headers=PRESENTED, timeout=30) as client:
        assert client.get("/ping").json() == {"status": "healthy"}
        assert client.get("/health").json() == {"status": "ok", "endpoint": "routes-app"}
        assert client.post("/compute", json={"numbers": [1, 2], "scale": 2}).json() == {"sum": 6.0}
        assert client.get("/items/4", params={"q": "x", "tags": ["a", "b"]}).json() == {
            "id": 4,
            "q": "x",
            "tags": ["a", "b"],
        }
        assert client.put("/items/4", json={"name": "lamp"}).json() == {"id": 4, "name": "lamp", "price": 0.0}
        assert client.patch("/items/4", json={"price": 2.5}).json() == {"id": 4, "price": 2.5}
        assert client.delete("/items/4").json() == {"deleted": 4}
        uploaded = client.post("/upload", files={"file": ("f.bin", b"GIF89a...")}, data={"label": "pic"})
        assert uploaded.json() == {"size": 9, "label": "pic", "head": "GIF8"}
        assert client.post("/compute", json={"numbers": "x"}).status_code == 422
        failed = client.post("/fail", json={"message": "on purpose"})
        assert (failed.status_code, failed.json()["type"], failed.json()["message"]) == (
            500,
            "ValueError",
            "on purpose",
        )
        assert _stream_with_gate(client, "GET", "/stream", "lines", params={"gate": "lines", "n": 3}) == [
            '{"i":0}',
            '{"i":1}',
            '{"i":2}',
        ]
        events = _stream_with_gate(client, "POST", "/events", "sse", json={"gate": "sse", "n": 2})
        assert [line for line in events if line] == ["event: tick", "data: 0", "event: tick", "data: 1"]
        assert client.get("/nowhere").status_code == 404
        printed = "computing the sum of [1.0, 2.0]\n"
        until(lambda: printed in worker.out.read_text(), timeout=10, what="a route's print on the worker's stdout")

    assert worker.stop() == 0
    output = worker.output()
    assert "flashpoint route worker routes-app: serving GET /health, POST /compute" in output
    assert "in fail\n    raise ValueError(message)\nValueError: on purpose" in output  # the traceback, on stderr


def test_a_worker_serves_routes_declared_in_a_function_from_a_pickled_table(
    start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    # Given routes declared in a function: no module names them, so they travel by value
    api = Endpoint(name="local-api", workers=(1, 2))
    offset = 10

    @api.post("/add/{a}")
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b + offset}

    @api.get("/pid")
    async def pid() -> int:
        return os.getpid()

    target = route_target(api)
    assert target.import_path is None and target.pickled is not None
    code = tmp_path / "routes.pkl"
    code.write_bytes(target.pickled)

    # When a worker loads the table
    worker = start_worker("--pickle", str(code))

    # Then it serves them, in its own process
    with httpx.Client(base_url=worker.url, headers=PRESENTED, timeout=30) as client:
        assert client.post("/add/1", json={"b": 2}).json() == {"sum": 13}
        assert client.get("/pid").json() == worker.proc.pid
    assert worker.stop() == 0


def test_a_worker_answers_only_requests_carrying_its_route_secret(start_worker: Callable[..., Worker]) -> None:
    # Given a real worker, called directly (as any local process could, skipping the server and its key)
    worker = start_worker("--import", "tests.apps.routes_app:api")
    header = "X-Flashpoint-Route-Secret"

    with httpx.Client(base_url=worker.url, timeout=30) as client:
        # When the secret is missing, wrong, or one of two copies
        for sent in ([], [(header, "wrong")], [(header, SECRET[:-1])], [(header, SECRET), (header, "x")]):
            refused = client.post("/compute", json={"numbers": [7, 7]}, headers=sent)
            # Then the worker answers 403, and the route does not run
            assert refused.status_code == 403 and refused.json()["code"] == "forbidden", refused.text
            assert "FLASHPOINT_ROUTE_SECRET" in refused.json()["message"]
            assert client.get("/ping", headers=sent).status_code == 403

        # With it, the route runs, and never sees the header
        served = client.post("/compute", json={"numbers": [1, 1]}, headers=PRESENTED)
        assert served.json() == {"sum": 2.0}
        seen = client.get("/headers", headers={**PRESENTED, "X-Other": "kept"}).json()
        assert seen["x-other"] == "kept" and header.lower() not in seen
    # the route prints each sum it computes: the refused ones (sent first) printed nothing
    until(lambda: "computing the sum of [1.0, 1.0]" in worker.out.read_text(), timeout=10, what="the served print")
    assert "[7.0, 7.0]" not in worker.output()
    assert worker.stop() == 0


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie nobody has reaped yet has exited too
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_exits_when_its_parent_dies(tmp_path: Path) -> None:
    # Given a worker started by a parent process that names itself in FLASHPOINT_PARENT_PID
    port = _free_port()
    parent_script = textwrap.dedent(
        f"""
        import os, subprocess, sys
        env = dict(os.environ, PORT="{port}", FLASHPOINT_PARENT_PID=str(os.getpid()), FLASHPOINT_ROUTE_SECRET="s")
        child = subprocess.Popen(
            [sys.executable, "-m", "flashpoint.worker", "--routes", "--import", "tests.apps.routes_app:api"], env=env
        )
        print(child.pid, flush=True)
        child.wait()
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert not _gone(child), "the worker exited before it was ready"
            try:
                return (
                    httpx.get(f"{url}/ping", headers={"X-Flashpoint-Route-Secret": "s"}, timeout=5).status_code == 200
                )
            except httpx.TransportError:
                return False

        until(ready, timeout=60, what="the worker to be ready")

        # When the parent dies without a word
        parent.kill()
        parent.wait(10)

        # Then the worker goes too
        until(lambda: _gone(child), timeout=20, what=f"worker {child} to exit after its parent died")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()


@pytest.mark.parametrize(
    ("source", "env", "said"),
    [
        (["--import", "tests.apps.routes_app:api"], {"PORT": ""}, "set PORT to a free TCP port"),
        (["--import", "tests.apps.routes_app:_gate"], {}, "a route worker serves an Endpoint with routes"),
        (["--import", "tests.apps.routes_app:api"], {"FLASHPOINT_DEPENDENCIES": '["no-such-dist-fp"]'}, "no-such-dist"),
        (["--import", "tests.apps.routes_app:api"], {"FLASHPOINT_ROUTE_SECRET": ""}, "set FLASHPOINT_ROUTE_SECRET"),
    ],
)
def test_a_worker_that_cannot_serve_exits_saying_why(
    tmp_path: Path, source: list[str], env: dict[str, str], said: str
) -> None:
    worker = _spawn(tmp_path, source, env, "bad")

    assert worker.proc.wait(30) == 1
    assert said in worker.output()
