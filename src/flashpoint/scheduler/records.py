"""The control plane's records: one per endpoint and one per worker. Mutable, and written only by ``ControlPlane`` and
its collaborators (through ``PlaneState``, ``state.py``); the planner and the read models only read them."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from flashpoint.explain import Explanation, WaitReason
from flashpoint.fleet.inventory import Device, Holder
from flashpoint.jobs import Job, Placement
from flashpoint.scheduler.keepwarm import Traffic
from flashpoint.scheduler.placement.fit import NoFit
from flashpoint.scheduler.placement.nodes import CpuSlot
from flashpoint.scheduler.signals import Signals
from flashpoint.spec import EndpointSpec, WorkerTarget

if TYPE_CHECKING:
    from flashpoint.environments import Environment


class WorkerState(str, Enum):
    """A worker's life: STARTING until its first pull (a route worker: until its ``/ping`` answers 200), then
    IDLE/RUNNING (running jobs, or serving requests), STOPPING once asked to exit."""

    STARTING = "STARTING"
    IDLE = "IDLE"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"

    def __str__(self) -> str:
        return self.value


#: the ``Worker`` fields its endpoint's census counts: setting one moves the worker in it
_COUNTED = frozenset({"state", "jobs", "in_flight", "retiring", "standby", "stopping_for"})
_STOPPING, _STARTING, _IDLE = WorkerState.STOPPING, WorkerState.STARTING, WorkerState.IDLE
#: a worker's part in a census: (live, jobs, busy, starting, engaged); live False for one that is not counted
_Part = tuple[bool, int, int, int, int]
_NOT_LIVE: _Part = (False, 0, 0, 0, 0)


@dataclass(slots=True, eq=False)
class Worker:
    id: str
    endpoint: str
    devices: tuple[Device, ...]
    #: monotonic times: when it was started, when it last became idle, when it last took jobs or posted a result
    #: or chunk (its job-stop long-poll and pings run on regardless)
    started_at: float
    idle_since: float
    last_exchange: float
    state: WorkerState = WorkerState.STARTING
    #: the jobs it runs (replaced, never changed in place: its endpoint's census counts them as they are set)
    jobs: frozenset[str] = frozenset()
    #: job ids to hand to the worker's job-stop long-poll
    to_stop: list[str] = field(default_factory=list)
    stop_waiter: asyncio.Future[None] | None = None
    #: take no new jobs; stop once the running ones end (after a timeout or a stopPod)
    retiring: bool = False
    ever_ready: bool = False
    node: str = "local"
    #: a CPU worker's cores and memory on its node (None for a GPU worker: GPU workers reserve no CPUs)
    cpu: CpuSlot | None = None
    #: a CPU worker's instance type ("cpu3c-2-4")
    cpu_instance: str | None = None
    #: the device ids the backend reports the worker really got, when it numbers them itself (Ray); else the ledger's
    device_ids: tuple[int, ...] | None = None
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    #: its start failed because the backend could not set its environment up (Ray's runtime_env): retrying with the
    #: same requirements will not help, so its endpoint's queued jobs fail ``environment_failed`` at once
    environment_failed: bool = False
    #: jobs it holds that its pings stopped naming, with when that began (the watchdog's evidence)
    unnamed: dict[str, float] = field(default_factory=dict)
    #: where a route worker serves HTTP (``host:port``), once its backend started it; None for a queue worker
    address: str | None = None
    #: its process id on this machine, when its backend says (GPU telemetry's attribution; ``scheduler/gpustats.py``)
    pid: int | None = None
    #: requests the server's proxy has handed a route worker and not yet seen answered
    in_flight: int = 0
    #: a route worker's route secret (``RouteServing.route_secret``), kept once computed: the proxy sends it per request
    route_secret: str = ""
    #: the endpoint's generation it runs (``EndpointState.generation``; a rollout's staged one while ``standby``)
    generation: int = 1
    #: started by a rollout for the endpoint's next generation: it takes no job and serves no request, and counts for
    #: none of the old generation's scaling, until the endpoint switches to it (``scheduler/rollout.py``)
    standby: bool = False
    #: a single-use endpoint's worker that has taken its one job: it takes no other, and stops when that job ends
    #: (still live meanwhile: its job counts as running for the scaler)
    spent: bool = False
    #: preempted for this endpoint (a higher class): stopping, and its jobs go back to their queue as ``preempted``
    preempted_for: str | None = None
    #: stopped to give its devices to this endpoint (an idle yield or a preemption): while it stops, its devices count
    #: as coming to that endpoint, so no other worker is stopped for the same start
    stopping_for: str | None = None
    #: its cold start's phases so far, name -> seconds in ``wire/coldstart.py``'s order (decision 0118)
    phases: dict[str, float] = field(default_factory=dict)
    #: the first job it took (a class endpoint's constructor, reported with that job's result, is part of its wait)
    first_job: str | None = None
    #: the census of the endpoint whose ``workers`` holds it (``WorkerSet``), which it keeps true as it changes
    census: Census | None = field(default=None, init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _COUNTED:
            census = getattr(self, "census", None)  # (unset while the dataclass's __init__ runs)
            if census is not None:
                before = census.part(self)
                object.__setattr__(self, name, value)
                census.moved(self, before)
                return
        object.__setattr__(self, name, value)

    @property
    def live(self) -> bool:
        return self.state is not WorkerState.STOPPING and not self.retiring and not self.standby

    @property
    def takes_jobs(self) -> bool:
        """It may be handed a job: live, and not a single-use worker that has had its one."""
        return self.live and not self.spent

    def placement(self) -> Placement:
        if not self.devices:
            return Placement(
                node=self.node,
                gpu_model=None,
                device_ids=(),
                simulated=False,
                cpu_instance=self.cpu_instance,
                cores=self.cpu.cores if self.cpu is not None else (),
            )
        first = self.devices[0]
        return Placement(
            node=first.node,
            gpu_model=first.model_name,
            device_ids=self.device_ids if self.device_ids is not None else tuple(d.index for d in self.devices),
            simulated=first.simulated,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "endpoint": self.endpoint,
            "state": self.state.value,
            "jobs": sorted(self.jobs),
            "retiring": self.retiring,
            "placement": self.placement().to_json(),
            "address": self.address,
            "inFlight": self.in_flight,
            "generation": self.generation,
            "standby": self.standby,
            "phases": dict(self.phases),
        }


#: a worker in a job-take long-poll: (worker id, how many jobs it takes, the future its request awaits)
Taker = tuple[str, int, "asyncio.Future[list[Job]]"]
#: a request held for a route worker: (wall time it arrived, the future that gets its worker, or the endpoint's
#: explanation when it is given up)
Held = tuple[float, "asyncio.Future[Worker | Explanation]"]


@dataclass(slots=True)
class EnvStatus:
    """An endpoint's environment as the plane knows it."""

    #: the requirement set's key in the cache ("" when the host satisfies it)
    key: str
    #: building, ready, failed, or host (no build: the host environment satisfies every requirement)
    state: str
    #: monotonic time the build began (or the state was reached)
    started: float
    #: the installer's last line (written by the building thread)
    last_line: str = ""
    #: the environment, once ready
    environment: Environment | None = None
    #: the failure, in words, with the installer's output tail
    error: str = ""
    #: monotonic time it became ready (a build's end, or a cache hit's): a cold start's ``environment`` phase
    built: float | None = None

    def waiting_detail(self, now: float) -> str:
        """The ``building_environment`` reason's words."""
        line = f"; last line: {self.last_line}" if self.last_line else ""
        return f"its environment (dependencies, key {self.key}) has been building for {now - self.started:.0f}s{line}"


