"""Local backend: workers are subprocesses of this host, pinned to their devices with CUDA_VISIBLE_DEVICES. A route
worker serves HTTP on a free port of 127.0.0.1 that this backend chooses."""

from __future__ import annotations

import asyncio
import os

from flashpoint.backends import process
from flashpoint.backends.base import ExitCallback, FleetCallback, Launch, LineCallback, Started, address, http_env
from flashpoint.errors import BackendError
from flashpoint.fleet.inventory import Device, Node

#: where local route workers serve: only this machine reaches them (the server's proxy is their one client)
LOOPBACK = "127.0.0.1"


class LocalBackend:
    """Runs each worker as ``python -m flashpoint.worker`` (or any command) on this machine."""

    name = "local"
    #: the machine's devices (or a simulated fleet) are read once: an endpoint none of them fits never will
    static_fleet = True

    def __init__(self, devices: list[Device], nodes: list[Node] | None = None) -> None:
        self._devices = devices
        self._nodes = list(nodes or [])
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._watchers: dict[str, asyncio.Task[None]] = {}
        #: the port each live route worker was told to serve on (never handed to two at once)
        self._ports: dict[str, int] = {}

    def devices(self) -> list[Device]:
        return list(self._devices)

    def nodes(self) -> list[Node]:
        """This machine (and, for a simulated fleet of several nodes, the simulated ones: their workers run here)."""
        return list(self._nodes)

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> Started:
        """Start the worker pinned (CUDA_VISIBLE_DEVICES) to the launch's devices; a route worker on a free port of
        127.0.0.1."""
        env, where = launch.env, None
        try:
            if launch.http:
                port = process.free_port(LOOPBACK, self._ports.values())
                env, where = {**launch.env, **http_env(LOOPBACK, port)}, address(LOOPBACK, port)
                self._ports[launch.worker_id] = port
            proc = await process.spawn(launch.argv, env, launch.cwd)
        except BackendError as exc:
            self._ports.pop(launch.worker_id, None)
            raise BackendError(f"worker {launch.worker_id}: {exc}") from exc
        self._procs[launch.worker_id] = proc
        self._watchers[launch.worker_id] = asyncio.create_task(self._watch(launch.worker_id, proc, on_line, on_exit))
        return Started(address=where, pid=proc.pid)

    async def _watch(
        self, worker_id: str, proc: asyncio.subprocess.Process, on_line: LineCallback, on_exit: ExitCallback
    ) -> None:
        code = await process.watch(proc, lambda channel, line: on_line(worker_id, channel, line))
        self._procs.pop(worker_id, None)
        self._watchers.pop(worker_id, None)
        self._ports.pop(worker_id, None)
        on_exit(worker_id, code)

    def watch(self, on_change: FleetCallback) -> None:
        """A local fleet is fixed for the life of the plane: nothing to report."""

    async def stop(self, worker_id: str, grace_s: float) -> None:
        proc = self._procs.get(worker_id)
        if proc is not None:
            await process.terminate(proc, grace_s, worker_id)

    async def close(self) -> None:
        workers = list(self._procs)
        await asyncio.gather(*(self.stop(w, 5.0) for w in workers), return_exceptions=True)
        watchers = list(self._watchers.values())
        if watchers:
            await asyncio.wait(watchers, timeout=10)


def python_env() -> dict[str, str]:
    """The environment a Python worker inherits: the caller's, plus its import path so code imports the same way."""
    import sys

    env = dict(os.environ)
    paths = [p for p in sys.path if p]
    if os.getcwd() not in paths:
        paths.insert(0, os.getcwd())
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env
