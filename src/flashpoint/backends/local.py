"""Local backend: workers are subprocesses of this host, pinned to their devices with CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from flashpoint.backends.base import ExitCallback, Launch, LineCallback
from flashpoint.errors import BackendError
from flashpoint.scheduler.inventory import Device

log = logging.getLogger("flashpoint.backends.local")


class LocalBackend:
    """Runs each worker as ``python -m flashpoint.worker`` (or any command) on this machine."""

    name = "local"

    def __init__(self, devices: list[Device]) -> None:
        self._devices = devices
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._watchers: dict[str, asyncio.Task[None]] = {}

    def devices(self) -> list[Device]:
        return list(self._devices)

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(
                *launch.argv,
                env=dict(launch.env),
                cwd=launch.cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                # its own session: a Ctrl-C in the caller's terminal reaches the control plane, which stops workers
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"cannot start worker {launch.worker_id} ({' '.join(launch.argv)}): {exc}") from exc
        self._procs[launch.worker_id] = proc
        self._watchers[launch.worker_id] = asyncio.create_task(self._watch(launch.worker_id, proc, on_line, on_exit))

    async def _watch(
        self, worker_id: str, proc: asyncio.subprocess.Process, on_line: LineCallback, on_exit: ExitCallback
    ) -> None:
        async def pump(stream: asyncio.StreamReader | None, name: str) -> None:
            if stream is None:
                return
            while True:
                try:
                    raw = await stream.readline()
                except ValueError:  # a line longer than the stream limit: take what is there
                    raw = await stream.read(65536)
                if not raw:
                    return
                on_line(worker_id, name, raw.decode(errors="replace").rstrip("\n"))

        pumps = asyncio.gather(pump(proc.stdout, "stdout"), pump(proc.stderr, "stderr"))
        code = await proc.wait()
        # A worker's own children (Runpod's heartbeat process, say) share its pipes and would hold them open: end the
        # worker's whole process group, then read what is left for a moment.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            await asyncio.wait_for(pumps, 2.0)
        except asyncio.TimeoutError:
            pumps.cancel()
        self._procs.pop(worker_id, None)
        self._watchers.pop(worker_id, None)
        on_exit(worker_id, code)

    async def stop(self, worker_id: str, grace_s: float) -> None:
        proc = self._procs.get(worker_id)
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), grace_s)
        except asyncio.TimeoutError:
            log.warning("worker %s did not stop within %.1fs; killing it", worker_id, grace_s)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def kill(self, worker_id: str) -> None:
        proc = self._procs.get(worker_id)
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def pid(self, worker_id: str) -> int | None:
        proc = self._procs.get(worker_id)
        return proc.pid if proc is not None else None

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
