"""FastAPI dependencies of the HTTP routes: the app's control plane and the API key check."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from flashpoint.api.workers import key_matches
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


async def require_api_key(request: Request) -> None:
    """Refuse the request with 401 unless it carries one of ``app.state.api_keys`` (an empty tuple: no auth)."""
    keys: tuple[str, ...] = getattr(request.app.state, "api_keys", ())
    if keys and not key_matches(request.headers.get("authorization"), keys):
        raise HTTPException(
            401,
            detail={"code": "unauthorized", "message": "send the API key as Authorization: Bearer KEY"},
            headers={"WWW-Authenticate": "Bearer"},
        )
