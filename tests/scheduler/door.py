"""The engine's test door: a ControlPlane on a StubBackend (no processes) and a FakeClock (no waiting).

A collaborator of the plane is tested alone on a bare ``plane_state`` (the state the plane's rooms share, with the
same fake clock and simulated fleet), with ``add_endpoint`` and ``add_worker`` writing the records the plane would.

A test registers endpoints, submits jobs, and plays the workers' part through the plane's own verbs (``take``,
``done``, ``ping``) or, with ``worker_client``, over the real worker routes in-process; ``step`` moves the clock and
turns it once; ``settle`` waits for the plane, never for time. A route worker's ``/ping`` answers what the test says
(``ready``, or ``backend.answer``): the door's plane polls through the stub backend's scripted probe.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette

from flashpoint import Endpoint
from flashpoint.api.workers import worker_routes
from flashpoint.backends.stub import StubBackend
from flashpoint.clock import FakeClock
from flashpoint.fleet.inventory import Node
from flashpoint.fleet.simulated import parse_fleet
from flashpoint.jobs import Job
from flashpoint.scheduler.jobbook import JobBook
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.records import EndpointState, Worker, WorkerState
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.scheduler.state import PlaneState
from flashpoint.spec import EndpointSpec, RouteSpec, WorkerTarget
from flashpoint.store.memory import MemoryJobStore

TARGET = WorkerTarget(import_path="tests.apps.handlers_app:echo")
#: a route endpoint's worker target, and the routes the door's route endpoints declare
ROUTE_TARGET = WorkerTarget(import_path="tests.apps.routes_app:api")
ROUTES = (RouteSpec("GET", "/echo", "echo"), RouteSpec("POST", "/items/{item_id}", "item"))
#: the base URL of the in-process clients (nothing listens there: requests go to the app through ASGI)
BASE_URL = "http://plane"
#: what every node of a door's fleet has unless a test says otherwise: 4 vCPUs and 16 GB for CPU workers, CUDA 12.8
DOOR_HOST = Node("", cpus=4, memory_mb=16 * 1024, cuda="12.8")


@dataclass
class Door:
    plane: ControlPlane
    backend: StubBackend
    clock: FakeClock

    def endpoint(self, **options: Any) -> EndpointSpec:
        """Register an endpoint with ``Endpoint``'s options (``name=`` and ``gpu=`` or ``cpu=`` at least)."""
        spec = Endpoint(**options).spec
        self.plane.register(spec, TARGET)
        return spec

    def routes_endpoint(self, routes: Sequence[RouteSpec] = ROUTES, **options: Any) -> EndpointSpec:
        """Register an HTTP-route endpoint with ``Endpoint``'s options and ``routes``."""
        spec = dataclasses.replace(Endpoint(**options).spec, kind="routes", routes=tuple(routes))
        self.plane.register(spec, ROUTE_TARGET)
        return spec

    async def ready(self, worker: Worker, status: int = 200) -> None:
        """The route worker's ``/ping`` answers ``status``; returns once the plane has heard it (200: the worker is
        ready and has taken the requests held for it)."""
        self.backend.answer(worker.id, status)
        heard = self.backend.workers[worker.id].answered
        await until(lambda: not heard.is_set(), f"the plane to ask worker {worker.id}'s /ping")
        await self.settle()
        if status == 200:
            assert worker.state is not WorkerState.STARTING

    def submit(self, endpoint: str, payload: Any = None, **options: Any) -> Job:
        return self.plane.submit(endpoint, {} if payload is None else payload, **options)

    async def settle(self) -> None:
        await self.plane.settled()

    async def step(self, seconds: float = 0.0) -> None:
        """Move the clock by ``seconds``, turn it once, and let the plane settle."""
        self.clock.advance(seconds)
        self.plane.tick()
        await self.plane.settled()

    def workers(self, endpoint: str) -> list[Worker]:
        """The endpoint's workers, in start order."""
        return list(self.plane.endpoint(endpoint).workers.values())

    def worker(self, endpoint: str) -> Worker:
        (only,) = self.workers(endpoint)
        return only

    async def pull(self, worker: Worker, count: int = 1) -> list[str]:
        """The worker asks for jobs (and becomes ready); the ids it got, at once (no long-poll)."""
        jobs = await self.plane.take(worker.endpoint, worker.id, count, hold_s=0)
        return [job["id"] for job in jobs]

    async def finish(self, worker: Worker, job_id: str, output: Any = "ok") -> None:
        self.plane.done(worker.endpoint, worker.id, job_id, {"output": output})
        await self.settle()

    async def crash(self, worker: Worker, code: int = -signal.SIGKILL) -> None:
        self.backend.exit(worker.id, code)
        await self.settle()

    def reasons(self, endpoint: str) -> set[str]:
        return {r.code.value for r in self.plane.explain_endpoint(endpoint).reasons}

    def worker_client(self, worker: Worker, **options: Any) -> httpx.AsyncClient:
        """A client that speaks as ``worker`` over the plane's real worker routes (``/v2/{endpoint}/job-take/...``),
        in-process through ASGI, with the worker's own key in ``Authorization``; use it with ``async with``."""
        headers = {"Authorization": self.plane.worker_credential(worker.endpoint, worker.id)}
        transport = httpx.ASGITransport(app=Starlette(routes=worker_routes(self.plane)))
        return httpx.AsyncClient(transport=transport, base_url=BASE_URL, headers=headers, **options)

    async def holding(self, worker: Worker) -> None:
        """Return once the plane holds a job-take long-poll of ``worker`` (a request in flight gets there within a
        few turns of the loop); fail if none arrives."""
        for _ in range(1000):
            if any(taker[0] == worker.id for taker in self.plane.endpoint(worker.endpoint).takers):
                return
            await asyncio.sleep(0)
        raise AssertionError(f"the plane holds no job-take of worker {worker.id}")


