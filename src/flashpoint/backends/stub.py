"""A backend without processes, for tests: it records every start and stop, and a test plays the workers' part.

The analogue of dramatiq's ``StubBroker``: a real implementation of the ``Backend`` protocol that keeps everything
in memory. With it (and a ``FakeClock``) the control plane's rules run in-process in milliseconds: a test starts
nothing, reads ``started``/``stopped``, makes a worker speak through the plane's verbs (``take``, ``done``,
``ping``), and ends a worker with ``exit``.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

from flashpoint.backends.base import ExitCallback, FleetCallback, Launch, LineCallback
from flashpoint.errors import BackendError
from flashpoint.scheduler.inventory import Device, Fleet, Node


@dataclass(slots=True)
class StubWorker:
    """One worker the plane started: its launch, and whether it is still "running"."""

    launch: Launch
    on_line: LineCallback
    on_exit: ExitCallback
    running: bool = True
    #: the grace periods of the stops the plane asked for, in order
    stops: list[float] = field(default_factory=list)


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

    # the Backend protocol

    def devices(self) -> list[Device]:
        return list(self._devices)

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def watch(self, on_change: FleetCallback) -> None:
        self._on_change = on_change

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> tuple[int, ...] | None:
        if self.failures:
            raise self.failures.pop(0)
        self.workers[launch.worker_id] = StubWorker(launch, on_line, on_exit)
        return None

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

    def exit(self, worker_id: str, code: int) -> None:
        """The worker's process ends with ``code`` (negative: killed by that signal)."""
        worker = self.workers[worker_id]
        if worker.running:
            worker.running = False
            worker.on_exit(worker_id, code)

    def line(self, worker_id: str, channel: str, text: str) -> None:
        """The worker prints ``text`` on ``channel`` ("stdout" or "stderr")."""
        self.workers[worker_id].on_line(worker_id, channel, text)

    def change_fleet(self, devices: Sequence[Device], nodes: Sequence[Node] | None = None) -> None:
        """A node joins or leaves: the plane hears of the new fleet as from a real cluster. Without ``nodes``, the
        nodes described before that some device still names stay described."""
        if nodes is None:
            named = {d.node for d in devices}
            nodes = [n for n in self._nodes if n.name in named]
        self._devices = list(devices)
        self._nodes = list(nodes)
        if self._on_change is not None:
            self._on_change(Fleet.of(self._devices, self._nodes))
