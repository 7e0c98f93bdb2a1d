"""The scaling planner: how many workers each endpoint wants, which to start where, which idle workers give their
devices up, which idle workers stop, and why an endpoint still waits. Pure: it reads the plane's records and the
fleet index, writes neither (the index comes back as it came), and does no I/O; ``ControlPlane`` applies the plan.

The rules (DESIGN §3): endpoints are served oldest waiter first; a worker takes the first candidate, in declared
order, with ``gpu_count`` devices of one model on one node (a CPU worker: the first instance type whose vCPUs and
memory are free on one node), on the nodes the endpoint's filters leave it; an idle worker above its endpoint's
minimum yields its devices (or CPUs) to an endpoint waiting for them; workers still stopping count against
``workers_max``. A single-use endpoint (``spec.single_use``, Runpod's ``@app.task``) wants a worker per job, waiting or
running, and keeps none warm: its minimum and idle timeout are 0 whatever it declares (decision 0111).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from flashpoint.explain import Code, OtherProcess, WaitReason
from flashpoint.fleet.inventory import Holder
from flashpoint.gpus import Candidate, describe
from flashpoint.scheduler.envgate import BUILDING, FAILED, first_line
from flashpoint.scheduler.placement.fit import CpuFit, Fit, NoFit, Yielders, place_endpoint
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.records import EndpointState, Worker, WorkerState
from flashpoint.spec import EndpointSpec, ServerlessScalerType

#: the holder of devices a plan gives a worker it has not started yet (never seen outside ``plan``)
_PLANNED = "(planned)"
#: why ``spec`` may not take ``spec.gpu_count`` devices of ``candidate`` now, on this index (a quota), or None
Limit = Callable[[EndpointSpec, Candidate, FleetIndex], WaitReason | None]


@dataclass(frozen=True, slots=True)
class Start:
    """Start a worker of ``endpoint``: on ``fit``'s devices, or (a ``CpuFit``) on its CPU slot."""

    endpoint: str
    fit: Fit | CpuFit


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Stop idle worker ``worker_id`` (of ``endpoint``): ``for_endpoint`` waits for its devices (an endpoint of this
    plane, or, in words, one of another process: ``endpoint infer of another flashpoint process ...``)."""

    worker_id: str
    endpoint: str
    for_endpoint: str


@dataclass(frozen=True, slots=True)
class Plan:
    starts: tuple[Start, ...]
    reclaims: tuple[Reclaim, ...]
    #: per endpoint, why it does not get every worker it wants (empty: nothing keeps it waiting)
    waiting: Mapping[str, tuple[WaitReason, ...]]


def single_use(spec: EndpointSpec) -> bool:
    """Each worker takes one job and ends with it; a route endpoint serves requests, not jobs, and ignores the flag."""
    return spec.single_use and not spec.serves_routes


def minimum(ep: EndpointState) -> int:
    """The workers the endpoint keeps however idle: its ``workers_min``; none for a single-use endpoint."""
    return 0 if single_use(ep.spec) else ep.spec.workers_min


def desired(ep: EndpointState, live: Sequence[Worker], wall: float, oldest: float | None) -> int:
    """How many live workers the endpoint's scaler wants, clamped to ``[workers_min, workers_max]``.

    ``REQUEST_COUNT`` wants ``ceil((queued + running) / scaler_value)``. ``QUEUE_DELAY`` starts the first worker at
    once, and one more when the oldest queued job (queued at wall time ``oldest``) has waited ``scaler_value``
    seconds and no worker is idle or starting. ``live`` are the endpoint's live workers. For a route endpoint,
    queued means requests held for a worker and running means requests in flight. A single-use endpoint wants
    ``queued + running`` (a worker of its own per job; a spent worker is live until its job ends), capped by
    ``workers_max``, whatever its scaler and minimum.
    """
    spec = ep.spec
    if single_use(spec):
        return min(ep.queued + sum(len(w.jobs) for w in live), spec.workers_max)
    if spec.scaler_type is ServerlessScalerType.REQUEST_COUNT:
        running = sum(len(w.jobs) for w in live) + ep.in_flight
        want = math.ceil((ep.queued + running) / spec.scaler_value)
    else:
        want = len(live)
        if ep.queued:
            starting = any(w.state is WorkerState.STARTING for w in live)
            idle = any(w.state is WorkerState.IDLE for w in live)
            if not live:
                want = 1
            elif not starting and not idle and oldest is not None and wall - oldest >= spec.scaler_value:
                want = len(live) + 1
    return min(max(want, spec.workers_min), spec.workers_max)


def yieldable(worker: Worker, ep: EndpointState, live: int) -> bool:
    """An idle worker may give its devices to another endpoint: ready, no job (no request in flight), its endpoint has
    nothing queued (no request held) and runs more than its minimum of workers (``live`` of them)."""
    return (
        worker.state is WorkerState.IDLE
        and worker.live
        and not worker.jobs
        and not worker.in_flight
        and ep.queued == 0
        and live > minimum(ep)
    )


def serving_order(endpoints: Iterable[EndpointState], oldest: Mapping[str, float]) -> list[EndpointState]:
    """Oldest waiter first (by its oldest queued job); endpoints with nothing queued last, by registration."""

    def key(ep: EndpointState) -> tuple[int, float]:
        queued_at = oldest.get(ep.spec.key)
        return (0, queued_at) if ep.queued and queued_at is not None else (1, ep.registered_at)

    return sorted(endpoints, key=key)


def plan(
    endpoints: Mapping[str, EndpointState],
    index: FleetIndex,
    *,
    now: float,
    wall: float,
    oldest: Mapping[str, float],
    wanted: Mapping[tuple[str, int], OtherProcess] | None = None,
    limit: Limit | None = None,
) -> Plan:
    """The starts and reclaims that give endpoints the workers they want, and the reasons for what they lack.

    ``now`` is monotonic (start back-off), ``wall`` is epoch time and ``oldest[name]`` the wall time the endpoint's
    oldest queued job was queued (the scaler's clock and the serving order). ``wanted`` are devices (by key) another
    flashpoint process waits for (``scheduler/wants.py``): an idle worker above its minimum on one of them yields it,
    once this plane's own endpoints have been served. ``limit`` (the plane's quotas, ``scheduler/quotas.py``) says
    why a candidate of an endpoint may not take devices now, reading the index (the plan's own starts are held there).
    """
    # one pass over the workers: each endpoint's live ones, and those that could yield now (named once per plan,
    # so placement looks at their devices only)
    stopping = WorkerState.STOPPING  # Worker.live, inlined: this pass reads every worker of the fleet
    live_of = {
        name: [w for w in ep.workers.values() if w.state is not stopping and not w.retiring and not w.standby]
        for name, ep in endpoints.items()
    }
    #: live workers per endpoint, less those this plan reclaims
    live = {name: len(found) for name, found in live_of.items()}
    idle = [
        Holder(w.id, w.endpoint)
        for name, found in live_of.items()
        if not endpoints[name].queued and live[name] > minimum(endpoints[name])  # else none of them yields
        for w in found
        if yieldable(w, endpoints[name], live[name])
    ]
    reclaimed: set[str] = set()

    def still_yields(holder: Holder) -> bool:
        owner = endpoints[holder.endpoint]
        return holder.worker_id not in reclaimed and live[holder.endpoint] > minimum(owner)

    p = _Pass(index, now, wall, oldest, Yielders(idle, still_yields), [], [], reclaimed, live, live_of, [], [], limit)
    waiting: dict[str, tuple[WaitReason, ...]] = {}
    try:
        for ep in serving_order(endpoints.values(), oldest):
            waiting[ep.spec.key] = _plan_endpoint(ep, p)
        if wanted:
            _yield_elsewhere(endpoints, wanted, p)
    finally:
        for fit in p.planned:  # the index comes back as it came
            index.release(fit.devices)
        for holder in p.planned_cpus:
            index.nodes.release(holder)
    return Plan(tuple(p.starts), tuple(p.reclaims), waiting)


@dataclass(slots=True)
class _Pass:
    """What one planning pass carries from endpoint to endpoint."""

    index: FleetIndex
    now: float
    wall: float
    oldest: Mapping[str, float]
    may_yield: Callable[[Holder], bool]
    starts: list[Start]
    reclaims: list[Reclaim]
    reclaimed: set[str]
    live: dict[str, int]
    live_of: dict[str, list[Worker]]
    planned: list[Fit]
    #: the holders of the CPU slots planned (one each: a holder reserves one slot)
    planned_cpus: list[Holder]
    limit: Limit | None = None


def _yield_elsewhere(
    endpoints: Mapping[str, EndpointState], wanted: Mapping[tuple[str, int], OtherProcess], p: _Pass
) -> None:
    """Reclaim the idle workers (above their endpoint's minimum, not reclaimed already) that hold a device another
    process waits for."""
    for name, found in p.live_of.items():
        ep = endpoints[name]
        for worker in found:
            if worker.id in p.reclaimed or not yieldable(worker, ep, p.live[name]):
                continue
            process = next((wanted[d.key] for d in worker.devices if d.key in wanted), None)
            if process is None:
                continue
            p.reclaimed.add(worker.id)
            p.live[name] -= 1
            who = f"endpoint {process.endpoint} of {process.label}" if process.endpoint else process.label
            p.reclaims.append(Reclaim(worker.id, name, who))


def _plan_endpoint(ep: EndpointState, p: _Pass) -> tuple[WaitReason, ...]:
    spec = ep.spec
    name, asks = spec.key, spec.describe_gpu()
    waiting: list[WaitReason] = []
    want = desired(ep, p.live_of[name], p.wall, p.oldest.get(name))
    live = p.live[name]
    holding = len(ep.workers)  # stopping workers still hold devices
    staged = ep.staged
    if staged is not None:  # a rollout's standby workers are the next generation's, bounded by its own maximum
        holding -= sum(1 for w in ep.workers.values() if w.standby)
        if staged.draining:  # it retires old workers to make room: none of the old generation replaces them
            want = min(want, live)
    new = 0
    limit = p.limit
    refuse = None if limit is None else (lambda candidate: limit(spec, candidate, p.index))
    while live + new < want:
        if holding + new >= spec.workers_max:
            # workers on their way out still hold devices: an endpoint never holds more than gpu_count x max
            waiting.append(
                WaitReason(
                    asks,
                    Code.MAX_WORKERS,
                    f"{holding - live} worker(s) of this endpoint are stopping; "
                    f"at most {spec.workers_max} may hold devices at once",
                )
            )
            break
        environment = ep.environment
        if environment is not None and environment.state in (BUILDING, FAILED):
            if environment.state == BUILDING:
                waiting.append(WaitReason(asks, Code.BUILDING_ENVIRONMENT, environment.waiting_detail(p.now)))
            else:
                waiting.append(
                    WaitReason(
                        asks,
                        Code.ENVIRONMENT_FAILED,
                        f"its environment failed to build: {first_line(environment.error)}; fix its dependencies, "
                        "or forget the failure with `flashpoint venv prune --failed`",
                    )
                )
            break
        if ep.next_start_at > p.now:
            waiting.append(
                WaitReason(
                    asks,
                    Code.START_BACKOFF,
                    f"{ep.start_failures} worker start(s) failed and {ep.start_losses} starting worker(s) were "
                    f"killed from outside; next attempt in {ep.next_start_at - p.now:.1f}s; "
                    f"last error: {ep.last_start_error or '?'}",
                )
            )
            break
        result = place_endpoint(spec, p.index, p.may_yield, refuse)
        if isinstance(result, NoFit):
            waiting.extend(result.reasons)
            break
        if result.reclaim:
            for holder in result.reclaim:
                p.reclaimed.add(holder.worker_id)
                p.live[holder.endpoint] -= 1
                p.reclaims.append(Reclaim(holder.worker_id, holder.endpoint, name))
            cpu = isinstance(result, CpuFit)
            waiting.append(
                WaitReason(
                    result.request.name if isinstance(result, CpuFit) else describe(result.candidate),
                    Code.CPU_BUSY if cpu else Code.BUSY,
                    f"idle workers of other endpoints are giving their {'CPUs' if cpu else 'devices'} up for this one",
                    tuple(sorted({h.endpoint for h in result.reclaim})),
                )
            )
            break
        if isinstance(result, CpuFit):
            holder = Holder(f"{_PLANNED} {len(p.planned_cpus)}", name)
            p.index.nodes.reserve(result.slot, holder)
            p.planned_cpus.append(holder)
        else:
            p.index.hold(result.devices, Holder(_PLANNED, name))
            p.planned.append(result)
        p.starts.append(Start(name, result))
        new += 1
    if waiting or not ep.queued:
        return tuple(waiting)
    running = [w for w in p.live_of[name] if w.id not in p.reclaimed]
    starting = new > 0 or any(w.state is WorkerState.STARTING for w in running)
    busy = all(w.jobs or w.in_flight or w.state is WorkerState.STARTING for w in running) and any(
        w.jobs or w.in_flight for w in running
    )
    if live + new >= spec.workers_max and busy:
        return (
            WaitReason(
                asks,
                Code.MAX_WORKERS,
                f"all {spec.workers_max} worker(s) allowed are busy; raise workers= to run more at once",
            ),
        )
    if starting:
        return (WaitReason(asks, Code.WORKER_STARTING, "a worker is starting"),)
    if running and all(w.jobs or w.in_flight for w in running):
        unit = "s of queueing" if spec.scaler_type is ServerlessScalerType.QUEUE_DELAY else " jobs per worker"
        return (
            WaitReason(
                asks,
                Code.SCALER,
                f"workers are busy; {spec.scaler_type.value} adds one after {spec.scaler_value}{unit}",
            ),
        )
    return ()


def idle_stops(ep: EndpointState, now: float) -> list[Worker]:
    """Workers above the endpoint's minimum idle for ``idle_timeout`` seconds, longest idle first (a single-use
    endpoint's at once: a worker whose job was cancelled before it took it is not kept warm).

    A worker with jobs still queued is not idle, only between two pulls (or before its first one, when its ping
    arrives before its job-take): stopping it would strand those jobs.
    """
    live = ep.live_workers()
    stops: list[Worker] = []
    floor, timeout = (0, 0.0) if single_use(ep.spec) else (ep.spec.workers_min, ep.spec.idle_timeout_s)
    for worker in sorted(live, key=lambda w: w.idle_since):
        if len(live) - len(stops) <= floor:
            break
        if (
            worker.state is WorkerState.IDLE
            and not worker.jobs
            and not worker.in_flight
            and not ep.queued
            and now - worker.idle_since >= timeout
        ):
            stops.append(worker)
    return stops
