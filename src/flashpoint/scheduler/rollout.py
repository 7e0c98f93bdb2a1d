"""Rollouts: an endpoint's next version (spec, target, code) warmed beside the one serving, then switched to without
dropping a job or a request; or abandoned, the version serving left untouched (decision 0099).

A rollout of an endpoint the plane does not have registers it, and is done once its environment is built and its
minimum of workers is ready. A rollout of a registered endpoint stages the new version as its next generation
(``EndpointState.staged``) and, at every reconcile, before the planner plans (``Rollouts.step``):

- **build**: the new version's environment, when it has dependencies (the plane's ``EnvironmentGate``);
- **warm**: standby workers of the new version started beside the old ones (``Worker.standby``: they take no job and
  get no request); as many as ``warm_count`` says. Where the fleet has no room, one old worker at a time retires to
  make some (it finishes its running jobs, takes nothing new, stops; its devices go to a new worker of this rollout,
  held for it as ``KEPT`` so that no other endpoint's rollout or plan takes them), and from then on the old version
  starts no worker more;
- **switch**: once as many new workers are ready as needed (a queue worker pulled, a route worker's ``/ping``
  answered 200), the endpoint takes the new spec, target and code; the new workers take the queue (jobs queued run on
  the new version; running ones finish on their old workers) and the requests held; the old workers retire, as
  ``redeclare`` retires them.

A version that never becomes ready (its environment fails to build, its workers exit ``MAX_START_ATTEMPTS`` times
while starting, or ``timeout_s`` of the plane's clock pass) is abandoned: its standby workers stop, the staged
generation is forgotten, old workers retired for it serve again, and ``roll_out`` raises ``RolloutFailed`` saying
why. A first rollout that fails takes its endpoint away again. One rollout per endpoint at a time.

``Rollouts`` is a collaborator of ``ControlPlane`` over the plane's state; the decisions are the pure functions at
the top.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flashpoint.errors import ConflictError, RolloutFailed
from flashpoint.fleet.inventory import Device, Holder
from flashpoint.scheduler.envgate import BUILDING, FAILED, EnvironmentGate, first_line
from flashpoint.scheduler.placement.fit import NoFit, Yielders, place_endpoint
from flashpoint.scheduler.planner import minimum
from flashpoint.scheduler.records import EndpointState, Staged, Worker, WorkerState
from flashpoint.scheduler.registry import EndpointRegistry
from flashpoint.scheduler.state import PlaneState
from flashpoint.scheduler.supervision import MAX_START_ATTEMPTS, WorkerSupervision
from flashpoint.spec import EndpointSpec, WorkerTarget

log = logging.getLogger("flashpoint.plane")

#: what ``on_stage(stage, detail)`` is called with, in order
BUILD, WARM, SWITCH = "build", "warm", "switch"
#: how many lines of a crash loop's last output a failed rollout quotes
QUOTED_LINES = 5
#: who holds the devices an old worker gave up for its rollout's new worker, until that worker starts
KEPT = "(kept for a rollout's new worker)"

# ------------------------------------------------------------------------------------------------------------------
# the decisions (pure)


def warm_count(workers_min: int, workers_max: int, old_live: int) -> int:
    """How many new workers must be ready before the switch: the new version's minimum, or as many as the old one
    runs (at least one when it runs any), capped by the new maximum."""
    return min(max(workers_min, old_live, 1 if old_live else 0), workers_max)


def abandon_reason(
    *,
    environment: str,
    environment_error: str,
    start_failures: int,
    last_error: str,
    late: bool,
    timeout_s: float,
    ready: int,
    needed: int,
) -> str | None:
    """Why a rollout is given up now, in words a person can act on; None: it goes on. ``environment`` is the new
    version's environment state (``envgate``: building, ready, failed, host; "" for none), ``late`` whether
    ``timeout_s`` has passed."""
    if environment == FAILED:
        return f"environment build failed: {first_line(environment_error)}"
    if start_failures >= MAX_START_ATTEMPTS:
        lines = "\n".join(last_error.strip().splitlines()[-QUOTED_LINES:]) or "no output"
        return f"worker exited {start_failures} times while starting: {lines}"
    if late:
        if environment == BUILDING:
            return f"not ready after {timeout_s:g} s: its environment was still building"
        return f"not ready after {timeout_s:g} s: {ready} of {needed} workers ready"
    return None


def ready_to_switch(environment: str, ready: int, needed: int) -> bool:
    """The new version may take over: its environment is there (or none is needed) and enough workers are ready."""
    return environment not in (BUILDING, FAILED) and ready >= needed


def to_start(environment: str, warming: int, needed: int, backing_off: bool, starting: int = 0) -> int:
    """How many more standby workers to start now: one at a time (none while one of its group is ``starting``), and
    none while the environment builds or starts back off. A worker's start is the CPU-heaviest moment of its life
    (the interpreter, its imports, the model): one at a time keeps a rollout from starving what serves meanwhile."""
    if environment in (BUILDING, FAILED) or backing_off or starting:
        return 0
    return min(max(needed - warming, 0), 1)


def may_drain(*, fits: bool, wanted: int, draining: bool, starting: int) -> bool:
    """Retire one more old worker to make room: a new worker is wanted and none fits, no old worker retired for this
    rollout still holds its devices, and no new worker is still starting (one at a time: the endpoint serves on with
    the rest, and is never short of more than one worker)."""
    return wanted > 0 and not fits and not draining and not starting


class Together:
    """The rollouts of one version's endpoints (keys), which switch together: a ready one waits, taking nothing,
    until every one is ready; then all switch in the same reconcile, so no caller sees one endpoint on the new
    version and another on the old. One that fails is its caller's to answer for (it cancels the others)."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.keys = frozenset(keys)
        self.ready: set[str] = set()

    def arrive(self, key: str) -> bool:
        """``key`` is ready; whether every one is."""
        self.ready.add(key)
        return self.complete

    def leave(self, key: str) -> None:
        """``key`` is no longer ready (a new worker of it died)."""
        self.ready.discard(key)

    @property
    def complete(self) -> bool:
        return self.ready >= self.keys