@dataclass(slots=True, eq=False)
class Staged:
    """An endpoint's next generation while a rollout warms it (``scheduler/rollout.py``): what its workers are started
    with, and their start failures and back-off, kept apart from the generation serving."""

    #: the generation's number: its workers' ``generation``
    number: int
    #: the new spec, target and environment, and the staged workers' start failures and back-off; never registered
    record: EndpointState
    code_file: str | None
    #: an old worker was retired to make room: the old generation starts no worker more until the rollout ends
    draining: bool = False


@dataclass(slots=True, eq=False)
class EndpointState:
    spec: EndpointSpec
    target: WorkerTarget
    #: wall time of registration: endpoints with nothing queued are served in this order
    registered_at: float
    #: job ids in queue order; a cancelled id stays until it is reached (then skipped), so cancel is O(1)
    queue: deque[str] = field(default_factory=deque)
    #: the ids of jobs sent at low priority (``Job.low_priority``), in the same way: taken once ``queue`` is empty
    low_queue: deque[str] = field(default_factory=deque)
    #: the demand no worker has taken yet: how many ids in ``queue`` are still IN_QUEUE (a queue endpoint), or how
    #: many requests are held for a worker (a route endpoint: it has no jobs), so scaling, idle stops and
    #: explanations read both alike
    queued: int = 0
    #: how many of ``queued`` are low-priority jobs (in ``low_queue``)
    queued_low: int = 0
    #: a route endpoint's requests waiting for a ready worker, oldest first; a request that gave up stays until it
    #: reaches the front (its future is done), as cancelled jobs do in ``queue``
    held: deque[Held] = field(default_factory=deque)
    #: a route endpoint's requests handed to its workers and not yet answered (the REQUEST_COUNT scaler's load)
    in_flight: int = 0
    takers: deque[Taker] = field(default_factory=deque)
    #: its workers by id, counted as they come, change and go (``workers.census``)
    workers: WorkerSet = field(default_factory=lambda: WorkerSet())
    #: why the last reconcile could not give this endpoint the workers it wants
    waiting: tuple[WaitReason, ...] = ()
    never: NoFit | None = None
    start_failures: int = 0
    #: starting workers killed from outside in a row (an OOM kill, an operator's kill): they delay, never fail, jobs
    start_losses: int = 0
    next_start_at: float = 0.0
    last_start_error: str = ""
    worker_seq: int = 0
    #: the environment of an endpoint with ``dependencies`` (``scheduler/envgate.py``); None: none asked for yet
    environment: EnvStatus | None = None
    #: its ``system_dependencies`` this machine lacks, found at registration (``envgate.check_system``)
    system_missing: tuple[str, ...] = ()
    counters: dict[str, int] = field(default_factory=lambda: {"completed": 0, "failed": 0, "retried": 0})
    #: which version of its spec, target and code serves: 1 at registration, one more at each rollout's switch
    generation: int = 1
    #: the generation a rollout warms beside this one, until it switches or is abandoned
    staged: Staged | None = None
    #: its idle gaps and cold starts, which size an ``idle_timeout="auto"`` window (``scheduler/keepwarm.py``); kept
    #: across rollouts (the traffic is the endpoint's, whichever version serves it)
    traffic: Traffic = field(default_factory=Traffic)
    #: what its flashpoint scalers read (request times, load, the scheduled minimum, the user scaler's answer)
    signals: Signals = field(default_factory=Signals)

    def live_workers(self) -> list[Worker]:
        return list(self.workers.census.live.values())


