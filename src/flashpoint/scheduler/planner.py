"""The scaling planner: how many workers each endpoint wants, which to start where, which idle workers give their
devices up, which idle workers stop, and why an endpoint still waits. Pure: it reads the plane's records and the
fleet index, writes neither (the index comes back as it came), and does no I/O; ``ControlPlane`` applies the plan.

The rules (DESIGN §3, §11): endpoints take turns, one worker a turn, in the order ``turn_key`` gives: the higher
priority class first (an endpoint whose queued jobs are all low-priority waits as the lowest class), then the app
furthest below its weighted share of the fleet (devices held over its weight), then the oldest waiter; a worker takes
the first candidate, in declared order, with ``gpu_count`` devices of one model on one node (a CPU worker: the first
instance type whose vCPUs and memory are free on one node), on the nodes the endpoint's filters leave it, the node
chosen by the placement policy (``pack``, ``spread``; ``placement/fit.py``); an idle worker above its endpoint's
minimum yields its devices (or CPUs) to an endpoint waiting for them, a lower class's first; when nothing fits, the
live workers of lower-class ``preemptible`` queue endpoints may be preempted (a last resort: ``Preempt``), and the
devices they free are counted for the endpoint they were preempted for while they stop; workers still stopping count
against ``workers_max``. A single-use endpoint (``spec.single_use``, Runpod's ``@app.task``) wants a worker per job,
waiting or running, and keeps none warm: its minimum and idle timeout are 0 whatever it declares (decision 0111).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from flashpoint.explain import Code, OtherProcess, WaitReason
from flashpoint.fleet.inventory import Holder
from flashpoint.gpus import ANY_GPU, Candidate, describe
from flashpoint.scheduler import keepwarm, scalers
from flashpoint.scheduler.envgate import BUILDING, FAILED, first_line
from flashpoint.scheduler.placement.fit import CpuFit, Fit, NoFit, Yielders, place_endpoint
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.records import Census, EndpointState, Worker, WorkerState
from flashpoint.spec import PRIORITY_CLASSES, EndpointSpec, ServerlessScalerType

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
class Preempt:
    """Stop live worker ``worker_id`` of preemptible ``endpoint`` (a lower class) for ``for_endpoint``: told to stop,
    killed after the plane's grace period; its jobs go back to their queue (``preempted``)."""

    worker_id: str
    endpoint: str
    for_endpoint: str


@dataclass(frozen=True, slots=True)
class Plan:
    starts: tuple[Start, ...]
    reclaims: tuple[Reclaim, ...]
    #: per endpoint, why it does not get every worker it wants (empty: nothing keeps it waiting)
    waiting: Mapping[str, tuple[WaitReason, ...]]
    preempts: tuple[Preempt, ...] = ()


@dataclass(frozen=True, slots=True)
class Sharing:
    """What the sharing rules read (DESIGN §11): each priority class's rank (higher first), each app's fair-share
    weight (1 when not named; endpoints of no app share the app ""), and the plane's node-choice override."""

    ranks: Mapping[str, int] = field(default_factory=lambda: dict(PRIORITY_CLASSES))
    weights: Mapping[str, float] = field(default_factory=dict)
    placement: str | None = None

    def rank(self, spec: EndpointSpec) -> int:
        return self.ranks.get(spec.priority, self.ranks.get("normal", 0))

    @property
    def lowest(self) -> int:
        return min(self.ranks.values(), default=0)

    def weight(self, app: str) -> float:
        return self.weights.get(app, 1.0)


DEFAULT_SHARING = Sharing()


def waiting_rank(ep: EndpointState, sharing: Sharing) -> int:
    """The class an endpoint's waiting demand has: its own, or the lowest when every job it has queued was sent at
    low priority."""
    rank = sharing.rank(ep.spec)
    if ep.queued and ep.queued_low >= ep.queued:
        return min(rank, sharing.lowest)
    return rank


def turn_key(
    ep: EndpointState, sharing: Sharing, held: Mapping[str, int], oldest: Mapping[str, float]
) -> tuple[int, float, float, float]:
    """The order endpoints take turns in (smallest first): those with something queued by class (higher first), then
    devices their app holds over its weight (fewest first: the app furthest below its share), then their oldest queued
    job; the rest (wanting only their minimum) after, by registration."""
    queued_at = oldest.get(ep.spec.key)
    if not ep.queued or queued_at is None:
        return (1, 0.0, 0.0, ep.registered_at)
    app = ep.spec.app or ""
    return (0, -waiting_rank(ep, sharing), held.get(app, 0) / sharing.weight(app), queued_at)


