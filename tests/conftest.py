"""Shared fixtures: a real embedded control plane on loopback with simulated GPUs (the only fake), real workers."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import pytest

from flashpoint.config import Settings
from flashpoint.hosting.embedded import EmbeddedServer
from flashpoint.sdk import default_connection
from tests.flashvenv import FlashVenv, build as build_flash_venv

T = TypeVar("T")

SEED_NAME = "000_1716fa7ad0ba5e4b.txt"

# Where PYTHONDONTWRITEBYTECODE is set (these machines set it), every run compiled and assert-rewrote every module
# again: about 4 s of the quick suite. The run keeps its bytecode in __pycache__ (git ignores it) like any Python.
sys.dont_write_bytecode = False

#: folders whose every test carries these markers (their modules say so in ``pytestmark``): a run whose ``-m``
#: deselects them all need not import them (schemathesis and Ray take seconds to import)
_MARKED_FOLDERS = {"hardening": {"slow", "hardening"}, "ray": {"slow", "ray"}}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    markers = _MARKED_FOLDERS.get(collection_path.name)
    expression = config.option.markexpr
    if markers is None or not expression or collection_path.parent != Path(__file__).parent:
        return None
    try:  # pytest's own parser of -m expressions (private: should it move, every folder is simply collected)
        from _pytest.mark.expression import Expression

        selected = Expression.compile(expression).evaluate(lambda name, **_: name in markers)
    except (ImportError, AttributeError, TypeError):
        return None
    return not selected or None


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pytest-xdist) starts two workers a CPU: about half of the quick suite's time is spent waiting on
    worker processes, sockets and timers rather than computing, and a second worker a CPU fills that time.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS``, where set, still decides (xdist's own hook reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 2 * cpus


_lease_dirs = itertools.count()


@pytest.fixture(autouse=True)
def _own_lease_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test, and the processes it starts, lease devices in a directory of its own (made on first use), so a
    plane one test leaves running never holds the simulated devices of another (docs: "One owner per device"); and
    builds environments in the run's own cache."""
    monkeypatch.setenv("FLASHPOINT_LEASE_DIR", str(tmp_path_factory.getbasetemp() / "leases" / str(next(_lease_dirs))))
    # per-endpoint environments are built in this run's own cache (shared by its tests: one build per requirement
    # set), never in the user's ~/.flashpoint/envs
    monkeypatch.setenv("FLASHPOINT_ENV_DIR", str(tmp_path_factory.getbasetemp() / "envs"))
    # a server started without --data-dir keeps its jobs, deployments, keys and secrets in the test's own folder,
    # never in the user's ~/.flashpoint/server
    monkeypatch.setenv("FLASHPOINT_DATA_DIR", str(tmp_path_factory.getbasetemp() / "data" / str(next(_lease_dirs))))


def seed_path() -> Path:
    """The seed document, beside the repository in ``shared/``: skipped locally when absent, a failure in CI."""
    override = os.environ.get("FLASHPOINT_SEED_PATH")
    path = Path(override) if override else Path(__file__).resolve().parents[2] / "shared" / "seeds" / SEED_NAME
    if not path.is_file():
        if os.environ.get("CI"):
            raise AssertionError(f"seed file not found at {path}; set FLASHPOINT_SEED_PATH")
        pytest.skip(f"seed file not found at {path}; set FLASHPOINT_SEED_PATH")
    return path


@pytest.fixture(scope="session")
def flash_venv(tmp_path_factory: pytest.TempPathFactory) -> FlashVenv:
    """runpod-flash installed in a virtual environment of its own, built once per session and shared by the tests that
    drive Flash itself (tests/flashvenv.py): skipped without network, a failure in CI."""
    return build_flash_venv(tmp_path_factory.mktemp("runpod-flash"))


@pytest.fixture
def restore_imports(tmp_path: Path) -> Iterator[None]:
    """For tests that import app files: undo their sys.path and sys.modules changes afterwards."""
    path = list(sys.path)
    yield
    sys.path[:] = path
    inside = str(tmp_path) + os.sep  # a text prefix: a Path per module (thousands) cost 20 ms a test
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and file.startswith(inside):
            del sys.modules[name]


@pytest.fixture
def make_embedded(tmp_path: Path) -> Iterator[Callable[..., EmbeddedServer]]:
    """Start an embedded server on a simulated fleet and make it the SDK's connection; closed at teardown."""
    started: list[EmbeddedServer] = []

    def start(gpus: str = "", **env: str) -> EmbeddedServer:
        settings = Settings.load(
            env={
                "FLASHPOINT_SIMULATED_GPUS": gpus,
                "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
                "FLASHPOINT_NODE": "node-a",
                "FLASHPOINT_TAKE_HOLD_S": "5",
                **env,
            }
        )
        embedded = EmbeddedServer(settings).start()
        started.append(embedded)
        default_connection.use(embedded)
        return embedded

    yield start
    default_connection.use(None)
    for embedded in started:
        embedded.close()


def _polls(timeout: float, what: str) -> Iterator[None]:
    """One poll now, then one per step, until ``timeout`` seconds pass: then an AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        yield
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``check`` (from a thread without an event loop) until it returns something truthy, and return that."""
    for _ in _polls(timeout, what):
        if value := check():
            return value
        time.sleep(interval)  # the poll interval of a condition with a deadline, not a stand-in for one
    raise AssertionError("unreachable")