async def until(check: Callable[[], object], what: str = "the plane") -> None:
    """Let the loop turn until ``check()`` holds (work already under way: a few turns); fail if it never does."""
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"waited for {what} in vain")


async def open_door(
    fleet: str = "node-a=NVIDIA_H200:2",
    *,
    exit_on_stop: bool = True,
    host: Node = DOOR_HOST,
    nodes: Sequence[Node] = (),
    **options: Any,
) -> Door:
    """A plane on a simulated ``fleet`` (the one-line fleet syntax), started without its ticker. Every node of it has
    ``host``'s facts; ``nodes`` replace the nodes of the same name, and add the others (CPU-only nodes). ``store=``
    gives the plane a job store of the test's (else a new ``MemoryJobStore``)."""
    clock = FakeClock()
    described = parse_fleet(fleet, host=host) if fleet else None
    replaced = {n.name: n for n in nodes}
    kept = [replaced.pop(n.name, n) for n in (described.node_facts if described else ())]
    backend = StubBackend(
        described.devices if described else (), nodes=[*kept, *replaced.values()], exit_on_stop=exit_on_stop
    )
    # route workers' /ping is the stub's scripted one, asked again at once (the stub's probe waits for an answer);
    # the options are the plane's settings, but for its collaborators (probe, environments, leases, quotas)
    given = {name: options.pop(name) for name in ("probe", "environments", "leases", "quotas") if name in options}
    store = options.pop("store", None) or MemoryJobStore()  # a test's own (a SQLite file a restart opens again)
    collaborators: dict[str, Any] = {"probe": backend.probe, **given}
    settings = PlaneSettings(**{"route_poll_s": (0.0, 0.0), **options})
    plane = ControlPlane(store, backend, worker_secret="door", settings=settings, clock=clock, **collaborators)
    await plane.start(ticking=False)
    return Door(plane, backend, clock)


def plane_state(fleet: str = "node-a=NVIDIA_H200:2", *, host: Node = DOOR_HOST) -> PlaneState:
    """The state a plane's collaborators share, without a plane: a simulated ``fleet`` (the one-line syntax) in a
    fleet index, a job book on a memory store, a FakeClock (``state.clock``)."""
    clock = FakeClock()
    described = parse_fleet(fleet, host=host) if fleet else None
    index = FleetIndex(described.devices if described else (), described.node_facts if described else ())
    return PlaneState(clock, index, JobBook(MemoryJobStore(), clock))


def add_endpoint(state: PlaneState, **options: Any) -> EndpointState:
    """Record an endpoint with ``Endpoint``'s options in ``state``, as registering it does (a route endpoint when
    ``routes`` are given)."""
    routes = tuple(options.pop("routes", ()))
    spec = Endpoint(**options).spec
    if routes:
        spec = dataclasses.replace(spec, kind="routes", routes=routes)
    ep = EndpointState(spec, ROUTE_TARGET if routes else TARGET, registered_at=state.clock.time())
    state.endpoints[spec.name] = ep
    if routes:
        state.routed[spec.name] = ep
    return ep


def add_worker(state: PlaneState, ep: EndpointState, status: WorkerState = WorkerState.STARTING) -> Worker:
    """Record a worker of ``ep`` (on no devices) in ``state``, as starting one does; ``status`` is its state."""
    now = state.clock.monotonic()
    ep.worker_seq += 1
    worker = Worker(
        f"{ep.spec.name}-w{ep.worker_seq}", ep.spec.name, (), started_at=now, idle_since=now, last_exchange=now
    )
    worker.state = status
    worker.ever_ready = status is not WorkerState.STARTING
    state.workers[worker.id] = ep.workers[worker.id] = worker
    return worker