def single_use(spec: EndpointSpec) -> bool:
    """Each worker takes one job and ends with it; a route endpoint serves requests, not jobs, and ignores the flag."""
    return spec.single_use and not spec.serves_routes


def minimum(ep: EndpointState) -> int:
    """The workers the endpoint keeps however idle: its ``workers_min`` (or what its ``workers_schedule`` sets now,
    within ``workers_max``); none for a single-use endpoint."""
    if single_use(ep.spec):
        return 0
    scheduled = ep.signals.schedule_min
    return ep.spec.workers_min if scheduled is None else min(scheduled, ep.spec.workers_max)


def desired(
    ep: EndpointState, live: Collection[Worker], wall: float, oldest: float | None, census: Census | None = None
) -> int:
    """How many live workers the endpoint's scaler wants, clamped to ``[workers_min, workers_max]``.

    ``REQUEST_COUNT`` wants ``ceil((queued + running) / scaler_value)``. ``QUEUE_DELAY`` starts the first worker at
    once, and one more when the oldest queued job (queued at wall time ``oldest``) has waited ``scaler_value``
    seconds and no worker is idle or starting. ``live`` are the endpoint's live workers. For a route endpoint,
    queued means requests held for a worker and running means requests in flight. A single-use endpoint wants
    ``queued + running`` (a worker of its own per job; a spent worker is live until its job ends), capped by
    ``workers_max``, whatever its scaler and minimum. flashpoint's own scalers (``target_latency_ms``,
    ``target_concurrency``, ``scaler=``) replace ``scaler_type``'s rule (``scalers.wanted``); the floor is
    ``minimum`` (a ``workers_schedule``'s when one has fired). ``census``: the endpoint's (``live`` are its live
    workers), whose counts are read instead of the workers.
    """
    spec = ep.spec
    jobs = sum(len(w.jobs) for w in live) if census is None else census.jobs
    if single_use(spec):
        return min(ep.queued + jobs, spec.workers_max)
    own = None
    if spec.scaling.rule is not None:  # one of flashpoint's scalers instead of Flash's (``scheduler/scalers.py``)
        starting_count = sum(1 for w in live if w.state is WorkerState.STARTING) if census is None else census.starting
        demand = ep.queued + jobs + ep.in_flight
        own = scalers.wanted(spec, ep.signals, live=len(live), starting=starting_count, demand=demand)
    if own is not None:
        want = own
    elif spec.scaler_type is ServerlessScalerType.REQUEST_COUNT:
        running = jobs + ep.in_flight
        want = math.ceil((ep.queued + running) / spec.scaler_value)
    else:
        want = len(live)
        if ep.queued:
            if census is None:
                starting = any(w.state is WorkerState.STARTING for w in live)
                idle = any(w.state is WorkerState.IDLE for w in live)
            else:
                starting, idle = census.starting > 0, bool(census.idle)
            if not live:
                want = 1
            elif not starting and not idle and oldest is not None and wall - oldest >= spec.scaler_value:
                want = len(live) + 1
    return min(max(want, minimum(ep)), spec.workers_max)


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


def serving_order(
    endpoints: Iterable[EndpointState],
    oldest: Mapping[str, float],
    sharing: Sharing = DEFAULT_SHARING,
    held: Mapping[str, int] | None = None,
) -> list[EndpointState]:
    """The endpoints in the order of their first turn (``turn_key``); ``held``: devices held per app."""
    return sorted(endpoints, key=lambda ep: turn_key(ep, sharing, held or {}, oldest))


def app_holdings(endpoints: Mapping[str, EndpointState], index: FleetIndex) -> dict[str, int]:
    """Devices held per app (``""``: endpoints of no app), stopping workers' included: what fair share compares."""
    held: dict[str, int] = {}
    for key, count in index.held_by_endpoint(ANY_GPU).items():
        ep = endpoints.get(key)
        if ep is not None:
            app = ep.spec.app or ""
            held[app] = held.get(app, 0) + count
    return held


