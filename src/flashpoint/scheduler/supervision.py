"""Worker supervision: what a worker is started with, starting and stopping it through the backend, and the
back-off after a start that failed or was killed.

The plane decides (which worker, where, when); this room carries it out. Invariants:
- a worker's launch (command and environment) is built before the plane records the worker, so a launch that
  cannot be built leaves nothing behind (no phantom starting worker holding devices);
- every task it starts is kept until it ends, so none is collected mid-flight, and ``close`` waits for them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from flashpoint import wire
from flashpoint.backends.base import Backend, ExitCallback, Launch, LineCallback
from flashpoint.errors import BackendError, NotReadyError
from flashpoint.scheduler.records import EndpointState, Worker

log = logging.getLogger("flashpoint.plane")

#: a worker that exits before it ever pulled counts as a failed start; after this many in a row, queued jobs fail
MAX_START_ATTEMPTS = 5
#: how long devices whose worker never came up (a Ray actor not ready in time) are passed over by placement
SET_ASIDE_S = 60.0
#: what explanations name as the holder of devices set aside
SET_ASIDE = "(set aside: a worker placed there was not ready in time)"
#: the longest pause before starting again after a starting worker was killed from outside (not a failed start)
LOST_START_BACKOFF_MAX_S = 5.0
#: the longest pause after failed starts
FAILED_START_BACKOFF_MAX_S = 30.0


def failed_start_delay(failures: int) -> float:
    """The pause before the next start after ``failures`` failed starts in a row: 0.5 s doubling to 30 s."""
    return min(0.5 * 2.0 ** (failures - 1), FAILED_START_BACKOFF_MAX_S)


def lost_start_delay(losses: int) -> float:
    """The pause after ``losses`` starting workers were killed from outside in a row: 0.5 s doubling to 5 s, so a
    kill loop (say, the OOM killer) does not spin."""
    return min(0.5 * 2.0 ** (losses - 1), LOST_START_BACKOFF_MAX_S)


class Supervisor:
    """Starts and stops workers through a backend, and knows what each is started with."""

    def __init__(
        self,
        backend: Backend,
        *,
        python: str,
        worker_env: Mapping[str, str],
        parent_pid: int | None,
        base_url: str,
        ping_interval_s: float,
        max_result_bytes: int,
        credential: Callable[[str, str], str],
        on_line: LineCallback,
        on_exit: Callable[[str, int, bool | None], None],
        on_not_ready: Callable[[Worker, NotReadyError], None],
    ) -> None:
        self.backend = backend
        self.python = python
        self.worker_env = dict(worker_env)
        self.parent_pid = parent_pid
        self.base_url = base_url
        self.ping_interval_s = ping_interval_s
        self.max_result_bytes = max_result_bytes
        self._credential = credential
        self._on_line = on_line
        self._on_exit = on_exit
        self._on_not_ready = on_not_ready
        #: pickled code per endpoint, for targets with neither an import path nor a command
        self.code_files: dict[str, str] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def launch(self, ep: EndpointState, worker: Worker) -> Launch:
        """Everything the worker is started with; raises BackendError when it cannot be built."""
        return Launch(worker.id, ep.spec.name, self.argv(ep), self.env(ep, worker), worker.devices, ep.target.cwd)

    def argv(self, ep: EndpointState) -> list[str]:
        target = ep.target
        if target.command is not None:
            command = list(target.command)
            if command[0] in ("python", "python3"):  # the plane's interpreter: the one flashpoint is installed in
                command[0] = self.python
            if self.parent_pid is None:
                return command
            return [self.python, "-m", "flashpoint.worker.launch", "--parent", str(self.parent_pid), "--", *command]
        if target.import_path is not None:
            return [self.python, "-m", "flashpoint.worker", "--import", target.import_path]
        path = self.code_files.get(ep.spec.name)
        if path is None:
            raise BackendError(f"endpoint {ep.spec.name!r} has no code file; register it with a target")
        return [self.python, "-m", "flashpoint.worker", "--pickle", path]

    def env(self, ep: EndpointState, worker: Worker) -> dict[str, str]:
        name = ep.spec.name
        model = worker.placement().gpu_model
        env = dict(self.worker_env)
        env.update(ep.spec.env)
        env.update(
            {
                "CUDA_VISIBLE_DEVICES": ",".join(str(d.index) for d in worker.devices),
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # NVML's order, which is the order device indices come from
                "FLASHPOINT_GPU_MODEL": model or "",
                "FLASHPOINT_GPU_SIMULATED": "1" if any(d.simulated for d in worker.devices) else "0",
                "FLASHPOINT_ENDPOINT": name,
                "FLASHPOINT_WORKER_ID": worker.id,
                "FLASHPOINT_MAX_CONCURRENCY": str(ep.spec.max_concurrency),
                "FLASHPOINT_DEPENDENCIES": json.dumps(list(ep.spec.dependencies)),
                "FLASHPOINT_MAX_RESULT_BYTES": str(self.max_result_bytes),
            }
        )
        env.update(
            wire.worker_env(
                self.base_url,
                name,
                worker.id,
                gpu=(model or "cpu").replace(" ", "-"),
                key=self._credential(name, worker.id),
                ping_interval_s=self.ping_interval_s,
            )
        )
        if self.parent_pid is not None:
            env["FLASHPOINT_PARENT_PID"] = str(self.parent_pid)
        return env

    def start(self, worker: Worker, launch: Launch) -> None:
        self._keep(self._start(worker, launch))

    async def _start(self, worker: Worker, launch: Launch) -> None:
        on_exit: ExitCallback = lambda worker_id, code: self._on_exit(worker_id, code, None)  # noqa: E731
        try:
            worker.device_ids = await self.backend.start(launch, self._on_line, on_exit)
        except NotReadyError as exc:
            self._on_not_ready(worker, exc)
        except BackendError as exc:
            worker.stderr_tail.append(str(exc))
            self._on_exit(worker.id, -1, True)

    def stop(self, worker_id: str, grace_s: float) -> None:
        """Ask the worker to exit (SIGTERM), and force it after ``grace_s``; its exit is reported as any other."""
        self._keep(self.backend.stop(worker_id, grace_s))

    def _keep(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a worker start or stop failed", exc_info=task.exception())

    @property
    def pending(self) -> int:
        """Starts and stops still in flight."""
        return len(self._tasks)

    async def settle(self) -> None:
        """Wait until every start and stop asked for so far has run (tests; close)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Stop every worker, then wait (a bounded time) for starts and stops still in flight, which end with it."""
        await self.backend.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10.0)
