"""The plane's side of per-endpoint environments: an endpoint with ``dependencies`` starts no worker until its
environment is ready; while it builds its jobs wait (``building_environment``); a failed build fails them.

The build itself is ``flashpoint.environments`` (uv, the cache, the lock); here is when it runs and what the plane does
with its outcome:

- **When**: an endpoint with ``dependencies`` is built for as soon as the plane plans with it (``start_missing``, from
  every reconcile), whether or not a job waits, as Flash builds at deploy time. Requirements the host environment
  already satisfies (every one installed here, at a version its specifier allows) need no build: the worker runs on
  the plane's interpreter, as before, and ``explain`` says so. A backend that builds environments itself (Ray, through
  its ``runtime_env``: ``builds_environments``) skips this gate.
- **While building** (``EnvStatus.state == "building"``): the planner starts no worker and gives the endpoint's
  waiting jobs the reason ``building_environment``, with the elapsed time and the installer's last line; every
  installer line goes to the log.
- **Ready**: workers start on the environment's interpreter (``Supervisor.argv``), their ``PYTHONPATH`` without the
  host directories the environment inherits after its own (``Environment.pythonpath``).
- **Failed**: the queued jobs end ``FAILED`` (``environment_failed``) with the installer's error; jobs submitted later
  fail at once while the cache still records the failure. ``flashpoint venv prune --failed`` forgets it (the next job
  builds again), and so does a change of the requirements (another key). A build that runs past its time limit
  (FLASHPOINT_ENV_BUILD_TIMEOUT_S, the cache's) is such a failure.
- **In use**: while an endpoint's environment is ready the plane holds it (``ensure(hold=True)``), so ``flashpoint env
  prune`` leaves it alone; the hold ends when the endpoint's requirements change (``forget``) and at ``close``.
- **Closing**: ``close`` interrupts the builds in flight (the installer killed, the temporary directory removed, the
  key's lock let go) and waits for them to finish so; an interrupted build is dropped, not failed, and the next plane
  builds it again.

The build runs in a daemon thread of its own (``ensure`` blocks); its lines reach the status from that thread (one
attribute written, read by the loop), and its end reaches the plane on the loop. Not ``asyncio.to_thread``: the
default executor's threads are joined when the interpreter exits, before ``atexit`` handlers run, so a script ending
mid-build would wait for uv, and the handler that closes the plane (and so stops the build) would run only after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, TypeVar

from flashpoint.clock import Clock
from flashpoint.scheduler.records import EnvStatus

if TYPE_CHECKING:
    from flashpoint.environments import BuildFailure, Environment, Interrupt
    from flashpoint.scheduler.records import EndpointState
    from flashpoint.spec import EndpointSpec

log = logging.getLogger("flashpoint.plane")

BUILDING, READY, FAILED, HOST = "building", "ready", "failed", "host"
#: how long ``close`` waits for interrupted builds to clean up (their installer killed, their temporary directory
#: being removed) before it stops waiting for them
CLOSE_WAIT_S = 10.0

T = TypeVar("T")


class EnvironmentSource(Protocol):
    """What the gate needs of ``environments.EnvironmentCache`` (a test door passes a scripted one)."""

    def key(self, requirements: Iterable[str]) -> str: ...

    def ensure(
        self,
        requirements: Iterable[str],
        *,
        endpoint: str,
        on_line: Callable[[str], None] | None = None,
        retry: bool = False,
        interrupt: Interrupt | None = None,
        hold: bool = False,
    ) -> Environment: ...

    def failure(self, key: str) -> BuildFailure | None: ...


def first_line(text: str) -> str:
    """A message's first line (a failure's text goes on with the installer's output)."""
    return text.strip().partition("\n")[0] or "?"


def host_satisfies(requirements: Iterable[str]) -> bool:
    """Whether every requirement is installed in this interpreter's environment at a version it allows (markers that
    do not apply here count as satisfied); a URL requirement never is."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            return False
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        if requirement.url:
            return False
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            return False
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            return False
    return True


def system_note(missing: Iterable[str]) -> tuple[str, ...]:
    """``explain``'s note for system dependencies this machine lacks: which, and the command that installs them."""
    from flashpoint.environments.system import install_command

    names = list(missing)
    return (
        f"system_dependencies not installed on this machine: {', '.join(names)}; its jobs fail with "
        f"dependency_missing until they are. Install them with: {install_command(names)}",
    )


def check_system(spec: EndpointSpec) -> tuple[str, ...]:
    """The endpoint's ``system_dependencies`` this machine lacks (Debian's package status, or an executable on
    PATH), logged once with the command that installs them; at registration, for workers on this machine."""
    if not spec.system_dependencies:
        return ()
    from flashpoint.environments.system import missing_system_dependencies

    missing = tuple(missing_system_dependencies(spec.system_dependencies))
    if missing:
        log.warning("endpoint %s: %s", spec.key, system_note(missing)[0])
    return missing