def plan(
    endpoints: Mapping[str, EndpointState],
    index: FleetIndex,
    *,
    now: float,
    wall: float,
    oldest: Mapping[str, float],
    wanted: Mapping[tuple[str, int], OtherProcess] | None = None,
    limit: Limit | None = None,
    sharing: Sharing = DEFAULT_SHARING,
    auto_idle: bool = False,
) -> Plan:
    """The starts, reclaims and preemptions that give endpoints the workers they want, and the reasons for what they
    lack.

    ``now`` is monotonic (start back-off), ``wall`` is epoch time and ``oldest[name]`` the wall time the endpoint's
    oldest queued job was queued (the scaler's clock and the serving order). ``wanted`` are devices (by key) another
    flashpoint process waits for (``scheduler/wants.py``): an idle worker above its minimum on one of them yields it,
    once this plane's own endpoints have been served. ``limit`` (the plane's quotas, ``scheduler/quotas.py``) says
    why a candidate of an endpoint may not take devices now, reading the index (the plan's own starts are held there).
    ``sharing``: priority classes, fair-share weights and the placement override. ``auto_idle``: endpoints that set
    no ``idle_timeout`` size their keep-warm window from traffic (``keep_window``), which may pre-warm a worker.
    """
    # each endpoint's workers as its census counts them (kept as they change: a plan reads no worker it need not),
    # and the idle ones that could yield now (named once per plan, so placement looks at their devices only)
    census = {name: ep.workers.census for name, ep in endpoints.items()}
    #: live workers per endpoint, less those this plan reclaims
    live = {name: len(c.live) for name, c in census.items()}
    idle = [
        Holder(w.id, w.endpoint)
        for name, c in census.items()
        if c.idle and not endpoints[name].queued and live[name] > minimum(endpoints[name])
        for w in c.idle.values()
        if yieldable(w, endpoints[name], live[name])
    ]
    reclaimed: set[str] = set()

    def still_yields(holder: Holder) -> bool:
        owner = endpoints[holder.endpoint]
        return holder.worker_id not in reclaimed and live[holder.endpoint] > minimum(owner)

    p = _Pass(index, now, wall, oldest, Yielders(idle, still_yields), [], [], reclaimed, live, [], [], limit)
    p.sharing = sharing
    p.idle = idle
    p.idle_ranks = {h: sharing.rank(endpoints[h.endpoint].spec) for h in idle}
    p.still_yields = still_yields
    p.endpoints = endpoints
    p.census = census
    p.auto_idle = auto_idle
    for c in census.values():  # the workers stopping to make room, per endpoint they make it for
        for w in c.stopping_for.values():
            p.pending.setdefault(w.stopping_for or "", []).append(w)
    fair = len({ep.spec.app for ep in endpoints.values()}) > 1  # fair share is between apps
    held = app_holdings(endpoints, index) if fair else {}
    turns = [_Turn(ep, p) for ep in endpoints.values()]
    heap = [(turn_key(t.ep, sharing, held, oldest), n, t) for n, t in enumerate(turns)]
    heapq.heapify(heap)
    try:
        while heap:
            _, n, turn = heapq.heappop(heap)
            started = turn.step()
            if started is None:
                continue  # it has all it can get in this plan
            if started and fair:
                app = turn.ep.spec.app or ""
                held[app] = held.get(app, 0) + turn.ep.spec.gpu_count
            heapq.heappush(heap, (turn_key(turn.ep, sharing, held, oldest), n, turn))
        waiting = {t.ep.spec.key: t.reasons() for t in turns}
        if wanted:
            _yield_elsewhere(endpoints, wanted, p)
    finally:
        for fit in p.planned:  # the index comes back as it came
            index.release(fit.devices)
        for holder in p.planned_cpus:
            index.nodes.release(holder)
    return Plan(tuple(p.starts), tuple(p.reclaims), waiting, tuple(p.preempts))


