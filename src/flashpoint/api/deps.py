"""FastAPI dependencies of the HTTP routes: the app's control plane, the key check, and the access rule's operations
for routes that need one key for everything (``require_admin``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from flashpoint.access import Operation
from flashpoint.api.guard import authorize, caller_worker, principal_of
from flashpoint.api.runpod import CALLER_REFUSED, started_by
from flashpoint.errors import NotFoundError
from flashpoint.scheduler.loop import ControlPlane


def get_plane(request: Request) -> ControlPlane:
    """The control plane of the app serving this request (``app.state.plane``)."""
    plane: ControlPlane = request.app.state.plane
    return plane


async def _plane(request: Request) -> ControlPlane:
    # async: FastAPI resolves it on the event loop, where a sync dependency would cost a hop to its thread pool
    return get_plane(request)


#: a route parameter typed ``plane: Plane`` receives the app's ControlPlane
Plane = Annotated[ControlPlane, Depends(_plane)]


#: the native reads a worker's caller key opens (GET): the endpoint check client mode registers with, and the jobs
#: that worker started (its wait long poll included); every other /v1 route refuses it
CALLER_READS = frozenset({"/endpoints/{name}", "/jobs/{job_id}", "/jobs/{job_id}/wait"})


async def require_api_key(request: Request) -> None:
    """Refuse the request with 401 unless its key is one the server knows (``api/guard.py``: the server's own keys,
    a scoped key, none needed on a server without keys), or a worker's caller key on one of ``CALLER_READS`` (a job
    it did not start: 404, as if there were none). Which operations the key may perform is each route's to check."""
    who = principal_of(request)
    worker = caller_worker(who)
    if worker is None:
        return
    path = getattr(request.scope.get("route"), "path", "")
    if request.method not in ("GET", "HEAD") or path.removeprefix("/v1") not in CALLER_READS:
        raise HTTPException(403, detail={"code": "forbidden", "message": CALLER_REFUSED})
    job_id = request.path_params.get("job_id")
    if job_id is not None and not started_by(get_plane(request).job(job_id), worker):
        raise NotFoundError(f"no job {job_id!r}")


async def require_admin(request: Request) -> None:
    """``require_api_key``, then the access rule's ``ADMIN`` on the server (403 naming the admin scope)."""
    await require_api_key(request)
    authorize(request, Operation.ADMIN, None, None)
