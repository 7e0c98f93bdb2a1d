"""``/v1/secrets``: the server's secrets over HTTP: ``GET`` lists names, apps and dates; ``PUT /v1/secrets/{name}``
sets a value from the JSON body ``{"value": ...}``; ``DELETE`` removes one. ``?app=A`` scopes a secret to an app.
Server-wide secrets (and the list of every one) are the access rule's ``ADMIN``; an app's own are its ``DEPLOY``
(``api/guard.py``); a worker's caller key is refused. No answer ever holds a value, and no
error quotes one. ``flashpoint serve`` mounts it over its store (``hosting/secretstore.py``); servers without one
have no such routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Query, Request

from flashpoint.access import Operation
from flashpoint.api import schemas
from flashpoint.api.deps import require_api_key
from flashpoint.api.guard import authorize
from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.wire.codec import loads_bounded


class Secrets(Protocol):
    """What the routes need of a secret store (``hosting.secretstore.SecretStore``); a secret's info has ``name``,
    ``app``, ``created`` and ``updated``, and no value."""

    def set(self, name: str, value: str, *, app: str | None = None) -> Any: ...

    def delete(self, name: str, *, app: str | None = None) -> bool: ...

    def list(self, *, app: str | None = None, every: bool = True) -> Sequence[Any]: ...


#: every answer but success is a JSON error body (``api/errors.py``)
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": schemas.ErrorBody, "description": "a bad name, app or body (code `bad_input`)"},
    401: {"model": schemas.ErrorBody, "description": "missing or wrong API key (code `unauthorized`)"},
    403: {"model": schemas.ErrorBody, "description": "a key that may not manage secrets (code `forbidden`)"},
    404: {"model": schemas.ErrorBody, "description": "no such secret (code `not_found`)"},
    413: {"model": schemas.ErrorBody, "description": "a body over the limit (code `payload_too_large`)"},
}
router = APIRouter(tags=["secrets"], dependencies=[Depends(require_api_key)], responses=_ERRORS)

AppQuery = Annotated[str | None, Query(description="The app the secret belongs to (none: server-wide).")]


def _store(request: Request) -> Secrets:
    store: Secrets = request.app.state.secrets
    return store


def _allow(request: Request, app: str | None) -> None:
    # an app's secrets are the app's DEPLOY (decision 0094); server-wide ones, and all of them at once, ADMIN
    if app is None:
        authorize(request, Operation.ADMIN, None, None)
    else:
        authorize(request, Operation.DEPLOY, app, None)


def info_json(info: Any) -> dict[str, Any]:
    """What may be shown of a secret: never its value."""
    return {"name": info.name, "app": info.app, "created": info.created, "updated": info.updated}


@router.get("/secrets", summary="List secrets: names, apps and dates, never values")
async def list_secrets(request: Request, app: AppQuery = None) -> dict[str, Any]:
    _allow(request, app)
    infos = _store(request).list(app=app, every=app is None)
    return {"secrets": [info_json(info) for info in infos]}


@router.put("/secrets/{name}", summary='Set a secret from the body {"value": "..."}; answers without the value')
async def set_secret(request: Request, name: str, app: AppQuery = None) -> dict[str, Any]:
    _allow(request, app)
    try:
        body = loads_bounded(await request.body())
    except (ValueError, UnicodeDecodeError):
        raise BadInputError('send the value as a JSON body {"value": "..."}') from None
    if not isinstance(body, dict) or set(body) != {"value"} or not isinstance(body["value"], str):
        raise BadInputError('send the value as a JSON body {"value": "..."} and nothing else')
    return info_json(_store(request).set(name, body["value"], app=app))


@router.delete("/secrets/{name}", summary="Delete a secret")
async def delete_secret(request: Request, name: str, app: AppQuery = None) -> dict[str, Any]:
    _allow(request, app)
    if not _store(request).delete(name, app=app):
        where = f" of app {app!r}" if app is not None else " (server-wide)"
        raise NotFoundError(f"no secret {name!r}{where}; `flashpoint secret list` shows them")
    return {"deleted": name, "app": app}
