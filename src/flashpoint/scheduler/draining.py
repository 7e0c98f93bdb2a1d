"""Draining a plane before it stops (``flashpoint serve`` on SIGTERM, decision 0105): it takes no new work (a job
submitted or a request to a route endpoint is refused with 503, a worker's long poll gets nothing, no worker starts,
a rollout in flight is abandoned), while the jobs and requests already running finish; each worker stops once it has
nothing left. Queued jobs stay queued: a durable plane keeps them for its next start. What the server waits on is
``busy``: the jobs running on workers and the route requests in flight.

Functions over ``PlaneState`` and the registry, called by ``ControlPlane.drain``.
"""

from __future__ import annotations

from flashpoint.errors import BackendError
from flashpoint.scheduler.protocol import release_takers
from flashpoint.scheduler.registry import EndpointRegistry
from flashpoint.scheduler.rollout import Rollouts
from flashpoint.scheduler.state import PlaneState

#: what a caller hears while the server drains
STOPPING = (
    "the server is stopping: it takes no new work while the jobs already running finish; send this again once it "
    "is back (queued jobs are kept and run then)"
)


def drain(state: PlaneState, registry: EndpointRegistry, rollouts: Rollouts) -> None:
    """Stop taking new work (see the module's docstring); a second call does nothing."""
    if state.draining or state.closing:
        return
    state.draining = True
    rollouts.close("the server is stopping")
    for ep in state.endpoints.values():
        registry.retire(ep)
        release_takers(ep, None)


def busy(state: PlaneState) -> int:
    """The jobs running on workers and the route requests in flight: what a drain waits for."""
    return sum(len(worker.jobs) + worker.in_flight for worker in state.workers.values())


def refuse_if_draining(state: PlaneState) -> None:
    """Raise the 503 a caller hears while the plane drains."""
    if state.draining:
        raise BackendError(STOPPING)
