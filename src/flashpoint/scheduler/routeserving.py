"""HTTP-route endpoints on the plane: which worker takes a request, requests held until a worker is ready, and when
a route worker is ready.

``RouteServing`` is a collaborator of ``ControlPlane`` beside ``WorkerProtocol``: the route side of the same state
machine, over the plane's state. A route worker is placed, scaled, stopped and explained as any worker; what differs is
only how work reaches it (the server's proxy forwards HTTP requests to its address instead of the worker pulling jobs)
and how it says it is ready (its ``GET /ping`` answers 200; the plane polls it, see ``readiness``), and that every
request to it, the readiness probe's included, carries its route secret (``route_secret``). So the records
carry the route side in the fields the planner already reads: a request held for a worker counts in ``ep.queued`` (a
route endpoint has no jobs), a worker serving requests is RUNNING, one serving none IDLE; ``ep.in_flight`` is the
REQUEST_COUNT scaler's load.

Invariants: a request is handed to a ready, live worker only (never a starting or stopping one), to the one with the
fewest requests in flight (``least_in_flight``); every request handed out is released exactly once, so the in-flight
counts are exact; a held request is answered once: with a worker, or with the endpoint's explanation (its wait
ended, or every start failed), and ``ep.queued`` counts it until then; polling costs queue endpoints nothing (only
route workers are polled, and only while they start).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable

from flashpoint.errors import BadInputError
from flashpoint.explain import Explanation
from flashpoint.scheduler import readiness
from flashpoint.scheduler.credentials import route_credential
from flashpoint.scheduler.readiness import Probe, Verdict
from flashpoint.scheduler.records import EndpointState, Worker, WorkerState
from flashpoint.scheduler.state import PlaneState
from flashpoint.spec import EndpointSpec, ServerlessScalerType
from flashpoint.wire import coldstart

log = logging.getLogger("flashpoint.plane")

_IDLE, _RUNNING = WorkerState.IDLE, WorkerState.RUNNING


def least_in_flight(workers: Iterable[Worker]) -> Worker | None:
    """The worker a request goes to: of the ready, live ones (IDLE or RUNNING, not retiring, not a rollout's standby),
    the one with the fewest requests in flight; on a tie the first given (an endpoint's workers are given in start
    order, so the oldest: load gathers on old workers and the newest go idle first, which is what scale-down stops).
    None: no worker is ready."""
    best: Worker | None = None
    for worker in workers:
        state = worker.state
        if (state is _IDLE or state is _RUNNING) and not worker.retiring and not worker.standby:
            if best is None or worker.in_flight < best.in_flight:
                best = worker
                if not worker.in_flight:
                    break  # nobody has fewer than none
    return best


def same_but_routes(old: EndpointSpec, new: EndpointSpec) -> bool:
    """Two declarations of one route endpoint that differ in their routes only (more were declared since)."""
    return (
        old.serves_routes
        and new.serves_routes
        and dataclasses.replace(old, routes=()) == dataclasses.replace(new, routes=())
    )


def not_a_queue_endpoint(name: str) -> BadInputError:
    """What submitting a job to a route endpoint raises (its workers pull no jobs)."""
    return BadInputError(
        f"endpoint {name!r} serves HTTP routes, not jobs; call them as METHOD /{name}/<path> on the server, e.g. "
        "with Endpoint(id=...).post(path, data)",
        code="not_a_queue_endpoint",
    )


def oldest_held(ep: EndpointState) -> float | None:
    """Wall time at which the oldest request still held for ``ep`` arrived."""
    for since, future in ep.held:
        if not future.done():
            return since
    return None


class RouteServing:
    """The route side of the plane: the verbs the server's proxy uses, and route workers' readiness."""

    def __init__(
        self,
        state: PlaneState,
        *,
        probe: Probe,
        ready_timeout_s: float,
        poll_s: tuple[float, float],
        credential: Callable[[str, str], str],
        explain: Callable[[str], Explanation],
        stop_worker: Callable[[Worker], None],
        failed_start: Callable[[Worker, str], None],
        kick: Callable[[], None],
        kick_if_someone_waits: Callable[[], None],
    ) -> None:
        """``probe`` asks a worker's ``/ping``; ``credential(endpoint, worker id)`` is a worker's key (its route
        secret derives from it); ``explain(endpoint)`` is what a request given up on is answered with;
        ``stop_worker`` stops a retiring worker once its last request is answered; ``failed_start(worker, why)``: a
        starting worker did not answer ``/ping`` 200 in time (supervision gives it up, as a failed start)."""
        self._state = state
        # the state's containers never change (only their contents): kept, as the proxy's verbs run per request
        self._workers = state.workers
        self._clock = state.clock
        self._probe = probe
        #: how long a route worker may take to answer /ping 200 before it counts as a failed start
        self.route_ready_timeout_s = ready_timeout_s
        #: the first and the longest pause between two asks of a starting route worker's /ping
        self._poll_s = poll_s
        self._credential = credential
        self._explain = explain
        self._stop_worker = stop_worker
        self._failed_start = failed_start
        self._kick = kick
        self._kick_if_someone_waits = kick_if_someone_waits
        self._polls: set[asyncio.Task[None]] = set()

    # ----------------------------------------------------------------------------------------------------------------
    # the proxy's verbs (on the plane's loop)

    def route_secret(self, worker: Worker) -> str:
        """What the proxy presents to ``worker`` on every request (``wire.ROUTE_SECRET_HEADER``), as the worker got it
        in ``FLASHPOINT_ROUTE_SECRET``: derived from its worker key, computed once."""
        secret = worker.route_secret
        if not secret:
            key = self._credential(worker.endpoint, worker.id)
            secret = worker.route_secret = route_credential(key, worker.endpoint, worker.id)
        return secret

    def take_route_worker(self, ep: EndpointState) -> Worker | None:
        """A ready worker for one request now, counted in flight until ``release_route_worker``; None: none is
        ready (hold the request with ``hold_route_worker``)."""
        worker = least_in_flight(ep.workers.values())
        if worker is not None:
            self._hand(ep, worker)
        return worker

    async def hold_route_worker(self, ep: EndpointState, timeout_s: float) -> Worker | Explanation:
        """Hold a request until a worker of ``ep`` is ready (the held request is demand: with no worker, one
        starts), at most ``timeout_s``; the worker, counted in flight, or, when the wait ended first or no worker
        could start, the endpoint's explanation as it was then (the request still counted as held, so it says what
        the request waited for)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Worker | Explanation] = loop.create_future()
        held = ep.held
        while held and held[0][1].done():  # requests that gave up leave from the front
            held.popleft()
        held.append((self._clock.time(), future))
        ep.traffic.arrived(self._clock.monotonic(), busy=bool(ep.queued or ep.in_flight))
        ep.queued += 1
        self._kick()

        def give_up() -> None:
            if not future.done():
                future.set_result(self._explain(ep.spec.key))
                ep.queued -= 1  # its entry stays in ``held`` (done), dropped when it reaches the front

        timer = loop.call_later(timeout_s, give_up)
        try:
            return await future
        except asyncio.CancelledError:  # the client hung up while held
            if future.cancelled():
                ep.queued -= 1
            elif isinstance(worker := future.result(), Worker):  # handed a worker in the same turn: hand it back
                self.release_route_worker(ep, worker)
            raise
        finally:
            timer.cancel()

    def release_route_worker(self, ep: EndpointState, worker: Worker, took_s: float | None = None) -> None:
        """The request handed to ``worker`` is answered (or failed): one fewer in flight. A retiring worker (its
        endpoint was redeclared) stops once its last request is answered, as a queue worker does after its last
        job."""
        worker.in_flight -= 1
        ep.in_flight -= 1
        now = self._clock.monotonic()
        ep.traffic.ended(now)
        if took_s is not None:
            ep.signals.answered(now, took_s)
        if not worker.in_flight and worker.state is _RUNNING:
            worker.state = _IDLE
            worker.idle_since = self._clock.monotonic()
            self._state.usage.observe(worker)
            if worker.retiring and self._workers.get(worker.id) is worker:
                self._stop_worker(worker)
            self._kick_if_someone_waits()

    def _hand(self, ep: EndpointState, worker: Worker) -> None:
        worker.in_flight += 1
        worker.state = _RUNNING
        self._state.usage.observe(worker)
        ep.in_flight += 1
        spec = ep.spec
        # REQUEST_COUNT wants ceil(in_flight / scaler_value) workers: reconcile once that passes the workers there
        # are (a cheap bound; the tick reconciles anyway), not on every request
        if (
            spec.scaler_type is ServerlessScalerType.REQUEST_COUNT
            and ep.in_flight > spec.scaler_value * len(ep.workers)
            and len(ep.workers) < spec.workers_max
        ):
            self._kick()

    def serve_held(self, ep: EndpointState) -> None:
        """Hand held requests, oldest first, to the ready workers (a worker just became ready, or a rollout switched
        to its new ones)."""
        held = ep.held
        while held:
            future = held[0][1]
            if future.done():
                held.popleft()
                continue
            worker = least_in_flight(ep.workers.values())
            if worker is None:
                return
            held.popleft()
            ep.queued -= 1
            self._hand(ep, worker)
            future.set_result(worker)

    def give_up_held(self, ep: EndpointState) -> None:
        """Answer every held request of ``ep`` now with the endpoint's explanation (no worker of it could start, or
        the plane is closing: waiting will not help)."""
        if not ep.queued:
            return
        explanation = self._explain(ep.spec.key)  # while they still count: it says what they waited for
        held = ep.held
        while held:
            future = held.popleft()[1]
            if not future.done():
                ep.queued -= 1
                future.set_result(explanation)

    # ----------------------------------------------------------------------------------------------------------------
    # readiness

    def watch_ready(self, worker: Worker) -> None:
        """Poll a started route worker's /ping until it is ready, gone, or past the limit."""
        task = asyncio.get_running_loop().create_task(self._poll_ready(worker))
        self._polls.add(task)
        task.add_done_callback(self._polls.discard)

    def _starting(self, worker: Worker) -> bool:
        return (
            not self._state.closing and self._workers.get(worker.id) is worker and worker.state is WorkerState.STARTING
        )

    async def _poll_ready(self, worker: Worker) -> None:
        address = worker.address
        asked = 0
        while address is not None and self._starting(worker):
            status = await self._probe(address, readiness.PROBE_TIMEOUT_S, self.route_secret(worker))
            if not self._starting(worker):
                return
            waited = self._clock.monotonic() - worker.started_at
            verdict = readiness.verdict(status, waited, self.route_ready_timeout_s)
            if verdict is Verdict.READY:
                self._route_ready(worker)
                return
            if verdict is Verdict.TIMED_OUT:
                self._never_ready(worker, status)
                return
            await asyncio.sleep(readiness.delay(asked, *self._poll_s))
            asked += 1

    def _route_ready(self, worker: Worker) -> None:
        ep = self._state.endpoints[worker.endpoint]
        worker.state = _IDLE
        worker.ever_ready = True
        worker.idle_since = self._clock.monotonic()
        ep.start_failures = ep.start_losses = 0
        ep.traffic.cold_start(worker.idle_since - worker.started_at)  # keep-warm's cost of a cold start
        # its start's phases (decision 0118): a route worker reports none, so launch to its first 200 is process
        worker.phases = coldstart.ready_phases(worker.phases, worker.idle_since - worker.started_at, None)
        self._state.usage.observe(worker)
        log.info("worker %s of %s is ready at %s", worker.id, worker.endpoint, worker.address)
        self.serve_held(ep)
        self._kick_if_someone_waits()

    def _never_ready(self, worker: Worker, status: int | None) -> None:
        """A failed start: the worker did not answer /ping 200 within the limit. It is given up at once (killed,
        its devices back), so the back-off and the explanation, the held requests' included, are a failed start's
        (not a stopping worker's)."""
        why = (
            f"it was not ready within {self.route_ready_timeout_s:g}s (FLASHPOINT_ROUTE_READY_TIMEOUT_S): "
            f"{readiness.describe(status)}"
        )
        worker.stderr_tail.append(f"flashpoint: worker {worker.id} {why}")
        self._failed_start(worker, why)

    async def close(self) -> None:
        """Stop polling; answer every held request (the plane is closing)."""
        for task in list(self._polls):
            task.cancel()
        for ep in self._state.routed.values():
            self.give_up_held(ep)
