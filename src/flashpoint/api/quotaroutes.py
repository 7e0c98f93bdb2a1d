"""``/v1/quotas``: the server's quotas and budgets over HTTP (decision 0113), for admin keys: ``GET`` lists every
quota with its use now (devices held, GPU-hours in its window, whether it is spent and when it renews); ``PUT`` (or
``POST``) sets limits of one scope from the JSON body ``{"app"?, "env"?, "key"?, "maxGpus"?, "model"?, "gpuHours"?,
"period"?}``, keeping the scope's other limits; ``DELETE`` with ``?app=&env=&key=`` (and ``&model=``: that model's
limit only) removes one. Every route is the access rule's ``ADMIN`` (``api/guard.py``). ``flashpoint serve`` mounts
it over its store (``hosting/quotastore.py``, as ``app.state.quotas``); the use comes from the plane's
``QuotaGate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Query, Request

from flashpoint.api import schemas
from flashpoint.api.deps import require_admin
from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.quotas import Quota
from flashpoint.wire.codec import loads_bounded


class Quotas(Protocol):
    """What the routes need of a quota store (``hosting.quotastore.QuotaStore``)."""

    def set(
        self,
        *,
        app: str | None = None,
        env: str | None = None,
        key: str | None = None,
        max_gpus: int | None = None,
        model: str | None = None,
        gpu_hours: float | None = None,
        period: str | None = None,
    ) -> Quota: ...

    def delete(
        self, *, app: str | None = None, env: str | None = None, key: str | None = None, model: str | None = None
    ) -> bool: ...

    def list(self) -> Sequence[Quota]: ...


#: every answer but success is a JSON error body (``api/errors.py``)
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": schemas.ErrorBody, "description": "a bad name, number, model, period or body (code `bad_input`)"},
    401: {"model": schemas.ErrorBody, "description": "missing or wrong API key (code `unauthorized`)"},
    403: {"model": schemas.ErrorBody, "description": "a key that may not manage quotas (code `forbidden`)"},
    404: {"model": schemas.ErrorBody, "description": "no such quota (code `not_found`)"},
    413: {"model": schemas.ErrorBody, "description": "a body over the limit (code `payload_too_large`)"},
}
router = APIRouter(tags=["quotas"], dependencies=[Depends(require_admin)], responses=_ERRORS)

_BODY = (
    'send {"app"?: A, "env"?: E, "key"?: K, "maxGpus"?: N, "model"?: M, "gpuHours"?: H, "period"?: "24h"} as the '
    "JSON body (app and/or key; at least one limit)"
)
_TEXT = ("app", "env", "key", "model", "period")
_FIELDS = {*_TEXT, "maxGpus", "gpuHours"}
Name = Annotated[str | None, Query(max_length=100)]


def _store(request: Request) -> Quotas:
    store: Quotas = request.app.state.quotas
    return store


def _plane(request: Request) -> ControlPlane:
    plane: ControlPlane = request.app.state.plane
    return plane


def _number(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


@router.get("/quotas", summary="List quotas and budgets with their use now")
async def list_quotas(request: Request) -> dict[str, Any]:
    gate = _plane(request).quotas  # the use of each, from the plane's state and usage meter
    rows = [{**quota.to_json(), "use": gate.use(quota)} for quota in _store(request).list()]
    return {"quotas": rows}


@router.put("/quotas", summary="Set limits of one scope (an app, an environment, a key), keeping its others")
@router.post("/quotas", summary="Set limits of one scope (as PUT)", include_in_schema=False)
async def set_quota(request: Request) -> dict[str, Any]:
    try:
        body = loads_bounded(await request.body())
    except (ValueError, UnicodeDecodeError):
        raise BadInputError(_BODY) from None
    if not isinstance(body, dict) or not set(body) <= _FIELDS:
        raise BadInputError(_BODY + " and nothing else")
    if not all(body.get(k) is None or isinstance(body[k], str) for k in _TEXT):
        raise BadInputError(_BODY + ": app, env, key, model and period are strings")
    max_gpus, gpu_hours = body.get("maxGpus"), body.get("gpuHours")
    if not _number(max_gpus) or not _number(gpu_hours) or isinstance(max_gpus, float):
        raise BadInputError(_BODY + ": maxGpus a whole number, gpuHours a number")
    quota = _store(request).set(
        app=body.get("app"),
        env=body.get("env"),
        key=body.get("key"),
        max_gpus=max_gpus,
        model=body.get("model"),
        gpu_hours=gpu_hours,
        period=body.get("period"),
    )
    return {**quota.to_json(), "use": _plane(request).quotas.use(quota)}


@router.delete("/quotas", summary="Delete one scope's quota (with model: that model's limit only)")
async def delete_quota(
    request: Request, app: Name = None, env: Name = None, key: Name = None, model: Name = None
) -> dict[str, Any]:
    if not _store(request).delete(app=app, env=env, key=key, model=model):
        scope = " ".join(f"--{n} {v}" for n, v in (("app", app), ("env", env), ("key", key), ("model", model)) if v)
        raise NotFoundError(f"no quota {scope[:200]}; `flashpoint quota list` shows them")
    return {"deleted": {"app": app, "env": env, "key": key, "model": model}}