@dataclass(slots=True)
class _Pass:
    """What one planning pass carries from endpoint to endpoint."""

    index: FleetIndex
    now: float
    wall: float
    oldest: Mapping[str, float]
    may_yield: Yielders
    starts: list[Start]
    reclaims: list[Reclaim]
    reclaimed: set[str]
    live: dict[str, int]
    planned: list[Fit]
    #: the holders of the CPU slots planned (one each: a holder reserves one slot)
    planned_cpus: list[Holder]
    limit: Limit | None = None
    sharing: Sharing = DEFAULT_SHARING
    #: the idle workers that could yield at the start of the pass, their endpoints' class ranks, and whether one
    #: still may
    idle: list[Holder] = field(default_factory=list)
    idle_ranks: dict[Holder, int] = field(default_factory=dict)
    still_yields: Callable[[Holder], bool] = lambda holder: False
    endpoints: Mapping[str, EndpointState] = field(default_factory=dict)
    census: Mapping[str, Census] = field(default_factory=dict)
    auto_idle: bool = False
    #: per class rank: the live workers of lower-class preemptible queue endpoints, and the yielders a preemption
    #: places with (those and the idle ones): built when a turn of that class first needs them
    victims: dict[int, tuple[frozenset[Holder], Yielders]] = field(default_factory=dict)
    #: preemption attempts that found no fit: the class rank, what placement reads of the spec, and how many reclaims
    #: and holds the plan had made then
    preempt_failed: set[tuple[object, ...]] = field(default_factory=set)
    #: per endpoint, workers stopping to give their devices to it (idle yields, preemptions)
    pending: dict[str, list[Worker]] = field(default_factory=dict)
    preempts: list[Preempt] = field(default_factory=list)


def _yield_elsewhere(
    endpoints: Mapping[str, EndpointState], wanted: Mapping[tuple[str, int], OtherProcess], p: _Pass
) -> None:
    """Reclaim the idle workers (above their endpoint's minimum, not reclaimed already) that hold a device another
    process waits for."""
    for name, c in p.census.items():
        ep = endpoints[name]
        for worker in list(c.idle.values()):
            if worker.id in p.reclaimed or not yieldable(worker, ep, p.live[name]):
                continue
            process = next((wanted[d.key] for d in worker.devices if d.key in wanted), None)
            if process is None:
                continue
            p.reclaimed.add(worker.id)
            p.live[name] -= 1
            who = f"endpoint {process.endpoint} of {process.label}" if process.endpoint else process.label
            p.reclaims.append(Reclaim(worker.id, name, who))


