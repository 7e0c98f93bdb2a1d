"""GPU telemetry aggregated (decision 0117): each device's latest sample, and each job's peak GPU memory and mean
utilisation over the samples taken while it ran. Pure: it is told samples and the workers at each, and keeps no clock.

Attribution goes through a job's worker: its devices (by UUID) and its process (by pid, or by session id: a worker
is started in a session of its own, so processes it starts share its pid there). In one sample a worker's

- *utilisation* is the mean of its devices' utilisation;
- *memory* is the sum of what NVML lists for its processes on its devices; where NVML lists none of them (a container
  whose pid namespace hides them, a backend that does not know the worker's pid) it is its devices' memory used: a
  worker holds its devices alone.

A job's figures fold every sample in which one of its workers had figures: the peak of the memory and the mean of the
utilisation (an unweighted mean: samples come at a fixed rate). A job no sample saw gets no figures (None, never 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from flashpoint.fleet.inventory import Device
from flashpoint.fleet.telemetry import SIMULATED, DeviceReading, ProcessReading, Sample

__all__ = ["NOT_SAMPLED", "GpuStats", "JobFigures", "WorkerAt", "fold", "worker_figures"]

#: what a real device without a sample shows
NOT_SAMPLED = "unknown: not sampled yet"


class WorkerAt(NamedTuple):
    """What attribution needs of one worker at one sample."""

    id: str
    #: its process id, where its backend knows it
    pid: int | None
    #: the UUIDs of its devices
    uuids: tuple[str, ...]
    #: the jobs it runs
    jobs: frozenset[str]


class JobFigures(NamedTuple):
    """A job's GPU figures while it ran; either may be None when no sample had it."""

    memory_peak_mb: int | None
    utilization_mean_pct: float | None


@dataclass(slots=True)
class _Tally:
    peak_mb: int | None = None
    util_sum: float = 0.0
    util_n: int = 0


def _owned(proc: ProcessReading, pid: int | None) -> bool:
    return pid is not None and (proc.pid == pid or proc.session == pid)


def worker_figures(sample: Sample, worker: WorkerAt) -> JobFigures | None:
    """The worker's memory (MiB) and utilisation (%) in ``sample`` (see the module's docstring); None when the sample
    read none of its devices."""
    readings = [r for r in sample.devices if r.uuid in worker.uuids]
    if not readings:
        return None
    utils = [r.utilization_pct for r in readings if r.utilization_pct is not None]
    util = sum(utils) / len(utils) if utils else None
    mine = [p for p in sample.processes if p.uuid in worker.uuids and _owned(p, worker.pid)]
    memory: int | None
    if mine and all(p.memory_used_mb is not None for p in mine):
        memory = sum(p.memory_used_mb for p in mine if p.memory_used_mb is not None)
    elif all(r.memory_used_mb is not None for r in readings):
        memory = sum(r.memory_used_mb for r in readings if r.memory_used_mb is not None)
    else:
        memory = None
    return JobFigures(memory, util)


class GpuStats:
    """The latest sample per device and the running tallies of jobs; told each sample with the workers then."""

    def __init__(self) -> None:
        self._latest: dict[str, DeviceReading] = {}
        self._processes: dict[str, list[tuple[ProcessReading, str | None]]] = {}
        #: when each device's latest reading was taken (wall time)
        self._at: dict[str, float] = {}
        #: why the last sample could not be read ("" when it was)
        self.failure = ""
        self._tallies: dict[str, _Tally] = {}

    def record(self, sample: Sample, workers: Iterable[WorkerAt], at: float) -> None:
        """Take one sample, taken at wall time ``at`` while ``workers`` ran their jobs."""
        self.failure = sample.failure
        if sample.failure:  # every device unknown until NVML answers again: no stale numbers
            self._latest.clear()
            self._processes.clear()
            return
        owners = list(workers)
        for reading in sample.devices:
            self._latest[reading.uuid] = reading
            self._at[reading.uuid] = at
            self._processes[reading.uuid] = []
        for proc in sample.processes:
            owner = next((w.id for w in owners if proc.uuid in w.uuids and _owned(proc, w.pid)), None)
            self._processes.setdefault(proc.uuid, []).append((proc, owner))
        for worker in owners:
            if not worker.jobs:
                continue
            figures = worker_figures(sample, worker)
            if figures is None:
                continue
            for job_id in worker.jobs:
                tally = self._tallies.setdefault(job_id, _Tally())
                if figures.memory_peak_mb is not None:
                    tally.peak_mb = max(tally.peak_mb or 0, figures.memory_peak_mb)
                if figures.utilization_mean_pct is not None:
                    tally.util_sum += figures.utilization_mean_pct
                    tally.util_n += 1

    def settle(self, job_id: str) -> JobFigures | None:
        """The job's figures, forgotten here (it ended); None when no sample saw it run."""
        tally = self._tallies.pop(job_id, None)
        if tally is None or (tally.peak_mb is None and tally.util_n == 0):
            return None
        mean = round(tally.util_sum / tally.util_n, 1) if tally.util_n else None
        return JobFigures(tally.peak_mb, mean)

    def running(self, job_id: str) -> JobFigures | None:
        """The figures of a job still running, so far (what ``settle`` would give now, without forgetting)."""
        tally = self._tallies.get(job_id)
        if tally is None or (tally.peak_mb is None and tally.util_n == 0):
            return None
        return JobFigures(tally.peak_mb, round(tally.util_sum / tally.util_n, 1) if tally.util_n else None)

    def latest(self, uuid: str) -> DeviceReading | None:
        return self._latest.get(uuid)

    def telemetry(self, device: Device) -> dict[str, Any]:
        """A device's telemetry as ``GET /v1/fleet`` shows it: ``status`` ``simulated`` (no telemetry, ever),
        ``unknown`` (with ``detail`` saying why) or ``sampled`` with its figures and processes."""
        if device.simulated:
            return {"status": "simulated", "detail": SIMULATED}
        reading = self._latest.get(device.uuid)
        if reading is None:
            return {"status": "unknown", "detail": f"unknown: {self.failure}" if self.failure else NOT_SAMPLED}
        return {
            "status": "sampled",
            "detail": "",
            "sampledAt": self._at.get(device.uuid),
            "utilizationPct": reading.utilization_pct,
            "memoryUsedMb": reading.memory_used_mb,
            "memoryTotalMb": reading.memory_total_mb,
            "temperatureC": reading.temperature_c,
            "powerW": reading.power_w,
            "processes": [
                {"pid": p.pid, "memoryUsedMb": p.memory_used_mb, "worker": owner}
                for p, owner in self._processes.get(device.uuid, ())
            ],
        }

    def readings(self, devices: Iterable[Device]) -> list[tuple[Device, DeviceReading]]:
        """The real devices among ``devices`` that have a reading, each with its latest: what Prometheus shows."""
        return [(d, r) for d in devices if not d.simulated and (r := self._latest.get(d.uuid)) is not None]


def fold(samples: Iterable[tuple[Sample, Iterable[WorkerAt]]], jobs: Iterable[str]) -> Mapping[str, JobFigures | None]:
    """Each of ``jobs``' figures over ``samples`` (each with the workers at it): ``GpuStats`` run over a recording."""
    stats = GpuStats()
    for number, (sample, workers) in enumerate(samples):
        stats.record(sample, workers, float(number))
    return {job: stats.settle(job) for job in jobs}
