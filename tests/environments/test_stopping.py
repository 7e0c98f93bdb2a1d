"""Stopping a build: its time limit, and the caller's interrupt (the plane closing).

Real uv, made to hang on a real index: a socket on 127.0.0.1 that accepts connections and never answers, set as the
cache's pip ``index-url``. uv connects to it (the test knows when: the socket accepted) and waits there until it is
killed, so nothing here reaches beyond this machine, and nothing waits on a guess of how long uv takes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from flashpoint.environments import (
    BuildInterrupted,
    BuildProgress,
    EnvironmentBuildError,
    EnvironmentCache,
    Interrupt,
)
from flashpoint.environments.interrupt import INTERRUPTED, TIMED_OUT
from flashpoint.environments.lock import KeyLock, is_locked
from flashpoint.environments.records import write_json

pytestmark = pytest.mark.timeout(120)

PIN = "six==1.16.0"

#: a script with an embedded plane: it submits a job to an endpoint with dependencies (so the plane builds), says so,
#: and ends when its stdin does, mid-build: the plane closes at exit (atexit) and must stop the build
SCRIPT = """
import asyncio, sys
from flashpoint import Endpoint

@Endpoint(name="slow-env", gpu="NVIDIA H200", dependencies=["flashpoint-no-such-package-xyz==1.0"])
async def slow(data: dict) -> dict:
    return data

async def main() -> None:
    await slow.run({"x": 1})
    print("submitted", flush=True)
    sys.stdin.read()

