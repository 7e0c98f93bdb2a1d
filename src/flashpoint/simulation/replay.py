"""A trace replayed through the real control plane: ``ControlPlane`` on a ``StubBackend`` and a ``FakeClock``.

How a trace maps onto the plane (docs/decisions/0114-simulate.md):

- a task is one job of a **single-use endpoint** (decision 0111: a worker per job, none kept warm); tasks of the same
  shape (GPU count, candidate models, priority class, app) share one endpoint, registered on first use with
  ``workers_max`` as many as the fleet could hold, its ``priority`` the task's class and, with priorities, the ``low``
  class ``preemptible``; the plane's ``placement_policy`` is the replay's policy;
- the replay plays the workers' part through the plane's own verbs: it submits a task's job, lets the plane reconcile
  (its ``kick``, coalesced: one reconcile per simulated instant, whatever happened at it), and each worker the plane
  started takes its job (``take``); when the fake clock reaches the job's end the worker posts its result (``done``),
  and the plane stops it, a normal stop, its devices freed when the stub's process exits;
- a worker that exits before its job ended (preempted, lost) puts the job back in the queue: it runs again, whole,
  when a worker takes it again; every such exit is a preemption in the figures.

Every worker start is checked as the backend sees it, independently of placement (``Checker``): the devices are the
fleet's, of one node and one model, as many as asked, of a model among the request's candidates, and none held by
another worker still running. A violation raises ``PlacementViolation`` at once.

Two modes. ``fill`` (the FGD paper's method, USENIX ATC '23): tasks arrive in trace order, one instant each, and
never leave, until the GPUs asked for reach the fleet's; it reports the shares allocated and placed at 50/80/90/100%
of the fleet asked for, and the share asked for when a request was first left waiting. ``timed``: tasks drawn with
``random.Random(seed)`` from the trace's tasks that have a duration, durations capped at the trace's 99th percentile,
arriving as a Poisson stream whose rate makes the offered demand ``load`` times the fleet (Little's law: rate =
load x GPUs / E[gpus x duration]); at least 30,000 arrivals, the first third a warm-up left out of the figures.

Tasks no node of the fleet could ever hold (too many GPUs, or no candidate model in the fleet) are left out and
counted (``left_out.never_fits``): they would wait forever and say so (``not_in_fleet``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import math
import random
import signal
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashpoint.backends.base import ExitCallback, Launch, LineCallback, Started
from flashpoint.backends.stub import StubBackend
from flashpoint.clock import FakeClock
from flashpoint.errors import ConfigError
from flashpoint.fleet.inventory import Device
from flashpoint.gpus import GpuGroup, GPUModel
from flashpoint.jobs import JobStatus, JobView
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.simulation.fleets import SimFleet, resolve_models
from flashpoint.simulation.metrics import CHECKPOINTS, TimeWeighted, percentile, wait_summary, waits_by
from flashpoint.simulation.traces import Task, Trace
from flashpoint.spec import APP_NAME, WorkerTarget, build_spec
from flashpoint.store.memory import MemoryJobStore

__all__ = [
    "MIN_ARRIVALS",
    "MODES",
    "POLICIES",
    "Checker",
    "PlacementViolation",
    "ReplayOptions",
    "ReplayStuck",
    "Shape",
    "replay",
    "run_replay",
]

MODES = ("fill", "timed")
POLICIES = ("first", "pack", "spread")
#: a timed replay is at least this many arrivals (issue 24)
MIN_ARRIVALS = 30_000
#: the share of a timed replay's arrivals left out of its figures, as a warm-up
WARMUP = 1 / 3
#: what the plane would run; nothing runs it (the stub starts no process)
TARGET = WorkerTarget(import_path="flashpoint.simulation.replay:no_code")
#: the app environment of an endpoint whose tasks name an app
APP_ENV = "sim"
#: the app key of tasks that name none, in ``usage_by_app``
NO_APP = "(none)"


class PlacementViolation(AssertionError):
    """A worker was started on devices its request or the fleet does not allow: a bug of the plane, not the trace's."""