class _Turn:
    """One endpoint's part of a plan: a worker a turn (``step``) until it has what it wants or something stops it,
    then the reasons it still waits (``reasons``)."""

    __slots__ = (
        "_asks",
        "covered",
        "done",
        "ep",
        "holding",
        "limit_refuse",
        "live",
        "new",
        "p",
        "rank",
        "want",
        "waiting",
    )

    def __init__(self, ep: EndpointState, p: _Pass) -> None:
        spec = ep.spec
        name = spec.key
        self.ep, self.p = ep, p
        self._asks: str | None = None
        self.waiting: list[WaitReason] = []
        census = p.census[name]
        self.want = desired(ep, census.live.values(), p.wall, p.oldest.get(name), census)
        if not self.want and spec.workers_max and prewarm_due(ep, p.now, p.auto_idle):
            self.want = 1  # an auto window warms a worker ahead of the arrival it predicts
        self.live = p.live[name]
        self.holding = len(ep.workers)  # stopping workers still hold devices
        staged = ep.staged
        if staged is not None:  # a rollout's standby workers are the next generation's, bounded by its own maximum
            self.holding -= sum(1 for w in ep.workers.values() if w.standby)
            if staged.draining:  # it retires old workers to make room: none of the old generation replaces them
                self.want = min(self.want, self.live)
        self.new = 0
        #: workers it waits for that are being preempted for it (they count as coming)
        self.covered = 0
        self.done = False
        self.rank = waiting_rank(ep, p.sharing)
        limit = p.limit
        self.limit_refuse = None if limit is None else (lambda candidate: limit(spec, candidate, p.index))

    @property
    def asks(self) -> str:
        """What the endpoint asks for, in words (its reasons' candidate), worded only when a reason needs it."""
        if self._asks is None:
            self._asks = self.ep.spec.describe_gpu()
        return self._asks

    def step(self) -> bool | None:
        """Plan one worker more: True when one starts, False when room is being made for it (a reclaim, a
        preemption), None when this endpoint is done for this plan."""
        if self.done:
            return None
        ep, p, spec = self.ep, self.p, self.ep.spec
        name, asks = spec.key, self.asks
        if self.live + self.new + self.covered >= self.want:
            self.done = True
            return None
        if self.holding + self.new >= spec.workers_max:
            # workers on their way out still hold devices: an endpoint never holds more than gpu_count x max
            self._stop(
                WaitReason(
                    asks,
                    Code.MAX_WORKERS,
                    f"{self.holding - self.live} worker(s) of this endpoint are stopping; "
                    f"at most {spec.workers_max} may hold devices at once",
                )
            )
            return None
        environment = ep.environment
        if environment is not None and environment.state in (BUILDING, FAILED):
            if environment.state == BUILDING:
                self._stop(WaitReason(asks, Code.BUILDING_ENVIRONMENT, environment.waiting_detail(p.now)))
            else:
                self._stop(
                    WaitReason(
                        asks,
                        Code.ENVIRONMENT_FAILED,
                        f"its environment failed to build: {first_line(environment.error)}; fix its dependencies, "
                        "or forget the failure with `flashpoint venv prune --failed`",
                    )
                )
            return None
        if ep.next_start_at > p.now:
            self._stop(
                WaitReason(
                    asks,
                    Code.START_BACKOFF,
                    f"{ep.start_failures} worker start(s) failed and {ep.start_losses} starting worker(s) were "
                    f"killed from outside; next attempt in {ep.next_start_at - p.now:.1f}s; "
                    f"last error: {ep.last_start_error or '?'}",
                )
            )
            return None
        placement = p.sharing.placement
        result = place_endpoint(spec, p.index, p.may_yield, self.limit_refuse, placement)
        if isinstance(result, Fit) and result.reclaim:
            result = self._lower_first(result)
        if isinstance(result, NoFit) or result.reclaim:
            pending = p.pending.get(name)
            if pending:  # a worker stopped for it (yielding, preempted) is stopping: its devices come here
                self._await_stopping(pending)
                return False
        if isinstance(result, NoFit):
            preempted = self._preempt()
            if preempted is not None:
                self.covered += 1
                self.waiting.append(preempted)
                return False
            self._stop(*result.reasons)
            return None
        if result.reclaim:
            for holder in result.reclaim:
                p.reclaimed.add(holder.worker_id)
                p.live[holder.endpoint] -= 1
                p.reclaims.append(Reclaim(holder.worker_id, holder.endpoint, name))
            if isinstance(result, Fit):
                self._reserve(result)
            cpu = isinstance(result, CpuFit)
            self._stop(
                WaitReason(
                    result.request.name if isinstance(result, CpuFit) else describe(result.candidate),
                    Code.CPU_BUSY if cpu else Code.BUSY,
                    f"idle workers of other endpoints are giving their {'CPUs' if cpu else 'devices'} up for this one",
                    tuple(sorted({h.endpoint for h in result.reclaim})),
                )
            )
            return None
        if isinstance(result, CpuFit):
            holder = Holder(f"{_PLANNED} {len(p.planned_cpus)}", name)
            p.index.nodes.reserve(result.slot, holder)
            p.planned_cpus.append(holder)
        else:
            p.index.hold(result.devices, Holder(_PLANNED, name))
            p.planned.append(result)
        p.starts.append(Start(name, result))
        self.new += 1
        return True

    def _reserve(self, fit: Fit) -> None:
        """The free devices of a fit that waits for workers to stop are this endpoint's for the rest of the plan: no
        later turn (a lower class) takes them, which would undo the stop and ask for another one next time."""
        index = self.p.index
        free = tuple(d for d in fit.devices if index.holder(d) is None)
        if free:
            index.hold(free, Holder(_PLANNED, self.ep.spec.key))
            self.p.planned.append(Fit(fit.candidate, fit.node, free))

    def _await_stopping(self, pending: list[Worker]) -> None:
        """Workers stopping for this endpoint cover its next worker: the fit their devices make (with free ones beside
        them, reserved for this plan) when there is one, else the first of them."""
        p, spec = self.p, self.ep.spec
        holders = {Holder(w.id, w.endpoint): w for w in pending}
        fit = place_endpoint(spec, p.index, Yielders(holders), self.limit_refuse, p.sharing.placement)
        if isinstance(fit, Fit) and fit.reclaim and all(h in holders for h in fit.reclaim):
            coming = [holders[h] for h in fit.reclaim]
            self._reserve(fit)
        else:
            coming = [pending[-1]]
        for worker in coming:
            pending.remove(worker)
        self.covered += 1
        first = coming[0]
        how = "was preempted" if first.preempted_for is not None else "is yielding"
        self.waiting.append(
            WaitReason(
                self.asks,
                Code.PREEMPTED if first.preempted_for is not None else Code.BUSY,
                f"worker {', '.join(w.id for w in coming)} of {first.endpoint} {how} for this endpoint and is "
                "stopping; its devices come here",
                tuple(sorted({w.endpoint for w in coming})),
            )
        )

    def _stop(self, *reasons: WaitReason) -> None:
        self.waiting.extend(reasons)
        self.done = True

    def _lower_first(self, fit: Fit) -> Fit | CpuFit | NoFit:
        """A fit that stops idle workers: on the same candidate, stop those of lower classes instead when they
        suffice (declared order first, then who yields)."""
        p, spec = self.p, self.ep.spec
        ranks = p.idle_ranks
        lower = [h for h in p.idle if ranks[h] < self.rank]
        if not lower or all(ranks.get(h, self.rank) < self.rank for h in fit.reclaim):
            return fit
        only = dataclasses.replace(spec, candidates=(fit.candidate,))
        narrowed = place_endpoint(
            only, p.index, Yielders(lower, p.still_yields), self.limit_refuse, p.sharing.placement
        )
        return narrowed if isinstance(narrowed, Fit) else fit

    def _preempt(self) -> WaitReason | None:
        """The last resort of a waiting queue: live workers of lower-class preemptible endpoints (with idle ones that
        may yield) whose devices make a fit, in declared order. They are preempted (the idle ones reclaimed), and the
        reason says so; None when no such fit exists."""
        p, spec, name = self.p, self.ep.spec, self.ep.spec.key
        if not spec.uses_gpu:
            return None
        # an attempt that failed for the same class and request (what placement and the quotas read of the spec),
        # with the plan's holds and reclaims as they were then, fails again
        attempt = (
            self.rank,
            spec.candidates,
            spec.gpu_count,
            spec.datacenters,
            spec.min_cuda_version,
            spec.placement,
            spec.app,
            spec.app_env,
            len(p.reclaimed),
            len(p.planned),
        )
        if attempt in p.preempt_failed:
            return None
        found = p.victims.get(self.rank)
        if found is None:  # once a plan per class: who it may preempt, and with the idle, who may make room
            chosen = frozenset(
                itertools.chain.from_iterable(
                    p.census[key].holders.values()
                    for key, other in p.endpoints.items()
                    if other.spec.preemptible
                    and not other.spec.serves_routes
                    and p.sharing.rank(other.spec) < self.rank
                )
            )

            def may_go(holder: Holder, chosen: frozenset[Holder] = chosen) -> bool:
                if holder in chosen:
                    return holder.worker_id not in p.reclaimed
                return p.still_yields(holder)

            found = p.victims[self.rank] = (chosen, Yielders(chosen.union(p.idle), may_go))
        chosen, yielders = found
        if not chosen or (len(chosen) <= len(p.reclaimed) and all(h.worker_id in p.reclaimed for h in chosen)):
            p.preempt_failed.add(attempt)
            return None
        result = place_endpoint(spec, p.index, yielders, self.limit_refuse, p.sharing.placement)
        if not isinstance(result, Fit) or not result.reclaim:
            p.preempt_failed.add(attempt)
            return None
        self._reserve(result)
        taken = []
        for holder in result.reclaim:
            p.reclaimed.add(holder.worker_id)
            p.live[holder.endpoint] -= 1
            if holder in chosen:
                p.preempts.append(Preempt(holder.worker_id, holder.endpoint, name))
                taken.append(holder.endpoint)
            else:
                p.reclaims.append(Reclaim(holder.worker_id, holder.endpoint, name))
        return WaitReason(
            describe(result.candidate),
            Code.PREEMPTED,
            f"workers of lower-priority preemptible endpoints ({', '.join(sorted(set(taken)))}) are being stopped "
            "for this one; their jobs go back to their queue",
            tuple(sorted(set(taken))),
        )

    def reasons(self) -> tuple[WaitReason, ...]:
        """Why the endpoint does not get every worker it wants (empty: nothing keeps it waiting)."""
        ep, p, spec = self.ep, self.p, self.ep.spec
        name, asks = spec.key, self.asks
        if self.waiting or not ep.queued:
            return tuple(self.waiting)
        census = p.census[name]
        if p.live[name] == len(census.live):  # none of its workers was reclaimed: the census's counts hold
            count, busy_count, starting_count, engaged = (
                len(census.live),
                census.busy,
                census.starting,
                census.engaged,
            )
        else:
            running = [w for w in census.live.values() if w.id not in p.reclaimed]
            count = len(running)
            busy_count = sum(1 for w in running if w.jobs or w.in_flight)
            starting_count = sum(1 for w in running if w.state is WorkerState.STARTING)
            engaged = sum(1 for w in running if w.jobs or w.in_flight or w.state is WorkerState.STARTING)
        starting = self.new > 0 or starting_count > 0
        busy = engaged == count and busy_count > 0
        if self.live + self.new >= spec.workers_max and busy:
            return (
                WaitReason(
                    asks,
                    Code.MAX_WORKERS,
                    f"all {spec.workers_max} worker(s) allowed are busy; raise workers= to run more at once",
                ),
            )
        if starting:
            return (WaitReason(asks, Code.WORKER_STARTING, "a worker is starting"),)
        if count and busy_count == count:
            unit = "s of queueing" if spec.scaler_type is ServerlessScalerType.QUEUE_DELAY else " jobs per worker"
            return (
                WaitReason(
                    asks,
                    Code.SCALER,
                    f"workers are busy; {spec.scaler_type.value} adds one after {spec.scaler_value}{unit}",
                ),
            )
        return ()


