"""FastAPI dependencies of the HTTP routes: the app's control plane and the API key check."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from flashpoint.api.runpod import CALLER_REFUSED, started_by
from flashpoint.api.workers import key_matches
from flashpoint.errors import NotFoundError
from flashpoint.scheduler.credentials import bearer, caller_of
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
    """Refuse the request with 401 unless it carries one of ``app.state.api_keys`` (an empty tuple: no auth), or a
    worker's caller key on one of ``CALLER_READS`` (a job it did not start: 404, as if there were none)."""
    keys: tuple[str, ...] = getattr(request.app.state, "api_keys", ())
    header = request.headers.get("authorization")
    if not keys or key_matches(header, keys):
        return
    plane = get_plane(request)
    caller = caller_of(bearer(header), plane.worker_credential)
    if caller is None:
        raise HTTPException(
            401,
            detail={"code": "unauthorized", "message": "send the API key as Authorization: Bearer KEY"},
            headers={"WWW-Authenticate": "Bearer"},
        )
    path = getattr(request.scope.get("route"), "path", "")
    if request.method not in ("GET", "HEAD") or path.removeprefix("/v1") not in CALLER_READS:
        raise HTTPException(403, detail={"code": "forbidden", "message": CALLER_REFUSED})
    job_id = request.path_params.get("job_id")
    if job_id is not None and not started_by(plane.job(job_id), caller[1]):
        raise NotFoundError(f"no job {job_id!r}")