class ReplayStuck(RuntimeError):
    """The plane started and stopped workers at one simulated instant without end (a livelock): a bug of the plane."""


@dataclass(frozen=True, slots=True)
class Shape:
    """What a request asks for: ``gpus`` devices of one node, of one of ``candidates`` (empty: any model)."""

    gpus: int
    candidates: tuple[GPUModel, ...]
    priority: str
    app: str | None


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    mode: str = "fill"
    #: the plane's own default (best fit)
    policy: str = "pack"
    #: timed mode: offered demand as a share of the fleet
    load: float = 0.9
    seed: int = 0
    #: timed mode: how many tasks arrive
    arrivals: int = MIN_ARRIVALS
    #: the trace's classes as priorities (False: every task "normal"); for the report (the trace was read so)
    priorities: bool = True

    def check(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.policy not in POLICIES:
            raise ConfigError(f"--policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if not (math.isfinite(self.load) and self.load > 0):
            raise ConfigError(f"--load must be a number > 0, got {self.load!r}")
        if self.arrivals < 3:
            raise ConfigError(f"a timed replay needs at least 3 arrivals, got {self.arrivals}")


class Checker:
    """The independent check of every worker start against the fleet and the request (this module's docstring)."""

    def __init__(self, devices: Sequence[Device]) -> None:
        self._fleet = {d.key: d for d in devices}
        #: device key -> the worker holding it
        self._holder: dict[tuple[str, int], str] = {}
        self._held: dict[str, tuple[Device, ...]] = {}
        #: starts checked
        self.checked = 0

    @property
    def held(self) -> int:
        """Devices held by workers still running."""
        return len(self._holder)

    def start(self, worker_id: str, devices: Sequence[Device], shape: Shape) -> None:
        def bad(why: str) -> PlacementViolation:
            where = ", ".join(f"{d.node}:{d.index} ({d.model_name})" for d in devices) or "no device"
            return PlacementViolation(f"worker {worker_id} was started on {where}: {why}")

        if len(devices) != shape.gpus:
            raise bad(f"{len(devices)} device(s), the request asks for {shape.gpus}")
        for device in devices:
            if self._fleet.get(device.key) != device:
                raise bad(f"{device.node}:{device.index} is not that device of the fleet")
            holder = self._holder.get(device.key)
            if holder is not None:
                raise bad(f"{device.node}:{device.index} is held by worker {holder}, still running")
        if len({d.node for d in devices}) != 1:
            raise bad("the devices are on several nodes")
        if len({d.model_name for d in devices}) != 1:
            raise bad("the devices are of several models")
        if shape.candidates and devices[0].model not in shape.candidates:
            names = " > ".join(m.name for m in shape.candidates)
            raise bad(f"{devices[0].model_name} is not among the request's candidates ({names})")
        for device in devices:
            self._holder[device.key] = worker_id
        self._held[worker_id] = tuple(devices)
        self.checked += 1

    def exit(self, worker_id: str) -> None:
        for device in self._held.pop(worker_id, ()):
            del self._holder[device.key]


class ReplayBackend(StubBackend):
    """The stub backend, with every start checked (``Checker``) and each start and exit told to the replay."""

    def __init__(
        self,
        fleet: SimFleet,
        checker: Checker,
        shape_of: Callable[[str], Shape],
        exited: Callable[[str], None],
    ) -> None:
        super().__init__(fleet.devices, nodes=fleet.nodes)
        self._checker = checker
        self._shape_of = shape_of
        self._exited = exited
        #: workers started since the replay last looked, in start order
        self.fresh: list[tuple[str, str]] = []
        #: starts since the replay last looked, and the most one instant may see before the replay calls it stuck
        self.starts = 0
        self.most_starts = 2 * len(fleet.devices) + 100
        #: set when ``most_starts`` is passed, or a start broke the rules (``violation``)
        self.stuck = asyncio.Event()
        self.violation: PlacementViolation | None = None

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> Started:
        try:
            self._checker.start(launch.worker_id, launch.devices, self._shape_of(launch.endpoint))
        except PlacementViolation as exc:  # raised in the plane's start task: the replay raises it (``settle``)
            self.violation = exc
            self.stuck.set()
            raise
        started = await super().start(launch, on_line, on_exit)
        self.fresh.append((launch.endpoint, launch.worker_id))
        self.starts += 1
        if self.starts > self.most_starts:
            self.stuck.set()
        return started

    def exit(self, worker_id: str, code: int, cause: str = "") -> None:
        worker = self.workers.get(worker_id)
        if worker is None or not worker.running:
            return
        self._checker.exit(worker_id)
        self._exited(worker_id)
        super().exit(worker_id, code, cause)
        del self.workers[worker_id]  # a replay's workers never come back: memory stays flat over 30,000 of them

    async def close(self) -> None:
        self.closed = True
        for worker_id in list(self.workers):  # exit forgets them as it goes
            self.exit(worker_id, -signal.SIGTERM)


@dataclass(slots=True, eq=False)
class _Run:
    """One task's job through the replay."""

    task: Task
    shape: Shape
    endpoint: str
    arrival: float
    #: counted in the figures (timed mode: not in the warm-up)
    measured: bool = True
    job_id: str = ""
    queued_since: float = 0.0
    #: seconds spent queued so far, over every attempt
    waited: float = 0.0
    #: the worker running it now (None: queued, or ended)
    worker: str | None = None
    #: bumped when an attempt ends early, so its scheduled end is ignored
    attempt: int = 0
    started: bool = False
    ended: bool = False
    failed: bool = False
    duration: float = 0.0


@dataclass(slots=True)
class _Figures:
    preemptions: int = 0
    measured_preemptions: int = 0
    failed: int = 0
    idle_starts: int = 0
    settles: int = 0
    by_app: dict[str, int] = field(default_factory=dict)


class _Replay:
    """The plane, the backend, the clock and the bookkeeping of one replay."""

    def __init__(self, fleet: SimFleet, options: ReplayOptions, *, max_queued: int) -> None:
        self.fleet = fleet
        self.options = options
        self.clock = FakeClock()
        self.now = 0.0
        self.checker = Checker(fleet.devices)
        self.backend = ReplayBackend(fleet, self.checker, self._shape_of, self._exited)
        settings = PlaneSettings(placement_policy=options.policy, max_queued_jobs=max_queued, max_queued_bytes=1 << 40)
        self.plane = ControlPlane(
            MemoryJobStore(), self.backend, worker_secret="replay", settings=settings, clock=self.clock
        )
        self._classes = settings.priority_classes
        self._endpoints: dict[Shape, str] = {}
        self._shapes: dict[str, Shape] = {}
        self._fits = _largest_groups(fleet.devices)
        self._models = fleet.models
        self.runs: dict[str, _Run] = {}
        self.running: dict[str, _Run] = {}
        self.ends: list[tuple[float, int, int, _Run]] = []
        self._seq = 0
        self.queued = 0
        self.allocated = 0
        self.figures = _Figures()
        self.window: TimeWeighted | None = None

    async def open(self) -> None:
        await self.plane.start(ticking=False)
        self.plane.listen(self._ended)

    async def close(self) -> None:
        await self.plane.close()

    # shapes and endpoints

    def shape(self, task: Task) -> Shape:
        return Shape(task.gpus, resolve_models(task.candidates, self._models), task.priority, task.app)

    def fits(self, shape: Shape) -> bool:
        """Whether some node of the fleet has ``shape.gpus`` devices of one of its candidates (any model: of one)."""
        if not shape.candidates:
            return max(self._fits.values(), default=0) >= shape.gpus
        return any(self._fits.get(m.name, 0) >= shape.gpus for m in shape.candidates)

    def _shape_of(self, endpoint: str) -> Shape:
        return self._shapes[endpoint]

    def endpoint(self, shape: Shape) -> str:
        key = self._endpoints.get(shape)
        if key is not None:
            return key
        if shape.priority not in self._classes:
            known = ", ".join(self._classes)
            raise ConfigError(f"the trace's class {shape.priority!r} is no priority class; the plane knows {known}")
        if shape.app is not None and not APP_NAME.fullmatch(shape.app):
            raise ConfigError(f"the trace's app {shape.app!r} is not an app name (letters, digits, '_' and '-')")
        name = f"g{shape.gpus}-{shape.priority}-{len(self._endpoints)}"
        spec = build_spec(
            {
                "name": name,
                "gpu": list(shape.candidates) or GpuGroup.ANY,
                "gpu_count": shape.gpus,
                "workers": (0, max(1, self.fleet.gpus // shape.gpus)),
                "idle_timeout": 0,
                "priority": shape.priority,
                # the lowest class gives way to the others when it must (only with priorities: else all are "normal")
                "preemptible": self.options.priorities and shape.priority == "low",
            }
        )
        spec = dataclasses.replace(spec, single_use=True, app=shape.app, app_env=APP_ENV if shape.app else None)
        self.plane.register(spec, TARGET)
        self._endpoints[shape] = spec.key
        self._shapes[spec.key] = shape
        return spec.key

    # the events

    def advance(self, t: float) -> None:
        """Move the clock to ``t``; the state since the last instant held until then."""
        if self.window is not None and t > self.now:
            values = {"allocated": float(self.allocated), "stranded": 0.0}
            if self.queued:
                values["stranded"] = float(self.fleet.gpus - self.allocated)
            for app, gpus in self.figures.by_app.items():
                values[f"app:{app}"] = float(gpus)
            self.window.hold(values, self.now, t)
        if t > self.now:
            self.clock.advance(t - self.now)
            self.now = t

    def submit(self, run: _Run) -> None:
        job = self.plane.submit(run.endpoint, {})
        run.job_id = job.id
        run.queued_since = self.now
        self.runs[job.id] = run
        self.queued += 1

    def end_due(self) -> None:
        """Post the result of every job whose end has come (the worker's part)."""
        ends = self.ends
        while ends and ends[0][0] <= self.now:
            _, _, attempt, run = heapq.heappop(ends)
            worker = run.worker
            if attempt != run.attempt or worker is None:
                continue  # that attempt was cut short
            self._stopped(run)
            run.ended = True
            self.plane.done(run.endpoint, worker, run.job_id, {"output": None})

    async def settle(self) -> None:
        """Let the plane reconcile (once, whatever happened at this instant) and apply it; each worker it started
        takes its job."""
        self.figures.settles += 1
        backend = self.backend
        backend.starts = 0
        settled = asyncio.ensure_future(self.plane.settled())
        stuck = asyncio.ensure_future(backend.stuck.wait())
        await asyncio.wait((settled, stuck), return_when=asyncio.FIRST_COMPLETED)
        stuck.cancel()
        if backend.violation is not None:
            settled.cancel()
            raise backend.violation
        if not settled.done():  # the plane reconciles again and again: a replay cannot go on from here
            settled.cancel()
            raise ReplayStuck(
                f"at {self.now:.1f} s the plane started {backend.starts} workers in one instant without settling "
                f"(a start-and-preempt loop?); endpoints: {self._queues()}"
            )
        fresh = self.backend.fresh
        while fresh:
            started, self.backend.fresh = fresh, []
            for endpoint, worker_id in started:
                jobs = await self.plane.take(endpoint, worker_id, 1, hold_s=0)
                if not jobs:
                    self.figures.idle_starts += 1
                for payload in jobs:
                    self._started(self.runs[payload["id"]], worker_id)
            fresh = self.backend.fresh

    def _queues(self) -> str:
        return "; ".join(f"{key} {ep.queued} queued" for key, ep in self.plane.endpoints.items() if ep.queued)

    def _started(self, run: _Run, worker_id: str) -> None:
        if run.worker is not None:  # the plane handed it out again before its last worker exited
            self._interrupted(run)
        run.worker = worker_id
        run.started = True
        run.waited += self.now - run.queued_since
        self.queued -= 1
        self.running[worker_id] = run
        self.allocated += run.shape.gpus
        app = run.shape.app or NO_APP
        self.figures.by_app[app] = self.figures.by_app.get(app, 0) + run.shape.gpus
        self._seq += 1
        heapq.heappush(self.ends, (self.now + run.duration, self._seq, run.attempt, run))

    def _stopped(self, run: _Run) -> None:
        """The run's attempt is over (ended, or cut short): its devices count as free from now."""
        assert run.worker is not None
        del self.running[run.worker]
        run.worker = None
        self.allocated -= run.shape.gpus
        self.figures.by_app[run.shape.app or NO_APP] -= run.shape.gpus

    def _interrupted(self, run: _Run) -> None:
        self._stopped(run)
        run.attempt += 1
        run.queued_since = self.now
        self.queued += 1
        self.figures.preemptions += 1
        if self.window is not None and self.now >= self.window.start:
            self.figures.measured_preemptions += 1

    def _exited(self, worker_id: str) -> None:
        run = self.running.get(worker_id)
        if run is not None and not run.ended:  # its job had not ended: it goes back to its queue
            self._interrupted(run)

    def _ended(self, view: JobView) -> None:
        run = self.runs.get(view.id)
        if run is None or view.status is JobStatus.COMPLETED:
            return
        if not run.ended and run.worker is None:  # failed (a worker lost twice) or cut short while queued
            run.failed = run.ended = True
            self.queued -= 1
            self.figures.failed += 1

    def leftovers(self) -> dict[str, int]:
        return {"failed": self.figures.failed, "idle_starts": self.figures.idle_starts}


def _largest_groups(devices: Sequence[Device]) -> dict[str, int]:
    """Per model name, the most devices of it on one node."""
    counts: dict[tuple[str, str], int] = {}
    for device in devices:
        key = (device.node, device.model_name)
        counts[key] = counts.get(key, 0) + 1
    largest: dict[str, int] = {}
    for (_, model), count in counts.items():
        largest[model] = max(largest.get(model, 0), count)
    return largest


async def replay(fleet: SimFleet, trace: Trace, options: ReplayOptions) -> dict[str, Any]:
    """Replay ``trace`` on ``fleet`` as ``options`` say; returns the report (the keys of ``flashpoint simulate
    --json``).

    Raises:
        ConfigError: bad options, or a timed replay of a trace without durations.
        PlacementViolation: a worker was started where it must not be.
    """
    options.check()
    began = time.perf_counter()
    max_queued = max(len(trace.tasks), options.arrivals) + 1
    sim = _Replay(fleet, options, max_queued=max_queued)
    await sim.open()
    try:
        if options.mode == "fill":
            report = await _fill(sim, trace)
        else:
            report = await _timed(sim, trace)
    finally:
        await sim.close()
    head = {
        "policy": options.policy,
        "mode": options.mode,
        "seed": options.seed,
        "priorities": options.priorities,
        "gpus": fleet.gpus,
        "nodes": len({d.node for d in fleet.devices}),
        "fractional_as_whole": trace.fractional_as_whole,
    }
    head.update(report)
    head["checked_starts"] = sim.checker.checked
    head["reconciles"] = sim.figures.settles
    head.update(sim.leftovers())
    head["wall_s"] = round(time.perf_counter() - began, 3)
    return head


def run_replay(fleet: SimFleet, trace: Trace, options: ReplayOptions) -> dict[str, Any]:
    """``replay`` on an event loop of its own."""
    return asyncio.run(replay(fleet, trace, options))


def _usable(sim: _Replay, tasks: Sequence[Task]) -> tuple[list[tuple[Task, Shape]], int]:
    """The tasks some node could hold, with their shapes, and how many could never be placed."""
    usable: list[tuple[Task, Shape]] = []
    shapes: dict[Task, Shape] = {}
    never = 0
    for task in tasks:
        shape = shapes.get(task) or shapes.setdefault(task, sim.shape(task))
        if sim.fits(shape):
            usable.append((task, shape))
        else:
            never += 1
    return usable, never


async def _fill(sim: _Replay, trace: Trace) -> dict[str, Any]:
    usable, never = _usable(sim, trace.tasks)
    fleet_gpus = sim.fleet.gpus
    asked = arrived = 0
    first_refusal: float | None = None
    allocated_at: dict[str, float | None] = dict.fromkeys(map(str, CHECKPOINTS))
    placed_at: dict[str, float | None] = dict.fromkeys(map(str, CHECKPOINTS))
    for task, shape in usable:
        if asked >= fleet_gpus:
            break
        run = _Run(task, shape, sim.endpoint(shape), arrival=sim.now + 1.0, duration=math.inf)
        sim.advance(run.arrival)  # an instant of its own: in trace order, one at a time
        sim.submit(run)
        await sim.settle()
        arrived += 1
        asked += task.gpus
        if not run.started and first_refusal is None:
            first_refusal = asked / fleet_gpus
        for point in CHECKPOINTS:
            key = str(point)
            if allocated_at[key] is None and asked * 100 >= point * fleet_gpus:
                allocated_at[key] = round(sim.allocated / fleet_gpus, 4)
                placed_at[key] = round(len(sim.running) / arrived, 4)
    if sim.checker.held != sim.allocated:
        raise PlacementViolation(f"the backend's workers hold {sim.checker.held} GPUs, the jobs {sim.allocated}")
    return {
        "tasks": arrived,
        "placed": len(sim.running),
        "allocated_at": allocated_at,
        "placed_at": placed_at,
        "first_refusal_at": None if first_refusal is None else round(first_refusal, 4),
        "asked_gpus": asked,
        "preemptions": sim.figures.preemptions,
        "left_out": _left_out(trace, never),
    }


def _left_out(trace: Trace, never: int) -> dict[str, int]:
    return {"cpu_only": trace.cpu_only, "fractional": trace.fractional_skipped, "never_fits": never}


async def _timed(sim: _Replay, trace: Trace) -> dict[str, Any]:
    options = sim.options
    usable, never = _usable(sim, trace.tasks)
    pool = [(task, shape) for task, shape in usable if task.duration_s is not None]
    if not pool:
        raise ConfigError(
            "a timed replay draws durations from the trace, and this one has none (multigpu50 has no times: "
            "replay it with --mode fill)"
        )
    durations = [task.duration_s for task, _ in pool if task.duration_s is not None]
    cap = percentile(durations, 0.99)
    assert cap is not None
    demand = statistics.fmean(task.gpus * min(d, cap) for (task, _), d in zip(pool, durations, strict=True))
    if demand <= 0:
        raise ConfigError("the trace's durations are all 0: no load can be offered with them")
    rate = options.load * sim.fleet.gpus / demand  # Little's law: busy GPUs = rate x E[gpus x duration]
    rng = random.Random(options.seed)
    arrivals: list[_Run] = []
    t = 0.0
    for number in range(options.arrivals):
        t += rng.expovariate(rate)
        task, shape = pool[rng.randrange(len(pool))]
        assert task.duration_s is not None
        run = _Run(task, shape, sim.endpoint(shape), arrival=t, duration=min(task.duration_s, cap))
        run.measured = number >= int(options.arrivals * WARMUP)
        arrivals.append(run)
    # the stream's steady state at t=0 (an M/G/inf population: rate x E[duration] jobs, picked in proportion to their
    # duration, each with a uniform share of it left): with durations up to the cap (41 h in openb) the stream alone
    # would take longer than 30,000 arrivals to offer its load; these jobs are part of the warm-up
    durations = [run.duration for run in arrivals]
    population = round(rate * statistics.fmean(durations))
    for run in rng.choices(arrivals, weights=durations, k=population):
        initial = _Run(run.task, run.shape, run.endpoint, arrival=0.0, measured=False)
        initial.duration = rng.uniform(0.0, run.duration)
        sim.submit(initial)
    if population:
        await sim.settle()
    first = next(r for r in arrivals if r.measured)
    await _stream(sim, arrivals, TimeWeighted(first.arrival, arrivals[-1].arrival))
    return {
        "tasks": len(arrivals),
        "placed": sum(1 for r in arrivals if r.started),
        "load": options.load,
        "rate_per_s": round(rate, 6),
        "duration_cap_s": cap,
        "initial_jobs": population,
        **_stream_figures(sim, arrivals),
        "left_out": _left_out(trace, never),
    }


async def _stream(sim: _Replay, arrivals: Sequence[_Run], window: TimeWeighted) -> None:
    """Submit ``arrivals`` at their times and end each job ``duration`` after it started, until every one started;
    the figures count over ``window``."""
    sim.window = window
    ends = sim.ends
    k = 0
    while k < len(arrivals) or sim.queued:
        next_end = ends[0][0] if ends else math.inf
        t = arrivals[k].arrival if k < len(arrivals) else math.inf
        t = min(t, next_end)
        if t == math.inf:
            break  # queued jobs that nothing will ever end for (cannot happen: every task fits the fleet)
        sim.advance(t)
        sim.end_due()
        arrived = False
        while k < len(arrivals) and arrivals[k].arrival <= t:
            sim.submit(arrivals[k])
            k += 1
            arrived = True
        # a job's end matters at once only when someone waits: otherwise its worker's stop is applied (and its
        # devices freed) at the next instant that reconciles, before anything is placed
        if arrived or sim.queued:
            await sim.settle()


def _stream_figures(sim: _Replay, arrivals: Sequence[_Run]) -> dict[str, Any]:
    window = sim.window
    assert window is not None
    measured = [r for r in arrivals if r.measured and r.started]
    usage = {
        app.removeprefix("app:"): round(window.integral(app) / 3600, 3)
        for app in sorted(window.sums)
        if app.startswith("app:")
    }
    allocation = window.mean("allocated")
    stranded = window.mean("stranded")
    return {
        "simulated_s": round(sim.now, 1),
        "measured_s": round(window.end - window.start, 1),
        "gpu_allocation_mean": None if allocation is None else round(allocation / sim.fleet.gpus, 4),
        "stranded_gpu_fraction_mean": None if stranded is None else round(stranded / sim.fleet.gpus, 4),
        "wait_s": wait_summary([r.waited for r in measured]),
        "wait_s_by_gpus": waits_by((str(r.shape.gpus), r.waited) for r in measured),
        "wait_s_by_class": waits_by((r.shape.priority, r.waited) for r in measured),
        "preemptions": sim.figures.measured_preemptions,
        "usage_gpu_hours_by_app": usage,
    }


async def replay_as_written(fleet: SimFleet, trace: Trace, options: ReplayOptions) -> dict[str, Any]:
    """The trace's own tasks at their own arrival times, each holding its devices its own duration (none: 0 s), all
    measured: the timed mode's engine without its draws, for traces written by hand (tests, flashpoint's format)."""
    options.check()
    sim = _Replay(fleet, options, max_queued=len(trace.tasks) + 1)
    await sim.open()
    try:
        usable, never = _usable(sim, trace.tasks)
        arrivals = [
            _Run(task, shape, sim.endpoint(shape), arrival=task.arrival_s or 0.0, duration=task.duration_s or 0.0)
            for task, shape in sorted(usable, key=lambda pair: pair[0].arrival_s or 0.0)
        ]
        window = TimeWeighted(0.0, math.inf)
        await _stream(sim, arrivals, window)
        while sim.ends:  # the window runs to the last end
            sim.advance(sim.ends[0][0])
            sim.end_due()
        window.end = sim.now
    finally:
        await sim.close()
    return {
        "tasks": len(arrivals),
        "placed": sum(1 for r in arrivals if r.started),
        "waits": [r.waited for r in arrivals],
        **_stream_figures(sim, arrivals),
        "checked_starts": sim.checker.checked,
        "left_out": _left_out(trace, never),
    }