def keep_window(ep: EndpointState, auto_default: bool = False) -> keepwarm.Window | None:
    """The keep-warm window sized from the endpoint's traffic when its ``idle_timeout`` is ``"auto"`` (or unset on a
    plane whose default is auto: ``auto_default``); None when a fixed ``idle_timeout`` rules (or it is single-use)."""
    spec = ep.spec
    auto = spec.idle_auto if spec.idle_auto is not None else auto_default
    if not auto or single_use(spec):
        return None
    return ep.traffic.window(spec.idle_timeout_s)


def prewarm_due(ep: EndpointState, now: float, auto_default: bool = False) -> bool:
    """An auto window wants a worker warmed now, ahead of the arrival it predicts (``now``: monotonic)."""
    window = keep_window(ep, auto_default)
    last_end = ep.traffic.last_end
    if window is None or window.prewarm_s is None or last_end is None or ep.queued:
        return False
    return keepwarm.prewarm_due(window, now - last_end, keepwarm.lead_s(ep.traffic.cold_start_s()))


def idle_stops(ep: EndpointState, now: float, auto_default: bool = False) -> list[Worker]:
    """Workers above the endpoint's minimum idle for ``idle_timeout`` seconds, longest idle first (a single-use
    endpoint's at once: a worker whose job was cancelled before it took it is not kept warm). An ``"auto"`` window
    (``keep_window``) counts from the endpoint's last job instead, and stops idle workers at once while a pre-warm is
    not yet due.

    A worker with jobs still queued is not idle, only between two pulls (or before its first one, when its ping
    arrives before its job-take): stopping it would strand those jobs.
    """
    live = ep.live_workers()
    stops: list[Worker] = []
    floor, timeout = (0, 0.0) if single_use(ep.spec) else (minimum(ep), ep.spec.idle_timeout_s)
    window = keep_window(ep, auto_default)
    lead = keepwarm.lead_s(ep.traffic.cold_start_s()) if window is not None else 0.0
    for worker in sorted(live, key=lambda w: w.idle_since):
        if len(live) - len(stops) <= floor:
            break
        if not (worker.state is WorkerState.IDLE and not worker.jobs and not worker.in_flight and not ep.queued):
            continue
        if window is None:
            due = now - worker.idle_since >= timeout
        else:
            last_end = ep.traffic.last_end
            since_end = now - (worker.idle_since if last_end is None else last_end)
            due = keepwarm.stops_idle(window, since_end, lead)
        if due:
            stops.append(worker)
    return stops
