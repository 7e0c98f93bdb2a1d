"""Invocation traces replayed through the real control plane (``ControlPlane`` on a ``StubBackend`` and a
``FakeClock``) to measure what a keep-warm policy costs: cold starts, the wait they add, and warm-idle GPU-seconds.

Each traffic pattern is one endpoint (one simulated H200, ``workers=(0, 1)``, Flash's ``QUEUE_DELAY``) whose
``idle_timeout`` is the policy's: a number (fixed) or ``"auto"`` (``scheduler/keepwarm.py``). The replay plays the
workers' part: a worker the plane starts is ready ``cold_start()`` seconds later (drawn per start: the bench draws
from measured phases) and then asks for work, as a real worker's long-poll does; a job runs its duration and posts its
result. The clock turns once a second while a worker lives or a job waits, and jumps over quiet stretches (to the
next arrival, or to when an auto window wants a pre-warm).

A job *hit a cold start* when the worker that took it became ready after the job arrived; its added wait is the time
from its arrival to its start. Warm-idle GPU-seconds are the plane's own usage meter's idle time (decision 0112).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashpoint.backends.stub import StubBackend
from flashpoint.clock import FakeClock
from flashpoint.fleet.simulated import parse_fleet
from flashpoint.scheduler import planner
from flashpoint.scheduler.keepwarm import lead_s
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.records import WorkerState
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.simulation.metrics import percentile
from flashpoint.spec import WorkerTarget, build_spec
from flashpoint.store.memory import MemoryJobStore

__all__ = ["POLICIES", "Invocation", "bursty", "periodic", "rare", "replay_invocations", "run_invocations", "spaced"]

#: the keep-warm policies compared: a fixed idle_timeout, or "auto"
POLICIES: dict[str, float | str] = {"fixed 60 s": 60, "fixed 600 s": 600, "auto": "auto"}
TARGET = WorkerTarget(import_path="simulated:invocation")


@dataclass(frozen=True, slots=True)
class Invocation:
    """One call: its endpoint (its traffic pattern), when it arrives and how long it runs (seconds)."""

    endpoint: str
    arrival: float
    duration: float


def periodic(rng: random.Random, *, hours: float, period_s: float, jitter_s: float) -> list[float]:
    """Arrival times every ``period_s`` give or take ``jitter_s`` (a cron-like job, a health probe)."""
    times, t = [], rng.uniform(0, period_s)
    while t < hours * 3600:
        times.append(t)
        t += period_s + rng.uniform(-jitter_s, jitter_s)
    return times


def bursty(
    rng: random.Random, *, hours: float, between_s: float, size: tuple[int, int], within_s: float
) -> list[float]:
    """Bursts ``between_s`` apart on average (exponential gaps), each of ``size`` calls ``within_s`` apart on
    average."""
    times, t = [], rng.expovariate(1 / between_s)
    while t < hours * 3600:
        at = t
        for _ in range(rng.randint(*size)):
            times.append(at)
            at += rng.expovariate(1 / within_s)
        t = at + rng.expovariate(1 / between_s)
    return times


def rare(rng: random.Random, *, hours: float, mean_s: float) -> list[float]:
    """A Poisson stream with a long mean gap (a rarely used endpoint)."""
    times, t = [], rng.expovariate(1 / mean_s)
    while t < hours * 3600:
        times.append(t)
        t += rng.expovariate(1 / mean_s)
    return times


def spaced(times: Sequence[float], *, hours: float) -> list[float]:
    """Given arrival times (a trace's), those in the first ``hours``, sorted, from 0."""
    if not times:
        return []
    first = min(times)
    return sorted(t - first for t in times if t - first < hours * 3600)


@dataclass(slots=True)
class _Call:
    invocation: Invocation
    job_id: str = ""
    started: float | None = None
    cold: bool = False


@dataclass(slots=True)
class _Worker:
    endpoint: str
    ready_at: float
    ready: bool = False
    busy_until: float | None = None
    call: _Call | None = None


@dataclass(slots=True)
class _Run:
    plane: ControlPlane
    clock: FakeClock
    cold_start: Callable[[], float]
    workers: dict[str, _Worker] = field(default_factory=dict)
    calls: dict[str, _Call] = field(default_factory=dict)
    starts: int = 0

    @property
    def now(self) -> float:
        return self.clock.monotonic()

    async def turn(self) -> None:
        """The workers' part at this instant: new workers noted, ready ones ask for work, ended jobs posted."""
        await self.plane.settled()
        changed = True
        while changed:
            changed = False
            for endpoint, ep in self.plane.endpoints.items():
                for worker in list(ep.workers.values()):
                    mine = self.workers.get(worker.id)
                    if mine is None and worker.state is WorkerState.STARTING:
                        self.workers[worker.id] = _Worker(endpoint, self.now + self.cold_start())
                        self.starts += 1
            for worker_id, mine in list(self.workers.items()):
                live = self.plane.workers.get(worker_id)
                if live is None or not live.live:
                    del self.workers[worker_id]
                    continue
                if mine.busy_until is not None and mine.busy_until <= self.now and mine.call is not None:
                    self.plane.done(mine.endpoint, worker_id, mine.call.job_id, {"output": None})
                    mine.busy_until, mine.call = None, None
                    changed = True
                if mine.ready_at <= self.now and mine.busy_until is None:
                    jobs = await self.plane.take(mine.endpoint, worker_id, 1, hold_s=0)
                    first = not mine.ready
                    mine.ready = True
                    for job in jobs:
                        call = self.calls[job["id"]]
                        call.started = self.now
                        call.cold = first and mine.ready_at > call.invocation.arrival
                        mine.call, mine.busy_until = call, self.now + call.invocation.duration
                        changed = True
            await self.plane.settled()

    def quiet(self) -> bool:
        return not self.workers and not any(ep.queued for ep in self.plane.endpoints.values())

    def next_prewarm(self) -> float:
        """The earliest time an auto window wants a worker warmed (inf: none)."""
        soonest = math.inf
        for ep in self.plane.endpoints.values():
            window = planner.keep_window(ep)
            last_end = ep.traffic.last_end
            if window is None or window.prewarm_s is None or last_end is None:
                continue
            due = last_end + window.prewarm_s - lead_s(ep.traffic.cold_start_s())
            if due < last_end + window.keep_s:
                soonest = min(soonest, max(due, self.now))
        return soonest


async def replay_invocations(
    calls: Sequence[Invocation], idle_timeout: float | str, cold_start: Callable[[], float]
) -> dict[str, Any]:
    """Replay ``calls`` with every endpoint's ``idle_timeout`` set to ``idle_timeout``; ``cold_start()`` draws the
    seconds from a worker's start to its readiness. The report, per endpoint and in total: calls, cold starts (and
    their rate), p50/p99 of the wait cold starts added (all calls' waits, a warm call's being 0), warm-idle and
    starting GPU-seconds (a pre-warm's start costs GPU time too), worker starts."""
    clock = FakeClock(monotonic=0.0)
    names = sorted({c.endpoint for c in calls})
    fleet = parse_fleet(";".join(f"{name}-node=NVIDIA_H200:1" for name in names))  # simulated GPUs
    backend = StubBackend(fleet.devices, nodes=fleet.node_facts)
    plane = ControlPlane(MemoryJobStore(), backend, worker_secret="invocations", settings=PlaneSettings(), clock=clock)
    await plane.start(ticking=False)
    for name in names:
        spec = build_spec({"name": name, "gpu": "NVIDIA H200", "workers": (0, 1), "idle_timeout": idle_timeout})
        plane.register(spec, TARGET)
    run = _Run(plane, clock, cold_start)
    pending = sorted(calls, key=lambda c: c.arrival)
    k = 0
    try:
        while k < len(pending) or not run.quiet() or any(c.started is None for c in run.calls.values()):
            now = run.now
            while k < len(pending) and pending[k].arrival <= now:
                job = plane.submit(pending[k].endpoint, {})
                run.calls[job.id] = _Call(pending[k], job.id)
                k += 1
            plane.tick()
            await run.turn()
            if k >= len(pending) and run.quiet():
                break
            step = 1.0
            if run.quiet():
                following = pending[k].arrival if k < len(pending) else math.inf
                step = max(1.0, min(following, run.next_prewarm()) - now)
                if math.isinf(step):
                    break
            clock.advance(step)
    finally:
        plane.usage.flush()
        meter: dict[tuple[str, str], float] = {}
        for (endpoint, _, _, _, kind), (gpu, _, _) in plane.usage.lifetime().items():
            meter[(endpoint, kind)] = meter.get((endpoint, kind), 0.0) + gpu
        await plane.close()
    report: dict[str, Any] = {"endpoints": {}}
    groups: list[str | None] = [*names, None]
    for group in groups:
        mine = [c for c in run.calls.values() if group is None or c.invocation.endpoint == group]
        waits = [c.started - c.invocation.arrival if c.cold and c.started is not None else 0.0 for c in mine]
        cold = sum(1 for c in mine if c.cold)
        figures = {
            "calls": len(mine),
            "cold_starts": cold,
            "cold_start_rate": cold / len(mine) if mine else None,
            "cold_wait_s": {"p50": percentile(waits, 0.5), "p99": percentile(waits, 0.99)} if waits else None,
            "idle_gpu_s": _total(meter, "idle", group),
            "starting_gpu_s": _total(meter, "starting", group),
            "unfinished": sum(1 for c in mine if c.started is None),
        }
        if group is None:
            report.update(figures, starts=run.starts)
        else:
            report["endpoints"][group] = figures
    return report


def _total(meter: dict[tuple[str, str], float], kind: str, endpoint: str | None) -> float:
    """GPU-seconds of ``kind`` (the usage meter's: busy, idle, starting) of one endpoint, or all (None)."""
    return sum(gpu for (name, k), gpu in meter.items() if k == kind and endpoint in (None, name))


def run_invocations(
    calls: Sequence[Invocation], idle_timeout: float | str, cold_start: Callable[[], float]
) -> dict[str, Any]:
    """``replay_invocations`` in a fresh event loop (the bench's and the tests' way in)."""
    return asyncio.run(replay_invocations(calls, idle_timeout, cold_start))
