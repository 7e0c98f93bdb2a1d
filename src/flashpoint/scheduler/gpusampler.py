"""The plane's GPU sampler (decision 0117): reads the real devices of its node at a bounded rate, in a worker thread,
and tells ``GpuStats`` (``PlaneState.gpus``) each sample with the workers that ran jobs on them.

It runs only where there is something to read: a reader, a sampling interval (``PlaneSettings.gpu_sample_s``; 0 turns
it off) and real devices of the plane's node (``fleet.telemetry.sampled_devices``). A simulated fleet has none, so a
simulated plane never samples and its devices say "simulated: no telemetry". The reader's calls (NVML, blocking) go
through ``asyncio.to_thread``; one sample at a time, the next ``interval_s`` after the last ended, so a slow driver
slows sampling and never the loop.
"""

from __future__ import annotations

import asyncio
import logging

from flashpoint.errors import BadInputError
from flashpoint.fleet.telemetry import NvmlReader, Reader, sampled_devices
from flashpoint.scheduler.gpustats import WorkerAt
from flashpoint.scheduler.state import PlaneState

__all__ = ["MIN_INTERVAL_S", "GpuSampler"]

log = logging.getLogger("flashpoint.plane")

#: the shortest interval between two samples: NVML reads cost milliseconds per device, and a worker thread each
MIN_INTERVAL_S = 1.0


class GpuSampler:
    """Samples the plane's real devices every ``interval_s`` through ``reader``; see the module's docstring."""

    def __init__(self, state: PlaneState, reader: Reader | None, *, interval_s: float, node: str) -> None:
        """Raises BadInputError for an interval between 0 and ``MIN_INTERVAL_S``."""
        if interval_s != 0 and interval_s < MIN_INTERVAL_S:
            raise BadInputError(
                f"GPU sampling interval {interval_s:g} s is too short: use at least {MIN_INTERVAL_S:g} s, or 0 to "
                "turn GPU telemetry off"
            )
        self._state = state
        self._reader = reader
        self._interval_s = interval_s
        self._node = node
        self._task: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        """There is something to sample: a reader, an interval, and real devices of this node."""
        return (
            self._reader is not None
            and self._interval_s > 0
            and bool(sampled_devices(self._state.index.devices, self._node))
        )

    def start(self) -> None:
        """Sample from now on, every ``interval_s`` (nothing when not ``active``)."""
        if self._task is None and self.active:
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            try:
                await self.sample_once()
            except Exception:  # a bug in one sample must not stop sampling
                log.exception("GPU sample failed")
            await asyncio.sleep(self._interval_s)

    async def sample_once(self) -> bool:
        """Read one sample (in a worker thread) and record it with the workers running jobs now; False when there is
        nothing to sample."""
        reader = self._reader
        devices = sampled_devices(self._state.index.devices, self._node)
        if reader is None or not devices:
            return False
        sample = await asyncio.to_thread(reader, devices)
        # the workers as they are once the sample is in: a job that ended while NVML was read was settled already
        workers = [
            WorkerAt(w.id, w.pid, tuple(d.uuid for d in w.devices if d.uuid), w.jobs)
            for w in self._state.workers.values()
            if w.devices
        ]
        self._state.gpus.record(sample, workers, self._state.clock.time())
        return True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if isinstance(self._reader, NvmlReader):
            self._reader.close()
