"""``/v1/keys``: the server's scoped keys over HTTP, for admin keys: ``POST`` makes one from the JSON body
``{"name", "scope", "app"?, "env"?}`` and answers its token, once; ``GET`` lists names, scopes, apps, envs and dates;
``DELETE /v1/keys/{name}`` revokes one. No answer but the creation holds a token, and none holds a hash.
Every route is the access rule's ``ADMIN`` (``api/guard.py``). ``flashpoint serve`` mounts it over its store
(``hosting/keystore.py``, as ``app.state.keys``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from fastapi import APIRouter, Depends, Request

from flashpoint.api import schemas
from flashpoint.api.deps import require_admin
from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.wire.codec import loads_bounded


class Keys(Protocol):
    """What the routes need of a key store (``hosting.keystore.KeyStore``); a key's info has ``name``, ``scope``,
    ``app``, ``env``, ``created`` and ``created_by``, and no token."""

    def create(
        self, name: str, *, scope: str, app: str | None = None, env: str | None = None, by: str
    ) -> tuple[Any, str]: ...

    def list(self) -> Sequence[Any]: ...

    def revoke(self, name: str) -> bool: ...


#: every answer but success is a JSON error body (``api/errors.py``)
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": schemas.ErrorBody, "description": "a bad name, scope, app, env or body (code `bad_input`)"},
    401: {"model": schemas.ErrorBody, "description": "missing or wrong API key (code `unauthorized`)"},
    403: {"model": schemas.ErrorBody, "description": "a key that may not manage keys (code `forbidden`)"},
    404: {"model": schemas.ErrorBody, "description": "no such key (code `not_found`)"},
    409: {"model": schemas.ErrorBody, "description": "a key of that name exists (code `conflict`)"},
    413: {"model": schemas.ErrorBody, "description": "a body over the limit (code `payload_too_large`)"},
}
router = APIRouter(tags=["keys"], dependencies=[Depends(require_admin)], responses=_ERRORS)

_BODY = 'send {"name": N, "scope": "admin"|"deploy"|"invoke", "app"?: A, "env"?: E} as the JSON body'
_FIELDS = {"name", "scope", "app", "env"}


def _store(request: Request) -> Keys:
    store: Keys = request.app.state.keys
    return store


def info_json(info: Any) -> dict[str, Any]:
    """What may be shown of a key: never its token or hash."""
    return {"name": info.name, "scope": info.scope, "app": info.app, "env": info.env, "created": info.created,
            "created_by": info.created_by}  # fmt: skip


def _creator(request: Request) -> str:
    # the key that asked, by name, once the request's principal is known; the server's own keys are "server"
    name = getattr(getattr(request.state, "principal", None), "name", None)
    return name if isinstance(name, str) else "server"


@router.post("/keys", summary="Make a key; the answer holds its token, which no later answer shows")
async def create_key(request: Request) -> dict[str, Any]:
    try:
        body = loads_bounded(await request.body())
    except (ValueError, UnicodeDecodeError):
        raise BadInputError(_BODY) from None
    if not isinstance(body, dict) or not {"name", "scope"} <= set(body) or not set(body) <= _FIELDS:
        raise BadInputError(_BODY + " and nothing else")
    if not all(isinstance(body.get(k), str) for k in ("name", "scope")) or not all(
        body.get(k) is None or isinstance(body[k], str) for k in ("app", "env")
    ):
        raise BadInputError(_BODY + ": every value a string")
    info, token = _store(request).create(
        body["name"], scope=body["scope"], app=body.get("app"), env=body.get("env"), by=_creator(request)
    )
    return {"key": token, **info_json(info)}


@router.get("/keys", summary="List keys: names, scopes, apps, envs and dates, never tokens")
async def list_keys(request: Request) -> dict[str, Any]:
    return {"keys": [info_json(info) for info in _store(request).list()]}


@router.delete("/keys/{name}", summary="Revoke a key: its token opens nothing from now on")
async def revoke_key(request: Request, name: str) -> dict[str, Any]:
    if not _store(request).revoke(name):
        raise NotFoundError(f"no key {name[:80]!r}; `flashpoint keys list` shows them")
    return {"revoked": name}