async def eventually(check: Callable[[], T], timeout: float = 20.0, what: str = "condition") -> T:
    """Wait for a condition on real processes, polling it; fail with ``what`` after ``timeout`` seconds."""
    for _ in _polls(timeout, what):
        if value := check():
            return value
        await asyncio.sleep(0.02)
    raise AssertionError("unreachable")


async def eventually_async(
    check: Callable[[], Awaitable[object]], timeout: float = 20.0, what: str = "condition"
) -> None:
    """As ``eventually``, for a check that must be awaited (an SDK call, say)."""
    for _ in _polls(timeout, what):
        if await check():
            return
        await asyncio.sleep(0.02)


def snapshot(embedded: EmbeddedServer, endpoint: str) -> dict[str, Any]:
    """Workers and queue of one endpoint, read on the plane's own loop."""

    async def read() -> dict[str, Any]:
        ep = embedded.plane.endpoints.get(endpoint)
        if ep is None:
            return {"workers": [], "queued": 0}
        return {"workers": [w.to_json() for w in ep.workers.values()], "queued": ep.queued}

    return embedded.run_sync(read(), timeout=10)


def held_devices(embedded: EmbeddedServer) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        return [row for row in embedded.plane.fleet_view() if row["worker"] is not None]

    return embedded.run_sync(read(), timeout=10)


ROOT = Path(__file__).resolve().parents[1]
SERVER_GPUS = "NVIDIA_H200:2,NVIDIA_A100_80GB_PCIe:2"


def start_serve_process(
    command: list[str],
    env: dict[str, str],
    *,
    stderr: IO[str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """Start a `flashpoint serve` command and wait (60 s at most) for its "serving ... on URL" line: (process, URL).
    A server that does not start is killed, and the AssertionError says how it ended."""
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, preexec_fn=preexec_fn
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    line = ""
    while time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            line = proc.stdout.readline()
            if "flashpoint serving" in line:
                break
    match = re.search(r" on (http://\S+) ", line)
    if match is None:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
        raise AssertionError(f"the server did not start (exit {proc.returncode}); last line: {line!r}")
    return proc, match.group(1)


def stop_process(proc: subprocess.Popen[Any], sig: int | None = 15, timeout: float = 30) -> int:
    """Stop a process this test started: ``sig`` (None: none, it ends by itself, say on a closed stdin), at most
    ``timeout`` s to exit, then SIGKILL; its stdout pipe closed. Its exit status."""
    if proc.poll() is None:
        if sig is not None:
            proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode


@dataclass
class Served:
    """A running `flashpoint serve` process: its base URL, API key and process."""

    url: str
    key: str
    proc: subprocess.Popen[str]
    db: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def stop(self, sig: int = 15, timeout: float = 30) -> int:
        return stop_process(self.proc, sig, timeout)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """Start `python -m flashpoint serve APP --port 0` (real process, real HTTP, SQLite in tmp_path)."""
    started: list[Served] = []

    def start(*args: str, app: str = "tests/apps/runpod_app.py", db: Path | None = None, key: str = "test-key",
              env: dict[str, str] | None = None) -> Served:  # fmt: skip
        db = db or tmp_path / "jobs.db"
        environment = {
            **os.environ,
            "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS,
            "FLASHPOINT_API_KEY": key,
            "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
            "FLASHPOINT_TAKE_HOLD_S": "5",
            "FLASHPOINT_WEBHOOK_RETRY_S": "0.2",
            **(env or {}),
        }
        command = [sys.executable, "-m", "flashpoint", "serve", str(ROOT / app), "--port", "0", "--db", str(db), *args]
        proc, url = start_serve_process(command, environment)
        served = Served(url, key, proc, db)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


@pytest.fixture
def runpod_served(serve: Callable[..., Served]) -> Iterator[Callable[..., Served]]:
    """Start a server (as ``serve``) and point the official runpod client's globals at it; restored afterwards."""
    runpod = pytest.importorskip("runpod")
    previous = runpod.endpoint_url_base, runpod.api_key

    def start(*args: str, **options: Any) -> Served:
        served = serve(*args, **options)
        runpod.endpoint_url_base = f"{served.url}/v2"
        runpod.api_key = served.key
        return served

    yield start
    runpod.endpoint_url_base, runpod.api_key = previous


def wait_status(job: Any, wanted: set[str], timeout: float = 60) -> str:
    """Poll a runpod client job until its status is one of ``wanted`` (bounded by ``timeout``)."""
    deadline = time.monotonic() + timeout
    while (status := job.status()) not in wanted:
        assert time.monotonic() < deadline, f"job {job.job_id} still {status}"
        time.sleep(0.05)  # polling through the client under test, bounded by the deadline
    return status


def native(served: Served, path: str) -> Any:
    """GET a native /v1 route of a served app and return its JSON."""
    import httpx

    response = httpx.get(f"{served.url}/v1{path}", headers=served.headers, timeout=30)
    response.raise_for_status()
    return response.json()


from tests.rc2venv import Rc2Venv, build as build_rc2_venv  # noqa: E402 - beside its fixture


@pytest.fixture(scope="session")
def rc2_venv(tmp_path_factory: pytest.TempPathFactory) -> Rc2Venv:
    """runpod==2.0.0rc2 installed in a virtual environment of its own, built once per session and shared by the tests
    that compare flashpoint's App surface with it (tests/rc2venv.py): skipped without network, a failure in CI."""
    return build_rc2_venv(tmp_path_factory.mktemp("runpod-rc2"))
