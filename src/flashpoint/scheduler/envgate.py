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
  fail at once while the cache still records the failure. ``flashpoint env prune --failed`` forgets it (the next job
  builds again), and so does a change of the requirements (another key).

The build runs in a thread (``ensure`` blocks); its lines reach the status from that thread (one attribute written,
read by the loop), and its end reaches the plane on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from flashpoint.clock import Clock

if TYPE_CHECKING:
    from flashpoint.environments import BuildFailure, Environment
    from flashpoint.scheduler.records import EndpointState
    from flashpoint.spec import EndpointSpec

log = logging.getLogger("flashpoint.plane")

BUILDING, READY, FAILED, HOST = "building", "ready", "failed", "host"


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
    ) -> Environment: ...

    def failure(self, key: str) -> BuildFailure | None: ...


@dataclass(slots=True)
class EnvStatus:
    """An endpoint's environment as the plane knows it."""

    #: the requirement set's key in the cache ("" when the host satisfies it)
    key: str
    #: building, ready, failed, or host (no build: the host environment satisfies every requirement)
    state: str
    #: monotonic time the build began (or the state was reached)
    started: float
    #: the installer's last line (written by the building thread)
    last_line: str = ""
    #: the environment, once ready
    environment: Environment | None = None
    #: the failure, in words, with the installer's output tail
    error: str = ""

    def waiting_detail(self, now: float) -> str:
        """The ``building_environment`` reason's words."""
        line = f"; last line: {self.last_line}" if self.last_line else ""
        return f"its environment (dependencies, key {self.key}) has been building for {now - self.started:.0f}s{line}"


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
        log.warning("endpoint %s: %s", spec.name, system_note(missing)[0])
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
        records (``flashpoint env prune --failed``) starts a new build instead."""
        status = ep.environment
        if status is None or status.state != FAILED:
            return None
        if self.source.failure(status.key) is not None:
            return status.error
        log.info("the failed environment of %s was forgotten: building it again", ep.spec.name)
        self._begin(ep, retry=True)
        return None

    def forget(self, ep: EndpointState) -> None:
        """The endpoint's requirements changed (redeclared): build for the new ones."""
        ep.environment = None

    def _begin(self, ep: EndpointState, *, retry: bool) -> None:
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
        log.info("building the environment of %s (%s): %s", ep.spec.name, key, ", ".join(requirements))
        task = asyncio.get_running_loop().create_task(self._build(ep, status, retry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _build(self, ep: EndpointState, status: EnvStatus, retry: bool) -> None:
        name = ep.spec.name

        def line(text: str) -> None:  # in the building thread
            status.last_line = text[-300:]
            log.info("environment of %s: %s", name, text)

        try:
            environment = await asyncio.to_thread(
                self.source.ensure, ep.spec.dependencies, endpoint=name, on_line=line, retry=retry
            )
        except Exception as exc:
            if ep.environment is not status:  # redeclared meanwhile: this outcome is nobody's
                return
            status.state, status.error = FAILED, str(exc)
            log.error("the environment of %s failed to build: %s", name, exc)
            self.on_failed(ep, status.error)
            return
        if ep.environment is not status:
            return
        status.state, status.environment = READY, environment
        log.info("the environment of %s is ready: %s", name, environment.python)
        self.on_ready(ep)

    async def close(self) -> None:
        """Stop waiting for builds in flight (their threads finish on their own; their outcome is dropped)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
