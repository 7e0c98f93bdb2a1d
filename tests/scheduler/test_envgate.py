"""Per-endpoint environments, the plane's side (``scheduler/envgate.py``), through the test door: a scripted
environment source stands in for uv (its builds end when the test says, or when the plane interrupts them), the stub
backend for processes. The in-use holds it hands out are real flocks, on files in a temporary directory."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from flashpoint import Endpoint
from flashpoint.environments import BuildFailure, BuildInterrupted, Environment, EnvironmentBuildError, Interrupt
from flashpoint.environments.lock import InUseHold, in_use
from flashpoint.jobs import JobStatus, Reason
from flashpoint.scheduler.envgate import host_satisfies
from tests.conftest import eventually
from tests.scheduler.door import TARGET, Door, open_door

#: pinned below anything installed here, so the host never satisfies it and a build is asked for
PIN = "six==1.15.0"
HOST_DIR = os.path.dirname(os.path.dirname(os.__file__))  # a directory the environment "inherits"


class ScriptedSource:
    """An environment source whose builds block until ``finish`` (or ``fail``) is called, or until the caller's
    interrupt is set (then it raises ``BuildInterrupted``, as the cache does); records every call, the interrupt each
    came with, and how many have returned. A hold asked for is a real ``InUseHold`` on ``<holds>/<key>.inuse``.
    """

    def __init__(self, holds: Path) -> None:
        self.holds = holds
        self.calls: list[tuple[tuple[str, ...], str, bool]] = []
        self.interrupts: list[Interrupt | None] = []
        #: builds that returned or raised (their thread is done with them)
        self.ended = 0
        self.failures: dict[str, BuildFailure] = {}
        self._outcome: Environment | Exception | None = None
        #: set by finish/fail ("done"), or through the caller's interrupt (linked): what the running build waits on
        self._wake = Interrupt()
        self._started = threading.Event()

    def key(self, requirements: Iterable[str]) -> str:
        return "k" + str(abs(hash(tuple(sorted(requirements)))) % 10**8)

    def ensure(
        self,
        requirements: Iterable[str],
        *,
        endpoint: str,
        on_line: Callable[[str], None] | None = None,
        retry: bool = False,
        interrupt: Interrupt | None = None,
        hold: bool = False,
    ) -> Environment:
        try:
            return self._ensure(tuple(requirements), endpoint, on_line, retry, interrupt, hold)
        finally:
            self.ended += 1

    def _ensure(
        self,
        reqs: tuple[str, ...],
        endpoint: str,
        on_line: Callable[[str], None] | None,
        retry: bool,
        interrupt: Interrupt | None,
        hold: bool,
    ) -> Environment:
        wake = self._wake
        self.interrupts.append(interrupt)
        self.calls.append((reqs, endpoint, retry))
        self._started.set()
        if on_line is not None:
            on_line("Resolved 1 package in 12ms")
        with interrupt.linked(wake) if interrupt is not None else contextlib.nullcontext():
            assert wake.wait(10), "the test never finished the build"
        if wake.reason != "done":
            raise BuildInterrupted("interrupted", key=self.key(reqs))
        self._wake, self._started = Interrupt(), threading.Event()
        outcome, self._outcome = self._outcome, None
        if isinstance(outcome, EnvironmentBuildError):
            self.failures[outcome.key] = BuildFailure(
                key=outcome.key,
                requirements=list(reqs),
                endpoint=endpoint,
                failed_at=0.0,
                message=str(outcome.args[0]),
                returncode=1,
                output_tail=list(outcome.output_tail),
            )
        if isinstance(outcome, Exception):
            raise outcome
        assert outcome is not None
        return dataclasses.replace(outcome, hold=InUseHold(self.hold_file(outcome.key))) if hold else outcome

    def failure(self, key: str) -> BuildFailure | None:
        return self.failures.get(key)

    def hold_file(self, key: str) -> Path:
        return self.holds / f"{key}.inuse"

    def _end(self, outcome: Environment | Exception) -> None:
        assert self._started.wait(10), "no build is running"
        self._outcome = outcome
        self._wake.set("done")

    def finish(self, requirements: Iterable[str]) -> Environment:
        key = self.key(requirements)
        root = Path("/envs") / key
        environment = Environment(
            key=key,
            path=root,
            python=root / "bin" / "python",
            site_packages=root / "lib" / "site-packages",
            requirements=tuple(requirements),
            inherited=(HOST_DIR,),
            built=True,
        )
        self._end(environment)
        return environment

    def fail(self, requirements: Iterable[str]) -> None:
        self._end(
            EnvironmentBuildError(
                "uv could not install the requirements",
                key=self.key(requirements),
                requirements=tuple(requirements),
                output_tail=("error: No solution found when resolving dependencies:",),
                returncode=1,
            )
        )


@pytest.fixture
async def door(tmp_path: Path) -> Door:
    source = ScriptedSource(tmp_path)
    door = await open_door(environments=source, worker_env={"PYTHONPATH": os.pathsep.join(["/app", HOST_DIR])})
    door.source = source  # type: ignore[attr-defined]
    yield door  # type: ignore[misc]
    await door.plane.close()  # a build still blocked is interrupted


def source_of(door: Door) -> ScriptedSource:
    return door.source  # type: ignore[attr-defined,no-any-return]


async def test_jobs_wait_building_environment_then_workers_start_on_its_interpreter(door: Door) -> None:
    source = source_of(door)
    door.endpoint(name="pinned", gpu="NVIDIA H200", dependencies=[PIN])
    job = door.submit("pinned")
    await door.step()
    await eventually(lambda: source.calls, 10, "the build to begin")
    await eventually(lambda: door.plane.endpoints["pinned"].environment.last_line, 10, "the installer's first line")  # type: ignore[union-attr]
    await door.step(7)
    assert door.backend.started == []  # no worker before the environment
    (reason,) = door.plane.explain_job(job.id).reasons
    assert reason.code.value == "building_environment"
    assert "building for 7s" in reason.detail and "Resolved 1 package" in reason.detail
    assert job.status is JobStatus.IN_QUEUE

    environment = source.finish([PIN])
    await eventually(lambda: door.backend.started, 10, "a worker to start once the environment is ready")
    launch = door.backend.workers[door.backend.started[0]].launch
    assert launch.argv[0] == str(environment.python)
    assert launch.env["PYTHONPATH"] == "/app"  # the inherited directory comes after the environment's own
    assert launch.env["FLASHPOINT_ENV_INUSE"] == str(environment.in_use_path)  # the worker holds it too
    assert source.calls == [((PIN,), "pinned", False)]


async def test_a_failed_build_fails_the_waiting_jobs_and_later_ones_until_it_is_forgotten(door: Door) -> None:
    source = source_of(door)
    door.endpoint(name="broken", gpu="NVIDIA H200", dependencies=[PIN])
    first = door.submit("broken")
    await door.step()
    await eventually(lambda: source.calls, 10, "the build to begin")
    source.fail([PIN])
    await eventually(lambda: first.status is JobStatus.FAILED, 10, "the waiting job to fail")
    assert first.reason is Reason.ENVIRONMENT_FAILED and first.error is not None
    assert "No solution found" in first.error.message and first.error.type == "EnvironmentBuildError"

    second = door.submit("broken")  # the failure is recorded: no new build, the job fails at once
    assert second.status is JobStatus.FAILED and second.reason is Reason.ENVIRONMENT_FAILED
    assert len(source.calls) == 1 and door.backend.started == []

    source.failures.clear()  # `flashpoint venv prune --failed`
    third = door.submit("broken")
    assert third.status is JobStatus.IN_QUEUE
    await eventually(lambda: len(source.calls) == 2, 10, "a new build")
    assert source.calls[1] == ((PIN,), "broken", True)
    source.finish([PIN])
    await eventually(lambda: door.backend.started, 10, "a worker for the job")


async def test_requirements_the_host_satisfies_need_no_build(door: Door) -> None:
    door.endpoint(name="host", gpu="NVIDIA H200", dependencies=["pytest>=1"])
    door.submit("host")
    await door.step()
    await eventually(lambda: door.backend.started, 10, "a worker")
    assert source_of(door).calls == []
    launch = door.backend.workers[door.backend.started[0]].launch
    assert launch.argv[0] == sys.executable and HOST_DIR in launch.env["PYTHONPATH"]


async def test_new_requirements_build_a_new_environment(door: Door) -> None:
    source = source_of(door)
    spec = door.endpoint(name="again", gpu="NVIDIA H200", dependencies=[PIN])
    await door.step()
    await eventually(lambda: source.calls, 10, "the first build")
    source.finish([PIN])
    await eventually(lambda: door.plane.endpoints["again"].environment.state == "ready", 10, "ready")  # type: ignore[union-attr]
    door.plane.redeclare(dataclasses.replace(spec, dependencies=("six==1.14.0",)), TARGET)
    await door.step()
    await eventually(lambda: len(source.calls) == 2, 10, "a build for the new requirements")
    assert source.calls[1][0] == ("six==1.14.0",)
    assert door.plane.endpoints["again"].environment.state == "building"  # type: ignore[union-attr]


async def test_closing_interrupts_a_build_in_flight_and_waits_for_it_without_failing_it(door: Door) -> None:
    source = source_of(door)
    door.endpoint(name="closing", gpu="NVIDIA H200", dependencies=[PIN])
    job = door.submit("closing")
    await door.step()
    await eventually(lambda: source.calls, 10, "the build to begin")
    (interrupt,) = source.interrupts
    assert interrupt is not None and not interrupt.is_set()
    # When the plane closes while the build runs (the test never finishes it)
    await door.plane.close()
    # Then the build was interrupted, and close returned only once the building thread was done with it
    assert interrupt.is_set() and source.ended == 1
    # and the interruption is no failure: the job ends with the plane, not environment_failed
    status = door.plane.endpoints["closing"].environment
    assert status is not None and status.state == "building" and status.error == ""
    assert job.status is JobStatus.CANCELLED and job.reason is Reason.SHUTDOWN


async def test_the_plane_holds_a_ready_environment_until_its_requirements_change_or_it_closes(door: Door) -> None:
    source = source_of(door)
    spec = door.endpoint(name="held", gpu="NVIDIA H200", dependencies=[PIN])
    await door.step()
    await eventually(lambda: source.calls, 10, "the first build")
    first = source.finish([PIN])
    await eventually(lambda: door.plane.endpoints["held"].environment.state == "ready", 10, "ready")  # type: ignore[union-attr]
    assert in_use(source.hold_file(first.key))  # prune would leave it alone
    # the requirements change: the old environment is let go, the new one held once ready
    door.plane.redeclare(dataclasses.replace(spec, dependencies=("six==1.14.0",)), TARGET)
    assert not in_use(source.hold_file(first.key))
    await door.step()
    await eventually(lambda: len(source.calls) == 2, 10, "a build for the new requirements")
    second = source.finish(["six==1.14.0"])
    await eventually(lambda: door.plane.endpoints["held"].environment.state == "ready", 10, "ready again")  # type: ignore[union-attr]
    assert in_use(source.hold_file(second.key))
    # redeclared with the same requirements: still held
    door.plane.redeclare(dataclasses.replace(spec, dependencies=("six==1.14.0",), workers_max=2), TARGET)
    assert in_use(source.hold_file(second.key))
    await door.plane.close()
    assert not in_use(source.hold_file(second.key))


async def test_missing_system_dependencies_are_noted_with_the_command_and_told_to_workers(door: Door) -> None:
    door.endpoint(name="sys", gpu="NVIDIA H200", system_dependencies=["flashpoint-no-such-pkg", "sh"])
    assert door.plane.endpoints["sys"].system_missing == ("flashpoint-no-such-pkg",)
    (note,) = [n for n in door.plane.explain_endpoint("sys").notes if "system_dependencies" in n]
    assert "flashpoint-no-such-pkg" in note and "apt-get install -y flashpoint-no-such-pkg" in note
    door.submit("sys")
    await door.step()
    await eventually(lambda: door.backend.started, 10, "a worker")
    launch = door.backend.workers[door.backend.started[0]].launch
    assert launch.env["FLASHPOINT_SYSTEM_DEPENDENCIES"] == '["flashpoint-no-such-pkg", "sh"]'


def test_bad_requirements_and_package_names_are_refused_at_declaration() -> None:
    with pytest.raises(Exception, match="--index-url"):
        Endpoint(name="bad", gpu="NVIDIA H200", dependencies=["--index-url=http://evil"])
    with pytest.raises(Exception, match="system_dependencies|package"):
        Endpoint(name="bad", gpu="NVIDIA H200", system_dependencies=["ffmpeg; rm -rf /"])


@pytest.mark.parametrize(
    ("requirements", "satisfied"),
    [
        (["pytest"], True),
        (["pytest>=1"], True),
        (["PyTest>=1"], True),  # names as PEP 503 compares them
        (["pytest<1"], False),
        (["flashpoint-no-such-package"], False),
        (["pytest", "flashpoint-no-such-package"], False),
        (['flashpoint-no-such-package; python_version < "3"'], True),  # a marker that does not apply here
        (["pytest @ https://example.invalid/pytest.whl"], False),  # a URL is never the host's
        ([], True),
    ],
)
def test_host_satisfies(requirements: list[str], satisfied: bool) -> None:
    assert host_satisfies(requirements) is satisfied


async def test_a_backend_that_cannot_set_an_environment_up_fails_the_queue_at_once(door: Door) -> None:
    from flashpoint.backends.rayship import EnvironmentSetupError

    door.backend.failures.append(
        EnvironmentSetupError(
            "Ray could not set up its environment (pip install nope==1): ERROR: No matching distribution found",
            requirements=("nope==1",),
        )
    )
    door.endpoint(name="ray-env", gpu="NVIDIA H200")
    first, second = door.submit("ray-env"), door.submit("ray-env")
    await door.step()
    await eventually(lambda: first.status is JobStatus.FAILED, 10, "the queue to fail")
    for job in (first, second):
        assert job.status is JobStatus.FAILED and job.reason is Reason.ENVIRONMENT_FAILED
        assert job.error is not None and "No matching distribution" in job.error.message
    assert door.plane.endpoints["ray-env"].start_failures == 1  # one attempt, not five