class EnvironmentGate:
    """Builds endpoints' environments and keeps each endpoint's ``EnvStatus`` (``ep.environment``)."""

    def __init__(
        self,
        source: EnvironmentSource | None,
        clock: Clock,
        *,
        on_ready: Callable[[EndpointState], None],
        on_failed: Callable[[EndpointState, str], None],
        host_check: Callable[[Iterable[str]], bool] = host_satisfies,
    ) -> None:
        self._source = source
        self.clock = clock
        self.on_ready = on_ready
        self.on_failed = on_failed
        self.host_check = host_check
        self._tasks: set[asyncio.Task[None]] = set()
        #: the interrupts of the builds in flight, set by ``close``
        self._interrupts: set[Interrupt] = set()
        #: the environments this plane holds (``ensure(hold=True)``): one per ready endpoint
        self._held: list[Environment] = []
        self._closed = False

    @property
    def source(self) -> EnvironmentSource:
        """The environment cache at its default root unless one was given, made at first use: a plane whose endpoints
        have no dependencies never imports ``flashpoint.environments`` (packaging, uv's locator)."""
        if self._source is None:
            from flashpoint.environments import EnvironmentCache

            self._source = EnvironmentCache()
        return self._source

    def start_missing(self, endpoints: Iterable[EndpointState]) -> None:
        """Begin a build for every endpoint with dependencies and no environment status yet (on the loop)."""
        for ep in endpoints:
            if ep.spec.dependencies and ep.environment is None:
                self._begin(ep, retry=False)

    def failed_for_good(self, ep: EndpointState) -> str | None:
        """For a job submitted to ``ep``: the failure that ends it at once, or None. A failure the cache no longer
        records (``flashpoint venv prune --failed``) starts a new build instead."""
        status = ep.environment
        if status is None or status.state != FAILED:
            return None
        if self.source.failure(status.key) is not None:
            return status.error
        log.info("the failed environment of %s was forgotten: building it again", ep.spec.key)
        self._begin(ep, retry=True)
        return None

    def forget(self, ep: EndpointState) -> None:
        """The endpoint's requirements changed (redeclared): build for the new ones, and let go of the old
        environment's hold (a build of the old ones still running finishes, and its outcome is dropped)."""
        status, ep.environment = ep.environment, None
        if status is not None and status.environment is not None:
            self._release(status.environment)

    def _release(self, environment: Environment) -> None:
        environment.release()
        self._held[:] = [held for held in self._held if held is not environment]

    def _begin(self, ep: EndpointState, *, retry: bool) -> None:
        if self._closed:  # a closed plane starts no build (close would not stop it)
            return
        requirements = ep.spec.dependencies
        now = self.clock.monotonic()
        if self.host_check(requirements):
            ep.environment = EnvStatus("", HOST, now)
            return
        try:
            key = self.source.key(requirements)
        except Exception as exc:  # a requirement that is not PEP 508 (declaration checks it; a fleet file may not)
            ep.environment = EnvStatus("", FAILED, now, error=str(exc))
            self.on_failed(ep, str(exc))
            return
        status = ep.environment = EnvStatus(key, BUILDING, now)
        log.info("building the environment of %s (%s): %s", ep.spec.key, key, ", ".join(requirements))
        task = asyncio.get_running_loop().create_task(self._build(ep, status, retry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _build(self, ep: EndpointState, status: EnvStatus, retry: bool) -> None:
        from flashpoint.environments import BuildInterrupted, Interrupt

        name = ep.spec.key

        def line(text: str) -> None:  # in the building thread
            status.last_line = text[-300:]
            log.info("environment of %s: %s", name, text)

        def ensure() -> Environment:  # in the building thread
            return self.source.ensure(
                ep.spec.dependencies, endpoint=name, on_line=line, retry=retry, interrupt=interrupt, hold=True
            )

        interrupt = Interrupt()
        self._interrupts.add(interrupt)
        try:
            environment = await in_daemon_thread(ensure, f"flashpoint-env-{name}", dropped=_release_dropped)
        except BuildInterrupted:
            log.info("the build of the environment of %s was interrupted: the plane is closing", name)
            return
        except Exception as exc:
            if ep.environment is not status or self._closed:  # redeclared meanwhile, or closed: nobody's outcome
                return
            status.state, status.error = FAILED, str(exc)
            log.error("the environment of %s failed to build: %s", name, exc)
            self.on_failed(ep, status.error)
            return
        finally:
            self._interrupts.discard(interrupt)
        if ep.environment is not status or self._closed:  # nobody's (redeclared, or the plane closed): let it go
            environment.release()
            return
        status.state, status.environment, status.built = READY, environment, self.clock.monotonic()
        self._held.append(environment)
        log.info("the environment of %s is ready: %s", name, environment.python)
        self.on_ready(ep)

    async def close(self) -> None:
        """Interrupt the builds in flight and wait (``CLOSE_WAIT_S`` at most) for them to clean up: their installers
        killed, their temporary directories removed, their keys' locks let go, nothing recorded. Then let go of every
        environment this plane holds, so ``flashpoint venv prune`` may remove them."""
        self._closed = True
        for interrupt in list(self._interrupts):
            interrupt.set()
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=CLOSE_WAIT_S)
            for task in late:
                log.warning("an environment build did not stop within %.0f s of the plane closing", CLOSE_WAIT_S)
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        for environment in self._held:
            environment.release()
        self._held.clear()


async def in_daemon_thread(fn: Callable[[], T], name: str, *, dropped: Callable[[T], None] | None = None) -> T:
    """``fn()`` run in a daemon thread of its own, awaited on the running loop (the module docstring says why not
    ``asyncio.to_thread``). A result that arrives once nobody awaits it (the awaiting task cancelled, the loop closed)
    goes to ``dropped``."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: tuple[T] | BaseException) -> None:  # on the loop
        if not future.done():
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome[0])
        elif not isinstance(outcome, BaseException) and dropped is not None:
            dropped(outcome[0])

    def run() -> None:  # in the thread
        outcome: tuple[T] | BaseException
        try:
            outcome = (fn(),)
        except BaseException as exc:
            outcome = exc
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:  # the loop is closed
            if not isinstance(outcome, BaseException) and dropped is not None:
                dropped(outcome[0])

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future


def _release_dropped(environment: Environment) -> None:
    """A ready environment nobody awaited any more: let go of its hold."""
    with contextlib.suppress(Exception):
        environment.release()
