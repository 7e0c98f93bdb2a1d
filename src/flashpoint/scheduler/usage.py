"""Usage: every worker's device time, attributed (decision 0112).

``UsageMeter`` is a collaborator of the control plane, reached through ``PlaneState.usage``. The rooms that change a
worker tell it (``started`` when a worker is recorded with its devices, ``observe`` after a change of state, jobs or
requests in flight, ``gone`` when it is forgotten); it measures each interval on the plane's monotonic clock and
files it under wall time (``clock.time()``), in one of three kinds:

- ``busy``: the worker runs jobs (a route worker: serves requests in flight), its time split equally among the jobs
  it runs, each share under the key that submitted that job (``Job.submitted_by``; "" when none did);
- ``idle``: warm and live but running nothing (a stopping worker without jobs too: it holds its devices until it
  exits);
- ``starting``: started, not yet ready (a cold start: its devices are held all the same).

Each is counted in GPU-seconds (per device held), vCPU-seconds and memory MB-seconds (a CPU worker's reservation; a
GPU worker reserves none), under its endpoint, app (``spec.app``), environment (``spec.app_env``) and model (the GPU
model, or a CPU worker's instance type); "" stands for no app, environment or key.

History is kept in time buckets per (endpoint, app, env, key, model, kind): a minute each for the last 48 hours,
then an hour each, forgotten after 400 days. A window that cuts a bucket counts the share of it that the bucket's
span of use (``first`` to ``last``) has inside the window, so windows are exact to the second at minute bounds and
for use that fills its bucket evenly; the open intervals of live workers are always counted exactly, up to ``now``.

Persistence: what accrued is added to the job store's ``usage`` rows every ``FLUSH_S`` of the plane's clock (and when
the plane closes), in the group commit's transaction. A plane that dies loses at most that much: the open intervals
of a previous process end at its last flush. The meter loads the store's rows when it is built.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from flashpoint.clock import Clock
from flashpoint.errors import BadInputError
from flashpoint.scheduler.records import Worker, WorkerState
from flashpoint.store.usage import Cell, UsageRecord

if TYPE_CHECKING:
    from flashpoint.scheduler.jobbook import JobBook
    from flashpoint.spec import EndpointSpec

__all__ = [
    "BUCKET_S",
    "FLUSH_S",
    "GROUPS",
    "KINDS",
    "Share",
    "UsageMeter",
    "parse_since",
    "summarize",
]

#: the kinds of device time, in the order they are shown
KINDS = ("busy", "idle", "starting")
#: what usage may be grouped by
GROUPS = ("app", "env", "endpoint", "key", "model")
#: the resolution of recent history: one bucket per minute ...
BUCKET_S = 60.0
#: ... for this long, then folded into hour buckets ...
HOUR_S = 3600.0
MINUTES_KEPT_S = 48 * HOUR_S
#: ... which are forgotten after this long
RETENTION_S = 400 * 86400.0
#: seconds of the plane's clock between two writes of what accrued to the store
FLUSH_S = 10.0

_NO_KEY = (("", 1.0),)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": HOUR_S, "d": 86400.0, "w": 7 * 86400.0}


class Share(NamedTuple):
    """Device time of one series inside a window: what the queries sum and group."""

    endpoint: str
    app: str
    env: str
    key: str
    model: str
    kind: str
    gpu_s: float
    vcpu_s: float
    memory_mb_s: float


@dataclass(slots=True, eq=False)
class _Live:
    """A worker the meter measures: its attribution, its rates, and what it has been doing since ``since``."""

    worker: Worker
    endpoint: str
    app: str
    env: str
    model: str
    gpus: int
    vcpus: int
    memory_mb: int
    #: monotonic time up to which its time is filed
    since: float
    kind: str = "starting"
    #: (key, share of the worker's time) for each key it runs jobs of; ("", 1.0) when it runs none
    shares: tuple[tuple[str, float], ...] = _NO_KEY
    #: the key of each job it runs, looked up once
    keys: dict[str, str] = field(default_factory=dict)


class UsageMeter:
    """Every worker's device time on one plane, with its history; see the module's docstring."""

    def __init__(self, clock: Clock, book: JobBook) -> None:
        """``book``: where a job's key is looked up, whose store keeps the history and whose group commit makes it
        durable. The store's rows are loaded now."""
        self._clock = clock
        self._book = book
        self._live: dict[str, _Live] = {}
        #: cell -> [gpu_s, vcpu_s, memory_mb_s, first, last]
        self._cells: dict[Cell, list[float]] = {}
        #: the same, accrued since the last flush
        self._dirty: dict[Cell, list[float]] = {}
        #: bucket starts in order, and the cells starting at each (a window's cells are found by bisection)
        self._starts: list[float] = []
        self._at: dict[float, list[Cell]] = {}
        #: every (endpoint, app, env, model, kind)'s total since the store began, never folded nor forgotten: what
        #: Prometheus' counters show
        self._lifetime: dict[tuple[str, str, str, str, str], list[float]] = {}
        self._next_flush = clock.monotonic() + FLUSH_S
        #: minute buckets before this wall time are folded into hours
        self._folded = 0.0
        for record in book.store.usage():
            self._add(record.cell, record.gpu_s, record.vcpu_s, record.memory_mb_s, record.first, record.last, False)

    # ----------------------------------------------------------------------------------------------------------------
    # what the rooms tell it

    def started(self, worker: Worker, spec: EndpointSpec) -> None:
        """``worker`` of ``spec`` was recorded with its devices (or CPU slot): its time counts from now."""
        first = worker.devices[0] if worker.devices else None
        live = _Live(
            worker,
            endpoint=worker.endpoint,
            app=spec.app or "",
            env=spec.app_env or "",
            model=first.model_name if first is not None else (worker.cpu_instance or "cpu"),
            gpus=len(worker.devices),
            vcpus=len(worker.cpu.cores) if worker.cpu is not None else 0,
            memory_mb=worker.cpu.memory_mb if worker.cpu is not None else 0,
            since=self._clock.monotonic(),
        )
        live.kind, live.shares = self._state(live)
        self._live[worker.id] = live

    def observe(self, worker: Worker) -> None:
        """``worker`` may have changed (its state, its jobs, its requests in flight): what it did until now is filed
        under what it was doing, and it is measured as what it does now. Unknown workers are ignored."""
        live = self._live.get(worker.id)
        if live is None:
            return
        kind, shares = self._state(live)
        if kind != live.kind or shares != live.shares:
            self._accrue(live, self._clock.monotonic(), self._clock.time())
            live.kind, live.shares = kind, shares

    def gone(self, worker: Worker) -> None:
        """``worker`` is forgotten (its process ended, or it was given up): its time ends now."""
        live = self._live.pop(worker.id, None)
        if live is not None:
            self._accrue(live, self._clock.monotonic(), self._clock.time())

    def tick(self, now: float) -> None:
        """The plane's clock turned (``now``: monotonic): flush every ``FLUSH_S``."""
        if now >= self._next_flush:
            self._next_flush = now + FLUSH_S
            self.flush()

    def flush(self) -> None:
        """File every live worker's time up to now and add what accrued since the last flush to the store (durable
        with the group commit); fold minute buckets older than 48 hours into hours, forget those past retention."""
        now, wall = self._clock.monotonic(), self._clock.time()
        for live in self._live.values():
            self._accrue(live, now, wall)
            live.kind, live.shares = self._state(live)  # a change no room told of is caught here
        store = self._book.store
        wrote = bool(self._dirty)
        if wrote:
            store.add_usage(UsageRecord(*cell, *values) for cell, values in self._dirty.items())
            self._dirty.clear()
        cutoff = (wall - MINUTES_KEPT_S) // HOUR_S * HOUR_S
        if cutoff > self._folded:
            self._folded = cutoff
            self._fold(cutoff)
            store.fold_usage(cutoff, HOUR_S)
            store.prune_usage(wall - RETENTION_S)
            wrote = True
        if wrote:
            self._book.commits.soon()

    # ----------------------------------------------------------------------------------------------------------------
    # queries

    def gpu_seconds(
        self,
        *,
        app: str | None = None,
        env: str | None = None,
        key: str | None = None,
        since: float,
        now: float | None = None,
    ) -> float:
        """GPU-seconds held (busy, idle and starting) in the wall-time window ``[since, now]`` (``now``: the clock's
        wall time) by the workers of ``app`` and ``env`` (None: any; "": none); with ``key``, only the busy
        GPU-seconds of that key's jobs. The open intervals of live workers count up to ``now``."""
        total = 0.0
        for share in self.window(since, now):
            if (
                (app is None or share.app == app)
                and (env is None or share.env == env)
                and (key is None or (share.kind == "busy" and share.key == key))
            ):
                total += share.gpu_s
        return total

    def window(self, since: float, now: float | None = None) -> list[Share]:
        """Every series' device time in the wall-time window ``[since, now]``, a share per bucket and per live
        worker's open interval (``summarize`` groups them)."""
        wall = self._clock.time()
        until = wall if now is None else now
        shares = [
            Share(*cell[2:], *(values[i] * fraction for i in range(3)))
            for cell, values, fraction in self._cells_in(since, until)
        ]
        mono = self._clock.monotonic()
        for live in self._live.values():
            begin = wall - (mono - live.since)
            seconds = min(wall, until) - max(begin, since)
            if seconds <= 0:
                continue
            for key, part in live.shares:
                held = seconds * part
                shares.append(
                    Share(
                        live.endpoint,
                        live.app,
                        live.env,
                        key,
                        live.model,
                        live.kind,
                        held * live.gpus,
                        held * live.vcpus,
                        held * live.memory_mb,
                    )
                )
        return shares

    def lifetime(self) -> dict[tuple[str, str, str, str, str], tuple[float, float, float]]:
        """Totals since the store began per (endpoint, app, env, model, kind), live workers' open intervals
        included: what only grows (Prometheus' counters)."""
        totals = {series: (v[0], v[1], v[2]) for series, v in self._lifetime.items()}
        mono = self._clock.monotonic()
        for live in self._live.values():
            seconds = mono - live.since
            if seconds <= 0:
                continue
            series = (live.endpoint, live.app, live.env, live.model, live.kind)
            gpu, vcpu, memory = totals.get(series, (0.0, 0.0, 0.0))
            totals[series] = (
                gpu + seconds * live.gpus,
                vcpu + seconds * live.vcpus,
                memory + seconds * live.memory_mb,
            )
        return totals

    # ----------------------------------------------------------------------------------------------------------------
    # inside

    def _state(self, live: _Live) -> tuple[str, tuple[tuple[str, float], ...]]:
        worker = live.worker
        if worker.jobs:
            known = live.keys
            keys = []
            for job_id in worker.jobs:
                key = known.get(job_id)
                if key is None:
                    job = self._book.find(job_id)
                    key = known[job_id] = (job.submitted_by or "") if job is not None else ""
                keys.append(key)
            if len(known) > len(worker.jobs):
                live.keys = {job_id: known[job_id] for job_id in worker.jobs if job_id in known}
            count = len(keys)
            return "busy", tuple((key, n / count) for key, n in sorted(Counter(keys).items()))
        if worker.in_flight > 0:
            return "busy", _NO_KEY
        if worker.state is WorkerState.STARTING:
            return "starting", _NO_KEY
        return "idle", _NO_KEY

    def _accrue(self, live: _Live, now: float, wall: float) -> None:
        """File ``live``'s time from ``since`` to ``now`` (monotonic), which ended at ``wall``, minute by minute."""
        seconds = now - live.since
        live.since = now
        if seconds <= 0:
            return
        series = (live.endpoint, live.app, live.env, live.model, live.kind)
        total = self._lifetime.setdefault(series, [0.0, 0.0, 0.0])
        total[0] += seconds * live.gpus
        total[1] += seconds * live.vcpus
        total[2] += seconds * live.memory_mb
        begin = wall - seconds
        # ``_add``'s work for both maps, inlined: a long run is one cell per minute (the replays' hottest loop)
        cells, dirty = self._cells, self._dirty
        gpus, vcpus, memory = live.gpus, live.vcpus, live.memory_mb
        endpoint, app, env, model, kind = live.endpoint, live.app, live.env, live.model, live.kind
        while begin < wall:
            start = begin // BUCKET_S * BUCKET_S
            end = min(wall, start + BUCKET_S)
            for key, part in live.shares:
                held = (end - begin) * part
                cell = (start, BUCKET_S, endpoint, app, env, key, model, kind)
                gpu, vcpu, mem = held * gpus, held * vcpus, held * memory
                for target in (cells, dirty):
                    values = target.get(cell)
                    if values is None:
                        target[cell] = [gpu, vcpu, mem, begin, end]
                        if target is cells:
                            self._index(cell)
                        continue
                    values[0] += gpu
                    values[1] += vcpu
                    values[2] += mem
                    if begin < values[3]:
                        values[3] = begin
                    if end > values[4]:
                        values[4] = end
            begin = end

    def _add(self, cell: Cell, gpu: float, vcpu: float, memory: float, first: float, last: float, dirty: bool) -> None:
        targets = (self._cells, self._dirty) if dirty else (self._cells,)
        for cells in targets:
            values = cells.get(cell)
            if values is None:
                cells[cell] = [gpu, vcpu, memory, first, last]
                if cells is self._cells:
                    self._index(cell)
                continue
            values[0] += gpu
            values[1] += vcpu
            values[2] += memory
            values[3] = min(values[3], first)
            values[4] = max(values[4], last)
        if not dirty:  # a row loaded from the store: its totals count since the store began
            total = self._lifetime.setdefault((cell[2], cell[3], cell[4], cell[6], cell[7]), [0.0, 0.0, 0.0])
            total[0] += gpu
            total[1] += vcpu
            total[2] += memory

    def _index(self, cell: Cell) -> None:
        start = cell[0]
        at = self._at.get(start)
        if at is None:
            at = self._at[start] = []
            insort(self._starts, start)
        at.append(cell)

    def _cells_in(self, since: float, until: float) -> Iterator[tuple[Cell, list[float], float]]:
        """The cells whose use falls in ``[since, until]``, each with the share of it inside."""
        starts = self._starts
        for i in range(bisect_left(starts, since - HOUR_S), len(starts)):
            start = starts[i]
            if start > until:
                break
            for cell in self._at[start]:
                values = self._cells[cell]
                fraction = _fraction(values[3], values[4], since, until)
                if fraction > 0:
                    yield cell, values, fraction

    def _fold(self, before: float) -> None:
        """Minute cells that start before ``before`` merged into their hours, in memory as in the store."""
        old = [cell for cell in self._cells if cell[1] < HOUR_S and cell[0] < before]
        if not old:
            return
        for cell in old:
            values = self._cells.pop(cell)
            _, _, endpoint, app, env, key, model, kind = cell
            hour = (cell[0] // HOUR_S * HOUR_S, HOUR_S, endpoint, app, env, key, model, kind)
            known = self._cells.get(hour)
            if known is None:
                self._cells[hour] = values  # indexed below, with the rest
            else:
                known[0] += values[0]
                known[1] += values[1]
                known[2] += values[2]
                known[3] = min(known[3], values[3])
                known[4] = max(known[4], values[4])
        horizon = before - RETENTION_S
        for cell in [c for c in self._cells if c[0] + c[1] <= horizon]:
            del self._cells[cell]
        self._starts = sorted({cell[0] for cell in self._cells})
        self._at = {}
        for cell in self._cells:
            self._at.setdefault(cell[0], []).append(cell)


def _fraction(first: float, last: float, since: float, until: float) -> float:
    """The share of use spread evenly over ``[first, last]`` that falls in ``[since, until]``."""
    if last <= first:
        return 1.0 if since <= first <= until else 0.0
    inside = min(last, until) - max(first, since)
    return 0.0 if inside <= 0 else min(1.0, inside / (last - first))


def summarize(shares: Iterable[Share], by: str) -> list[dict[str, Any]]:
    """Shares grouped by ``by`` (one of ``GROUPS``), largest GPU-seconds first: per group its ``name`` and, in total
    and per kind, ``gpuSeconds``, ``vcpuSeconds`` and ``memoryMbSeconds`` (wire names)."""
    if by not in GROUPS:
        raise BadInputError(f"usage cannot be grouped by {by!r}; use one of {', '.join(GROUPS)}")
    field_index = Share._fields.index(by)
    groups: dict[str, dict[str, list[float]]] = {}
    for share in shares:
        kinds = groups.setdefault(str(share[field_index]), {kind: [0.0, 0.0, 0.0] for kind in KINDS})
        amounts = kinds[share.kind]
        amounts[0] += share.gpu_s
        amounts[1] += share.vcpu_s
        amounts[2] += share.memory_mb_s
    rows = []
    for name, kinds in groups.items():
        row: dict[str, Any] = {"name": name}
        row.update(_amounts([sum(kinds[k][i] for k in KINDS) for i in range(3)]))
        for kind in KINDS:
            row[kind] = _amounts(kinds[kind])
        rows.append(row)
    rows.sort(key=lambda r: (-r["gpuSeconds"], -r["vcpuSeconds"], r["name"]))
    return rows


def _amounts(values: list[float]) -> dict[str, float]:
    # rounded to the millisecond: sums of floats carry noise that would only confuse a reader
    return {
        "gpuSeconds": round(values[0], 3),
        "vcpuSeconds": round(values[1], 3),
        "memoryMbSeconds": round(values[2], 3),
    }


def parse_since(text: str, now: float) -> float:
    """The wall time a ``since`` names: a duration back from ``now`` (``90s``, ``30m``, ``24h``, ``7d``, ``2w``) or
    epoch seconds (``1800000000``)."""
    match = _DURATION.match(text)
    if match is not None:
        return now - float(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise BadInputError(f"since={text!r} is neither a duration (90s, 30m, 24h, 7d, 2w) nor a time in epoch seconds")
    return value