class Census:
    """An endpoint's workers as the planner reads them, kept up to date as they change (``Worker.__setattr__``) and
    as they join and leave the endpoint (``WorkerSet``), so a plan reads counts instead of every worker: the live
    ones (not stopping, retiring or standby) by id, the idle ones among them, the jobs they run and how many are
    busy (a job or a request in flight), starting, or engaged (busy or starting); and the stopping workers that make
    room for an endpoint (``stopping_for``), in the order they began to stop."""

    __slots__ = ("busy", "engaged", "holders", "idle", "jobs", "live", "starting", "stopping_for")

    def __init__(self) -> None:
        #: live workers by id, in the order they became live (registration, for all but a rollout's standby ones)
        self.live: dict[str, Worker] = {}
        #: the live workers as device holders (placement's yielders), made once per worker
        self.holders: dict[str, Holder] = {}
        self.idle: dict[str, Worker] = {}
        self.stopping_for: dict[str, Worker] = {}
        self.jobs = self.busy = self.starting = self.engaged = 0

    @staticmethod
    def part(w: Worker) -> _Part:
        """What ``w`` adds to the counts, from its fields as they are."""
        state = w.state
        if state is _STOPPING or w.retiring or w.standby:
            return _NOT_LIVE
        busy = 1 if w.jobs or w.in_flight else 0
        starting = 1 if state is _STARTING else 0
        return (True, len(w.jobs), busy, starting, 1 if busy or starting else 0)

    def moved(self, w: Worker, before: _Part) -> None:
        """``w`` changed a counted field; ``before`` was its part until then."""
        after = self.part(w)
        if before[0] != after[0]:
            if after[0]:
                self.live[w.id] = w
                self.holders[w.id] = Holder(w.id, w.endpoint)
            else:
                self.live.pop(w.id, None)
                self.holders.pop(w.id, None)
        self.jobs += after[1] - before[1]
        self.busy += after[2] - before[2]
        self.starting += after[3] - before[3]
        self.engaged += after[4] - before[4]
        state = w.state
        if after[0] and state is _IDLE:
            self.idle.setdefault(w.id, w)
        else:
            self.idle.pop(w.id, None)
        if state is _STOPPING and w.stopping_for is not None:
            self.stopping_for.setdefault(w.id, w)
        else:
            self.stopping_for.pop(w.id, None)

    def enter(self, w: Worker) -> None:
        self.moved(w, _NOT_LIVE)

    def leave(self, w: Worker) -> None:
        before = self.part(w)
        self.live.pop(w.id, None)
        self.holders.pop(w.id, None)
        self.jobs -= before[1]
        self.busy -= before[2]
        self.starting -= before[3]
        self.engaged -= before[4]
        self.idle.pop(w.id, None)
        self.stopping_for.pop(w.id, None)


class WorkerSet(dict[str, "Worker"]):
    """An endpoint's workers by id, with their ``census``: a worker set in joins it (and is counted from then on as
    it changes), one popped or deleted leaves it."""

    __slots__ = ("census",)

    def __init__(self) -> None:
        super().__init__()
        self.census = Census()

    def __setitem__(self, key: str, worker: Worker) -> None:
        old = self.get(key)
        if old is not None:
            self._leave(old)
        super().__setitem__(key, worker)
        worker.census = self.census
        self.census.enter(worker)

    def __delitem__(self, key: str) -> None:
        self._leave(self[key])
        super().__delitem__(key)

    def pop(self, key: str, *default: Any) -> Any:
        worker = self.get(key)
        if worker is not None:
            self._leave(worker)
        return super().pop(key, *default)

    def _leave(self, worker: Worker) -> None:
        self.census.leave(worker)
        worker.census = None

    def _refused(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("add or remove an endpoint's workers one at a time (workers[id] = w, workers.pop(id))")

    update = setdefault = popitem = clear = __ior__ = _refused  # type: ignore[assignment]