# ------------------------------------------------------------------------------------------------------------------
# the collaborator


@dataclass(eq=False)
class Rollout:
    """One rollout in flight."""

    key: str
    ep: EndpointState
    #: the endpoint was not registered before: it is the new version itself, and failing takes it away
    first: bool
    needed: int
    #: monotonic time by which it must be ready
    deadline: float
    timeout_s: float
    on_stage: Callable[[str, str], None] | None
    future: asyncio.Future[None]
    #: old workers retired to make room for new ones
    drained: set[str] = field(default_factory=set)
    #: the devices of the last one retired, for this rollout's next new worker (held as ``KEPT`` once free)
    room: tuple[Device, ...] = ()
    kept: list[Device] = field(default_factory=list)
    last_stage: tuple[str, str] = ("", "")
    #: the rollouts it switches with (None: alone)
    together: Together | None = None
    #: switched or abandoned by the plane (a caller's cancel cancels ``future`` too, and is not an end)
    ended: bool = False

    def stage(self, stage: str, detail: str) -> None:
        if (stage, detail) != self.last_stage:
            self.last_stage = (stage, detail)
            log.info("rollout of %s: %s %s", self.key, stage, detail)
            if self.on_stage is not None:
                self.on_stage(stage, detail)


class Rollouts:
    """The plane's rollouts: ``roll_out`` stages one and waits for it; each reconcile moves every one on (``step``)."""

    def __init__(
        self,
        state: PlaneState,
        *,
        registry: EndpointRegistry,
        supervision: WorkerSupervision,
        envs: EnvironmentGate | None,
        dispatch: Callable[[EndpointState], None],
        serve_held: Callable[[EndpointState], None],
        take_away: Callable[[str, str], int],
        kick: Callable[[], None],
    ) -> None:
        """``dispatch(ep)`` hands queued jobs to workers in a job-take; ``serve_held(ep)`` hands held requests to
        ready route workers; ``take_away(key, reason)`` unregisters an endpoint (a first rollout that failed)."""
        self._state = state
        self._registry = registry
        self._supervision = supervision
        self._envs = envs
        self._dispatch = dispatch
        self._serve_held = serve_held
        self._take_away = take_away
        self._kick = kick
        #: the rollouts in flight, by endpoint key
        self.active: dict[str, Rollout] = {}

    async def roll_out(
        self,
        spec: EndpointSpec,
        target: WorkerTarget,
        code_file: str | None,
        *,
        timeout_s: float,
        on_stage: Callable[[str, str], None] | None,
        together: Together | None = None,
    ) -> None:
        """Stage ``spec`` (the module's docstring says how) and return once it serves; with ``together``, once it
        and the other rollouts of that group switched at once.

        Raises:
            ConflictError: a rollout of the endpoint is already running.
            RolloutFailed: it never became ready, and was abandoned.
        """
        key = spec.key
        if key in self.active:
            raise ConflictError(f"a rollout of endpoint {key!r} is still running; wait for it to end")
        ep = self._state.endpoints.get(key)
        first = ep is None
        if ep is None:
            self._registry.register(spec, target, code_file)
            ep = self._state.endpoints[key]
            needed = min(minimum(ep), spec.workers_max)  # the planner starts them: those it keeps (a task's: none)
        else:
            record = EndpointState(spec, target, registered_at=ep.registered_at)
            if spec.dependencies == ep.spec.dependencies and ep.environment is not None:
                record.environment = ep.environment  # the same requirements: no second build
            ep.staged = Staged(ep.generation + 1, record, code_file)
            needed = warm_count(spec.workers_min, spec.workers_max, len(ep.live_workers()))
        future = asyncio.get_running_loop().create_future()
        now = self._state.clock.monotonic()
        rollout = Rollout(key, ep, first, needed, now + timeout_s, timeout_s, on_stage, future, together=together)
        self.active[key] = rollout
        self._kick()
        try:
            await future
        finally:
            if not rollout.ended:  # the caller gave up waiting (cancelled, which cancels the future): so does the plane
                self._abandon(rollout, "the rollout was cancelled", raise_=False)
            if self.active.get(key) is rollout:
                del self.active[key]

    def abandon(self, key: str, reason: str) -> None:
        """Give up the rollout of ``key``, if one runs, without taking a new endpoint away (its caller does)."""
        rollout = self.active.get(key)
        if rollout is not None and not rollout.future.done():
            self._abandon(rollout, reason, take_away=False)

    def close(self, reason: str = "the control plane is closing") -> None:
        """The plane is closing (or draining): every rollout in flight is abandoned."""
        for key in list(self.active):
            self.abandon(key, reason)

    def step(self) -> None:
        """Move every rollout on (from each reconcile, before the planner plans)."""
        rollouts = [r for r in self.active.values() if not r.future.done()]
        # the devices an old worker gave up are its own rollout's: held before any rollout places, else another
        # endpoint's rollout of the same deploy (or the planner) takes them and this endpoint waits with no worker
        for rollout in rollouts:
            self._keep_room(rollout)
        for rollout in rollouts:
            if not rollout.future.done():
                self._step(rollout)
        # a group made complete by a later rollout of this pass: its earlier ones switch now, in the same reconcile
        for rollout in rollouts:
            if not rollout.future.done() and rollout.together is not None and rollout.together.complete:
                self._step(rollout)

    # ----------------------------------------------------------------------------------------------------------------

    def _step(self, r: Rollout) -> None:
        ep = r.ep
        staged = ep.staged
        if self._state.endpoints.get(r.key) is not ep or (not r.first and staged is None):
            self._abandon(r, "the endpoint was taken away", take_away=False)
            return
        gen = ep if staged is None else staged.record
        environment = self._environment(gen)
        workers = self._generation(r)
        ready = sum(1 for w in workers if w.state is WorkerState.IDLE or w.state is WorkerState.RUNNING)
        now = self._state.clock.monotonic()
        reason = abandon_reason(
            environment=environment,
            environment_error=gen.environment.error if gen.environment is not None else "",
            start_failures=gen.start_failures,
            last_error=gen.last_start_error,
            late=now >= r.deadline,
            timeout_s=r.timeout_s,
            ready=ready,
            needed=r.needed,
        )
        if reason is not None:
            self._abandon(r, reason)
            return
        if environment == BUILDING:
            r.stage(BUILD, f"building its environment ({', '.join(gen.spec.dependencies)})")
            return
        if ready_to_switch(environment, ready, r.needed):
            if r.together is None or r.together.arrive(r.key):
                r.stage(WARM, f"{ready}/{r.needed} ready")
                self._switch(r)
            else:
                r.stage(WARM, f"{ready}/{r.needed} ready; waiting for the version's other endpoints")
            return
        if r.together is not None:
            r.together.leave(r.key)
        r.stage(WARM, f"{ready}/{r.needed} ready")
        if staged is not None:  # a first rollout's workers are the planner's to start
            self._warm(r, staged, len(workers), len(workers) - ready, backing_off=gen.next_start_at > now)

    def _environment(self, gen: EndpointState) -> str:
        """The generation's environment state, its build begun if it has none yet; "" when it needs none."""
        if not gen.spec.dependencies or self._envs is None:
            return ""
        if gen.environment is None:
            self._envs.start_missing((gen,))
        return gen.environment.state if gen.environment is not None else BUILDING

    def _generation(self, r: Rollout) -> list[Worker]:
        """The new version's workers not stopping: a first rollout's live ones, else the standby ones."""
        ep, staged = r.ep, r.ep.staged
        if staged is None:
            return ep.live_workers()
        return [
            w
            for w in ep.workers.values()
            if w.standby and w.generation == staged.number and w.state is not WorkerState.STOPPING
        ]

    def _group_starting(self, r: Rollout) -> int:
        """The new workers still starting of the other rollouts of ``r``'s group (they start one at a time too)."""
        if r.together is None:
            return 0
        return sum(
            1
            for other in self.active.values()
            if other is not r and other.together is r.together and not other.future.done()
            for w in self._generation(other)
            if w.state is WorkerState.STARTING
        )

    def _keep_room(self, r: Rollout) -> None:
        index = self._state.index
        for device in r.room:
            if device not in r.kept and device in index and index.is_free(device):
                index.hold((device,), Holder("", KEPT))
                r.kept.append(device)

    def _give_back_room(self, r: Rollout, *, used: bool) -> None:
        """Let go of the devices kept for ``r`` (its new worker is about to be placed, or it ended); ``used``: the
        room is no longer owed."""
        self._state.index.release(r.kept)
        r.kept.clear()
        if used:
            r.room = ()

    def _warm(self, r: Rollout, staged: Staged, warming: int, starting: int, *, backing_off: bool) -> None:
        """Start the standby workers still wanted where they fit; where none does, retire one old worker (an idle one
        when that makes room)."""
        ep, spec = r.ep, staged.record.spec
        wanted = to_start("", warming, r.needed, backing_off, starting + self._group_starting(r))
        if wanted > 0:
            self._give_back_room(r, used=False)  # free for this placement only
            try:
                while wanted > 0:
                    result = place_endpoint(spec, self._state.index)
                    if isinstance(result, NoFit):
                        break
                    before = len(ep.workers)
                    self._supervision.start(ep, result, staged)
                    if len(ep.workers) == before:  # it could not start (a lease elsewhere, a launch that failed)
                        return
                    r.room = ()  # a new worker started: the room made for it is used
                    wanted -= 1
                    starting += 1
            finally:
                self._keep_room(r)  # unused: kept again before the planner plans
        draining = any(worker_id in ep.workers for worker_id in r.drained)
        if not may_drain(fits=False, wanted=wanted, draining=draining, starting=starting):
            return
        old = [w for w in ep.workers.values() if w.live]
        idle = [w for w in old if not w.jobs and not w.in_flight]
        for pool in (idle, old):
            room = place_endpoint(spec, self._state.index, Yielders(Holder(w.id, r.key) for w in pool))
            if not isinstance(room, NoFit) and room.reclaim:
                break
        else:
            return  # the old workers' devices would not make room either: it waits (and times out)
        worker = ep.workers[room.reclaim[0].worker_id]
        log.info("rollout of %s: retiring worker %s to make room for the new version", r.key, worker.id)
        staged.draining = True
        r.drained.add(worker.id)
        r.room = worker.devices
        worker.retiring = True
        if not worker.jobs and not worker.in_flight:
            self._supervision.stop(worker)

    def _switch(self, r: Rollout) -> None:
        ep, staged = r.ep, r.ep.staged
        r.ended = True
        self._give_back_room(r, used=True)
        r.stage(SWITCH, "" if staged is None else f"generation {staged.number}")
        if staged is not None:
            record = staged.record
            ep.staged = None
            # the old workers retire (standby ones are not live, so they stay), and the endpoint takes the new version
            self._registry.redeclare(record.spec, record.target, staged.code_file)
            if record.environment is not None and record.environment is not ep.environment:
                if ep.environment is not None and self._envs is not None:
                    self._envs.forget(ep)  # the same requirements built twice: the old hold goes
                ep.environment = record.environment
            now = self._state.clock.monotonic()
            for worker in ep.workers.values():
                if worker.standby and worker.generation == staged.number:
                    worker.standby = False
                    worker.idle_since = now  # idle from now on, not from its first pull
            ep.generation = staged.number
            self._dispatch(ep)
            self._serve_held(ep)
            self._kick()
        log.info("rollout of %s: switched", r.key)
        if not r.future.done():
            r.future.set_result(None)

    def _abandon(self, r: Rollout, reason: str, *, take_away: bool = True, raise_: bool = True) -> None:
        ep, staged = r.ep, r.ep.staged
        r.ended = True
        self._give_back_room(r, used=True)
        log.warning("rollout of %s abandoned: %s", r.key, reason)
        if r.future.done():
            pass  # its caller cancelled it
        elif raise_:  # before taking a first one's endpoint away, which abandons what is still running
            r.future.set_exception(RolloutFailed(reason))
        else:
            r.future.cancel()
        if staged is not None:
            ep.staged = None
            for worker in list(ep.workers.values()):
                if worker.standby and worker.generation == staged.number:
                    self._supervision.stop(worker)
            for worker_id in r.drained:  # old workers retired for it and still finishing serve on
                drained = ep.workers.get(worker_id)
                if drained is not None and drained.state is not WorkerState.STOPPING:
                    drained.retiring = False
            environment = staged.record.environment
            if environment is not None and environment is not ep.environment and self._envs is not None:
                self._envs.forget(staged.record)
            self._kick()
        elif r.first and take_away and self._state.endpoints.get(r.key) is ep:
            self._take_away(r.key, f"its first rollout failed: {reason}")