asyncio.run(main())
"""


@dataclass
class SilentIndex:
    """A package index that accepts every connection and never says a word."""

    url: str
    #: set once uv has connected: ``uv pip install`` is running and waiting on the index
    connected: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def silent_index() -> Iterator[SilentIndex]:
    server = socket.create_server(("127.0.0.1", 0))
    index = SilentIndex(f"http://127.0.0.1:{server.getsockname()[1]}/simple")
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # shut down: the test is over
                return
            accepted.append(conn)
            index.connected.set()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield index
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        server.close()
        thread.join(10)
        for conn in accepted:
            conn.close()


def uv_children(parent: int | None = None) -> list[int]:
    """The child processes of ``parent`` (this process) running uv (read from /proc: the pids not reaped)."""
    parent = os.getpid() if parent is None else parent
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        if ppid == parent and name == "uv":
            found.append(int(stat.parent.name))
    return found


def leftovers(root: Path) -> list[str]:
    """The names in the cache root other than lock files: temporary directories, records."""
    return sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock"))


@pytest.mark.slow
def test_a_build_past_its_time_limit_is_killed_and_recorded_as_failed(
    tmp_path: Path, silent_index: SilentIndex
) -> None:
    root = tmp_path / "envs"
    cache = EnvironmentCache(root, pip_config={"global.index-url": silent_index.url}, build_timeout_s=4)
    key = cache.key([PIN])
    seen: list[list[int]] = []
    watcher = threading.Thread(target=lambda: seen.append(uv_children()) if silent_index.connected.wait(60) else None)
    watcher.start()
    # When uv waits on an index that never answers, past the build's time limit
    with pytest.raises(EnvironmentBuildError) as info:
        cache.ensure([PIN], endpoint="slow")
    watcher.join(10)
    # Then the build fails at the limit: its own words, not uv's HTTP timeout (30 s and retries, far beyond it)
    assert silent_index.connected.is_set()
    message = str(info.value)
    assert "time limit of 4 s" in message and "FLASHPOINT_ENV_BUILD_TIMEOUT_S" in message
    assert not info.value.recorded and info.value.returncode is None
    # and the uv that was running then is gone, and no other was left
    (running,) = seen
    assert len(running) == 1 and not Path(f"/proc/{running[0]}").exists()
    assert uv_children() == []
    # and the failure is recorded like any other, with nothing half-built beside it
    failure = cache.failure(key)
    assert failure is not None and "time limit of 4 s" in failure.message
    assert leftovers(root) == [f"{key}.failed"] and not is_locked(root / f"{key}.lock")
    with pytest.raises(EnvironmentBuildError) as again:
        cache.ensure([PIN], endpoint="slow")
    assert again.value.recorded and cache.builds == 1


@pytest.mark.slow
def test_a_cache_given_no_limit_keeps_the_settings(
    tmp_path: Path, silent_index: SilentIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the plane's default cache is made without a limit: FLASHPOINT_ENV_BUILD_TIMEOUT_S is its limit
    monkeypatch.setenv("FLASHPOINT_ENV_BUILD_TIMEOUT_S", "2.5")  # the OS environment, mocked as the style allows
    cache = EnvironmentCache(tmp_path / "envs", pip_config={"global.index-url": silent_index.url})
    with pytest.raises(EnvironmentBuildError, match=r"time limit of 2\.5 s"):
        cache.ensure([PIN], endpoint="slow")
    assert uv_children() == []


def test_an_interrupted_build_ends_at_once_and_records_nothing(tmp_path: Path, silent_index: SilentIndex) -> None:
    root = tmp_path / "envs"
    cache = EnvironmentCache(root, pip_config={"global.index-url": silent_index.url}, build_timeout_s=600)
    key = cache.key([PIN])
    interrupt = Interrupt()
    outcome: list[BaseException] = []

    def build() -> None:
        try:
            cache.ensure([PIN], endpoint="a", interrupt=interrupt)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=build)
    thread.start()
    # Given uv pip install running, waiting on the index
    assert silent_index.connected.wait(60)
    assert cache.building(key) is not None
    (running,) = uv_children()
    # When the caller interrupts it (the plane closing)
    interrupt.set()
    thread.join(10)
    # Then the build ends at once, interrupted, not failed
    assert not thread.is_alive()
    (error,) = outcome
    assert isinstance(error, BuildInterrupted) and error.key == key
    assert not isinstance(error, EnvironmentBuildError)
    assert cache.failure(key) is None and cache.failures() == []
    # and it left nothing: its uv killed, no temporary directory, no progress record, its lock free
    assert not Path(f"/proc/{running}").exists() and uv_children() == []
    assert leftovers(root) == [] and not is_locked(root / f"{key}.lock") and cache.building(key) is None
    # and the next ensure builds again (here it is interrupted before it starts: counted, still nothing recorded)
    with pytest.raises(BuildInterrupted):
        cache.ensure([PIN], endpoint="a", interrupt=interrupt)
    assert cache.builds == 2 and cache.failures() == [] and leftovers(root) == []


def test_an_interrupt_ends_a_wait_for_another_builder(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    root.mkdir()
    cache = EnvironmentCache(root, pip_config={})
    key = cache.key([PIN])
    # Given another builder holding the key's lock, with its progress recorded
    write_json(root / f"{key}.building", BuildProgress(key, 4242, time.time(), "other", (PIN,)).to_json())
    waiting = threading.Event()
    outcome: list[BaseException] = []
    interrupt = Interrupt()

    def wait() -> None:
        try:
            cache.ensure([PIN], endpoint="a", on_line=lambda line: waiting.set(), interrupt=interrupt)
        except BaseException as exc:
            outcome.append(exc)

    with KeyLock(root / f"{key}.lock"):
        thread = threading.Thread(target=wait)
        thread.start()
        assert waiting.wait(30)  # it said whom it waits for: it is waiting now
        # When the caller interrupts it while the lock is still held
        interrupt.set()
        thread.join(10)
        # Then the wait ends without the lock, and without building
        assert not thread.is_alive()
        assert [type(e) for e in outcome] == [BuildInterrupted] and cache.builds == 0


def sleeper() -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], text=True)


def test_interrupt_kills_the_process_it_watches_and_any_started_after() -> None:
    interrupt = Interrupt()
    with sleeper() as first:
        with interrupt.watching(first):
            assert interrupt.set() is True
            assert first.wait(10) == -9
        assert interrupt.reason == INTERRUPTED and interrupt.killed == [first.pid]
    assert interrupt.set(TIMED_OUT) is False and interrupt.reason == INTERRUPTED  # the first reason stays
    with sleeper() as late, interrupt.watching(late):  # a step started once it is set does not run on
        assert late.wait(10) == -9


def test_interrupt_reaches_the_builds_linked_to_it() -> None:
    caller, build, after = Interrupt(), Interrupt(), Interrupt()
    with caller.linked(build):
        caller.set()
    assert build.reason == INTERRUPTED
    with caller.linked(after):  # linked once the caller is set: set at once
        assert after.is_set()
    unlinked = Interrupt()
    deadline = Interrupt()
    with unlinked.linked(deadline):
        deadline.set(TIMED_OUT)  # the build's own time limit does not stop its caller
    assert not unlinked.is_set()


def test_a_script_that_exits_mid_build_stops_it_and_does_not_wait_for_it(
    tmp_path: Path, silent_index: SilentIndex
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "FLASHPOINT_", "UV_"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,  # this machine's pip files are not read: the silent index is the only one
        PIP_INDEX_URL=silent_index.url,
        FLASHPOINT_SIMULATED_GPUS="NVIDIA_H200:1",
        FLASHPOINT_ENV_DIR=str(tmp_path / "envs"),
        FLASHPOINT_STATE_DIR=str(tmp_path / "state"),
    )
    uv = 0
    with subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    ) as script:
        try:
            assert script.stdout is not None and script.stdin is not None
            assert script.stdout.readline() == "submitted\n"
            # Given the plane's build running: its uv connected to the index and waits there
            assert silent_index.connected.wait(60)
            (uv,) = uv_children(script.pid)
            # When the script ends
            script.stdin.close()
            # Then it exits without waiting for the build (uv alone would wait on the index for minutes: the bound
            # here is far below that, and the uv being gone below says the plane's close killed it)
            script.wait(60)
            assert script.returncode == 0
        finally:
            script.kill()
            if uv and Path(f"/proc/{uv}").exists():  # this test failed: do not leave its uv behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(uv, signal.SIGKILL)
                pytest.fail(f"the script's uv (process {uv}) outlived it")
    # and the build's uv was killed with it, and the build left nothing half-done and no failure
    assert not Path(f"/proc/{uv}").exists()
    root = tmp_path / "envs"
    assert leftovers(root) == [] and not list(root.glob("*.failed"))
