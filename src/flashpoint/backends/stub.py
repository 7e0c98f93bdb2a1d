"""A backend without processes, for tests: it records every start and stop, and a test plays the workers' part.

The analogue of dramatiq's ``StubBroker``: a real implementation of the ``Backend`` protocol that keeps everything
in memory. With it (and a ``FakeClock``) the control plane's rules run in-process in milliseconds: a test starts
nothing, reads ``started``/``stopped``, makes a worker speak through the plane's verbs (``take``, ``done``,
``ping``), and ends a worker with ``exit``. A route worker (``Launch.http``) gets an address (the next of
``http_addresses``, else a made-up one), and its ``/ping`` answers what the test says (``answer``), heard through
``probe``, which a test door gives the plane as its readiness probe.
"""

from __future__ import annotations

import asyncio
import signal
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from flashpoint.backends.base import ExitCallback, FleetCallback, Launch, LineCallback, Started
from flashpoint.errors import BackendError
from flashpoint.fleet.inventory import Device, Fleet, Node


@dataclass(slots=True)
class StubWorker:
    """One worker the plane started: its launch, and whether it is still "running"."""

    launch: Launch
    on_line: LineCallback
    on_exit: ExitCallback
    running: bool = True
    #: the grace periods of the stops the plane asked for, in order
    stops: list[float] = field(default_factory=list)
    #: a route worker's address, and what its ``/ping`` answers now (None: nothing listens yet)
    address: str | None = None
    ping: int | None = None
    #: set when the test gives the worker's ``/ping`` an answer (or the worker exits): a waiting ``probe`` hears it
    answered: asyncio.Event = field(default_factory=asyncio.Event)


class StubBackend:
    """Starts nothing; records. By default a stopped worker exits at once (``exit_on_stop``), as a process that
    honours SIGTERM does; with ``exit_on_stop=False`` it keeps running until the test calls ``exit``."""

    name = "stub"

    def __init__(
        self, devices: Sequence[Device] = (), *, nodes: Sequence[Node] = (), exit_on_stop: bool = True
    ) -> None:
        self._devices = list(devices)
        self._nodes = list(nodes)
        self.exit_on_stop = exit_on_stop
        #: every worker ever started, by id, in start order
        self.workers: dict[str, StubWorker] = {}
        #: ids of workers the plane asked to stop, in order
        self.stopped: list[str] = []
        #: the next starts raise these, in order (BackendError: cannot start; NotReadyError: its place never came up)
        self.failures: list[BackendError] = []
        self._on_change: FleetCallback | None = None
        self.closed = False
        #: the addresses the next route workers serve on, in order (a test's real HTTP servers); then
        #: ``http_address`` when set (one real server standing in for every worker), else made-up ones
        self.http_addresses: deque[str] = deque()
        self.http_address: str | None = None
        self._by_address: dict[str, StubWorker] = {}

    # the Backend protocol

    def devices(self) -> list[Device]:
        return list(self._devices)

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def watch(self, on_change: FleetCallback) -> None:
        self._on_change = on_change

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> Started:
        if self.failures:
            raise self.failures.pop(0)
        worker = self.workers[launch.worker_id] = StubWorker(launch, on_line, on_exit)
        if not launch.http:
            return Started()
        if self.http_addresses:
            worker.address = self.http_addresses.popleft()
        else:
            worker.address = self.http_address or f"{launch.worker_id}.stub:80"
        self._by_address[worker.address] = worker
        return Started(address=worker.address)

    async def stop(self, worker_id: str, grace_s: float) -> None:
        worker = self.workers.get(worker_id)
        if worker is None or not worker.running:
            return
        self.stopped.append(worker_id)
        worker.stops.append(grace_s)
        if self.exit_on_stop:
            self.exit(worker_id, -signal.SIGTERM)

    async def close(self) -> None:
        self.closed = True
        for worker_id, worker in self.workers.items():
            if worker.running:
                self.exit(worker_id, -signal.SIGTERM)

    # what a test does

    @property
    def started(self) -> list[str]:
        """Ids of every worker started, in order."""
        return list(self.workers)

    @property
    def running(self) -> list[str]:
        """Ids of workers started and not yet exited, in start order."""
        return [worker_id for worker_id, worker in self.workers.items() if worker.running]

    def launch(self, worker_id: str) -> Launch:
        return self.workers[worker_id].launch

    def exit(self, worker_id: str, code: int, cause: str = "") -> None:
        """The worker's process ends with ``code`` (negative: killed by that signal); with ``cause``, the backend
        lost sight of it instead (a Ray actor that died), and says what happened."""
        worker = self.workers[worker_id]
        if worker.running:
            worker.running = False
            worker.ping = None
            worker.answered.set()
            worker.on_exit(worker_id, code, cause)

    def answer(self, worker_id: str, status: int | None) -> None:
        """The route worker's ``/ping`` answers ``status`` from now on (200 ready, 204 initialising, None: not up)."""
        worker = self.workers[worker_id]
        worker.ping = status
        worker.answered.set()

    async def probe(self, address: str, timeout_s: float, secret: str = "") -> int | None:
        """The plane's readiness probe of a stub route worker (``secret`` is not checked): waits until the test gives
        its ``/ping`` an answer (``answer``) or the worker exits, and returns that answer. A long-poll, so the plane's
        polling needs no clock: each answer is heard once."""
        worker = self._by_address.get(address)  # with a shared address, the last worker started there
        if worker is None or not worker.running:
            return None
        await worker.answered.wait()
        worker.answered.clear()
        return worker.ping

    def line(self, worker_id: str, channel: str, text: str) -> None:
        """The worker prints ``text`` on ``channel`` ("stdout" or "stderr")."""
        self.workers[worker_id].on_line(worker_id, channel, text)

    def change_fleet(
        self, devices: Sequence[Device], nodes: Sequence[Node] | None = None, away: Sequence[tuple[str, str]] = ()
    ) -> None:
        """A node joins or leaves: the plane hears of the new fleet as from a real cluster. Without ``nodes``, the
        nodes described before that some device still names stay described. ``away``: ``(node, why)`` for nodes
        that left with a reason the backend knows (a Ray node whose raylet stopped answering)."""
        if nodes is None:
            named = {d.node for d in devices}
            nodes = [n for n in self._nodes if n.name in named]
        self._devices = list(devices)
        self._nodes = list(nodes)
        if self._on_change is not None:
            self._on_change(Fleet.of(self._devices, self._nodes, away))
