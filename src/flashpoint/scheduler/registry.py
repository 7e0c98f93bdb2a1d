"""The endpoints a plane serves: registering one (a name declared again must keep its options), giving one new
options and code (``redeclare``, ``flashpoint dev`` reloading a file), and each endpoint's "can never run" verdict on
the fleet, made again when the fleet moves. Nodes that left the fleet are remembered here until they are back
(``departed``): what only they could hold waits for them (``node_away``) instead of never running.

``EndpointRegistry`` is a collaborator of ``ControlPlane``, over the plane's state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from flashpoint.errors import InvalidEndpointError
from flashpoint.explain import WaitReason
from flashpoint.fleet.inventory import Fleet
from flashpoint.scheduler import departed, views
from flashpoint.scheduler.envgate import EnvironmentGate, check_system
from flashpoint.scheduler.placement.fit import NoFit
from flashpoint.scheduler.records import EndpointState, Worker
from flashpoint.scheduler.routeserving import same_but_routes
from flashpoint.scheduler.state import PlaneState
from flashpoint.spec import EndpointSpec, WorkerTarget, options_of

log = logging.getLogger("flashpoint.plane")


class EndpointRegistry:
    """Adds and redeclares the plane's endpoints, and judges whether each can ever run on the fleet."""

    def __init__(
        self,
        state: PlaneState,
        *,
        code_files: dict[str, str],
        envs: EnvironmentGate | None,
        fleet_summary: Callable[[EndpointSpec | None], str],
        stop_worker: Callable[[Worker], None],
        kick: Callable[[], None],
    ) -> None:
        """``code_files`` are the supervisor's pickled code per endpoint (written here); ``envs`` builds environments
        on this machine (None: the backend does); ``stop_worker`` stops a retired worker with nothing left to do."""
        self._state = state
        self._code_files = code_files
        self._envs = envs
        self._fleet_summary = fleet_summary
        self._stop_worker = stop_worker
        self._kick = kick
        #: nodes that left the fleet, by name, until they are back (``departed``): what only they could hold waits
        self.departed: dict[str, departed.Departed] = {}
        #: per endpoint, its candidates only a departed node could hold, and their ``node_away`` reasons
        self.away: dict[str, dict[str, WaitReason]] = {}

    def register(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None) -> None:
        """Add an endpoint; ``code_file`` holds its pickled code when ``target`` names no import path or command."""
        existing = self._state.endpoints.get(spec.key)
        if existing is not None:
            # the functions and classes of one name differ in kind and methods only (spec.options_of); a route
            # endpoint's routes may grow as they are declared: the workers started from then on serve them all
            if same_but_routes(existing.spec, spec):
                existing.spec = spec
            elif options_of(existing.spec) != options_of(spec):
                raise InvalidEndpointError(
                    f"endpoint {spec.key!r} is already registered with other options; declare every function or "
                    "class of one endpoint with the same options, or give each endpoint its own name"
                )
            if target != existing.target:
                # more functions joined a shared name: the workers started from now on load them all
                existing.target = target
                if code_file is not None:
                    self._code_files[spec.key] = code_file
            return
        if code_file is not None:
            self._code_files.setdefault(spec.key, code_file)
        ep = EndpointState(spec, target, registered_at=self._state.clock.time())
        ep.never = self._judge(ep)
        if ep.never is not None:
            log.warning(self._never_message(spec, ep.never))
        if self._envs is not None:  # its workers run on this machine: say once what they will lack
            ep.system_missing = check_system(spec)
        self._state.endpoints[spec.key] = ep
        if spec.serves_routes:
            self._state.routed[spec.key] = ep
        self._kick()

    def _never_message(self, spec: EndpointSpec, nofit: NoFit) -> str:
        return views.never_message(spec, nofit, self._state.index)

    def _judge(self, ep: EndpointState) -> NoFit | None:
        """The endpoint's "can never run" verdict on this fleet; its candidates only a departed node could hold wait
        for that node (``node_away``) instead."""
        never, away = departed.judge(ep.spec, self._state.index, self.departed)
        self.away[ep.spec.key] = away
        return never

    def redeclare(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None) -> int:
        """Give an endpoint new options and code (``flashpoint dev`` reloading a changed file); a new one is
        registered. Its queued jobs (a route endpoint: its held requests) stay, for the workers started from now on,
        which load the new code. Each of its workers is retired: it takes nothing new and stops once its running jobs
        (a route worker: its requests in flight) end. Returns how many workers were retired.

        A queue endpoint that now serves routes keeps queued jobs no route worker takes: purge them first.
        """
        ep = self._state.endpoints.get(spec.key)
        if ep is None:
            self.register(spec, target, code_file)
            return 0
        if self._envs is not None and spec.dependencies != ep.spec.dependencies:
            self._envs.forget(ep)
        ep.spec, ep.target = spec, target
        if code_file is not None:
            self._code_files[spec.key] = code_file
        else:
            self._code_files.pop(spec.key, None)
        if spec.serves_routes:
            self._state.routed[spec.key] = ep
        else:
            self._state.routed.pop(spec.key, None)
        ep.never = self._judge(ep)
        if ep.never is not None:
            log.warning(self._never_message(spec, ep.never))
        # new code starts afresh: no back-off left from the failed starts of the old one
        ep.start_failures = ep.start_losses = 0
        ep.next_start_at = 0.0
        retired = self.retire(ep)
        self._kick()
        return retired

    def retire(self, ep: EndpointState) -> int:
        """Each live worker of ``ep`` takes nothing new and stops once its running jobs (a route worker: its requests
        in flight) end; an idle one stops now. A rollout's standby workers are not live: they stay. Returns how many
        were retired."""
        retired = [worker for worker in ep.workers.values() if worker.live]
        for worker in retired:
            worker.retiring = True
            # else the end of its last job (supervision's after_job), or its last request in flight
            # (release_route_worker), stops it
            if not worker.jobs and not worker.in_flight:
                self._stop_worker(worker)
        return len(retired)

    def unregister(self, ep: EndpointState) -> None:
        """Take ``ep`` away (its queue already emptied): its workers retire as ``redeclare`` retires them, and it
        leaves the plane's lookups, views and plans now, so its key is free for another. Its workers still finishing
        their jobs keep its record in ``leaving`` until they are gone."""
        self.retire(ep)
        key = ep.spec.key
        if self._state.endpoints.get(key) is ep:
            del self._state.endpoints[key]
        if self._state.routed.get(key) is ep:
            del self._state.routed[key]
        self._code_files.pop(key, None)
        self.away.pop(key, None)
        if self._envs is not None:  # its environment's hold goes (a build in flight finishes for nobody)
            self._envs.forget(ep)
        for worker in ep.workers.values():
            self._state.leaving[worker.id] = ep
        self._kick()

    def remember_departed(self, fleet: Fleet, now: float) -> None:
        """The fleet becomes ``fleet`` (the index still holds the one before): the nodes it lacks are remembered as
        departed (since ``now``, wall time), and those back are forgotten."""
        index = self._state.index
        self.departed = departed.departures(self.departed, index.devices, index.nodes.nodes, fleet, now)

    def judge_again(self) -> None:
        """The fleet moved: every endpoint's "can never run" verdict is made again, so a request waiting for a model
        (or a node large enough, in its datacenter) runs once one joins; what waits for a departed node says so."""
        for ep in self._state.endpoints.values():
            waited = bool(self.away.get(ep.spec.key))
            never = self._judge(ep)
            if never is None and ep.never is not None:
                log.info("endpoint %r can run now: the fleet has %s", ep.spec.key, self._fleet_summary(None))
            elif never is not None and ep.never is None:
                log.warning(self._never_message(ep.spec, never))
            for r in self.away[ep.spec.key].values() if not waited else ():
                log.warning("endpoint %r: %s waits for its node to return: %s", ep.spec.key, r.candidate, r.detail)
            ep.never = never
