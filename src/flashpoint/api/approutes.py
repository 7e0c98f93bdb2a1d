"""``/v1/apps``: deployed apps and their environments (decision 0097): list, get, create and delete them, upload a
project as a new version, follow its rollout, roll back and undeploy. ``flashpoint serve`` mounts it over its deploy
manager (``hosting/deploying.py``) as ``app.state.deploys``; servers without one have no such routes.

Every route names its operation of the access rule (decision 0094): reading is ``READ``, changing is ``DEPLOY``; an
app a key may not see answers 404 as if it were not deployed.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping, Sequence
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Query, Request

from flashpoint.access import Operation, visible
from flashpoint.api import schemas
from flashpoint.api.guard import authorize, principal_of
from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.wire.codec import loads_bounded

#: the error code of an upload over the limit (``hosting.artifacts.TOO_LARGE``)
TOO_LARGE = "payload_too_large"

#: the upload's path: the server's body limit gives way to the artifact limit there (``api.app``)
UPLOAD_PATH = re.compile(r"^/v1/apps/[^/]+/envs/[^/]+/versions$")


def is_upload(scope: MutableMapping[str, Any]) -> bool:
    """Whether a request is a deploy's upload, whose body the route bounds by the artifact limit itself."""
    return scope.get("method") == "POST" and UPLOAD_PATH.match(scope.get("path", "")) is not None


class Deploys(Protocol):
    """What the routes need of the deploy manager (``hosting.deploying.DeployManager``)."""

    deployments: Any
    artifacts: Any

    def endpoints(self, app: str, env: str) -> Sequence[Any]: ...

    def create_env(self, app: str, env: str, *, by: str) -> Any: ...

    def rollout(self, app: str, env: str, number: int) -> dict[str, Any]: ...

    async def deploy(
        self, app: str, env: str, data: bytes, *, by: str, exclude: Sequence[str] = ()
    ) -> dict[str, Any]: ...

    async def rollback(self, app: str, env: str, *, to: int | None, by: str) -> dict[str, Any]: ...

    async def undeploy(self, app: str, env: str, *, endpoint: str | None, by: str) -> Any: ...

    async def delete_env(self, app: str, env: str, *, by: str) -> None: ...

    async def delete_app(self, app: str, *, by: str) -> None: ...


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": schemas.ErrorBody, "description": "a bad name or body, or a project that does not load"},
    401: {"model": schemas.ErrorBody, "description": "missing or wrong API key (code `unauthorized`)"},
    403: {"model": schemas.ErrorBody, "description": "a key whose scope does not allow it (code `forbidden`)"},
    404: {"model": schemas.ErrorBody, "description": "no such app, environment or version (code `not_found`)"},
    409: {"model": schemas.ErrorBody, "description": "a rollout of that environment is running (code `conflict`)"},
    413: {"model": schemas.ErrorBody, "description": "an upload over the limit (code `payload_too_large`)"},
}
router = APIRouter(tags=["apps"], responses=_ERRORS)


def _deploys(request: Request) -> Deploys:
    deploys: Deploys = request.app.state.deploys
    return deploys


def _who(request: Request) -> str:
    """The name of the key making the request, as versions and history record it."""
    return principal_of(request).name


async def _allow(request: Request, operation: Operation, app: str | None, env: str | None = None) -> None:
    """The access rule for this route (decision 0094): 401 without a key, 403 naming the scope, 404 for an app the
    key may not see."""
    authorize(request, operation, app, env)


def _not_deployed(app: str) -> NotFoundError:
    return NotFoundError(f"app {app!r} is not deployed; deploy it first with 'flashpoint deploy'")


def _endpoints(request: Request, deploys: Deploys, app: str, env: str) -> list[dict[str, str]]:
    return [_with_url(request, d.to_json()) for d in deploys.endpoints(app, env)]


def _with_url(request: Request, endpoint: dict[str, Any]) -> dict[str, Any]:
    """An endpoint with its URL on this server: Runpod's ``/v2/{id}`` for a queue endpoint, ``/{id}`` for routes."""
    base = str(request.base_url).rstrip("/")
    path = f"/v2/{endpoint['id']}" if endpoint.get("kind") != "route" else f"/{endpoint['id']}"
    return {**endpoint, "url": base + path}


def _env_or_404(deploys: Deploys, app: str, env: str) -> Any:
    if deploys.deployments.get_app(app) is None:
        raise _not_deployed(app)
    info = deploys.deployments.get_env(app, env)
    if info is None:
        raise NotFoundError(f"app {app!r} has no environment {env!r}; flashpoint env list --app {app} lists them")
    return info


@router.get("/apps", summary="List the apps (those the key may see) and their environments")
async def list_apps(request: Request) -> dict[str, Any]:
    who = principal_of(request)
    deployments = _deploys(request).deployments
    apps = []
    for info in deployments.list_apps():
        envs = [e.name for e in deployments.list_envs(info.name) if visible(who, info.name, e.name)]
        if visible(who, info.name, None) or envs:
            apps.append({**info.to_json(), "envs": envs})
    return {"apps": apps}


@router.get("/apps/{app}", summary="An app and its environments")
async def get_app(request: Request, app: str) -> dict[str, Any]:
    await _allow(request, Operation.READ, app)
    who = principal_of(request)
    deployments = _deploys(request).deployments
    info = deployments.get_app(app)
    if info is None:
        raise _not_deployed(app)
    envs = [e.to_json() for e in deployments.list_envs(app) if visible(who, app, e.name)]
    return {"app": info.to_json(), "envs": envs}


@router.delete("/apps/{app}", summary="Undeploy every environment of an app and forget it")
async def delete_app(request: Request, app: str) -> dict[str, Any]:
    await _allow(request, Operation.DEPLOY, app)
    await _deploys(request).delete_app(app, by=_who(request))
    return {"deleted": app}


@router.get("/apps/{app}/envs", summary="An app's environments")
async def list_envs(request: Request, app: str) -> dict[str, Any]:
    await _allow(request, Operation.READ, app)
    who = principal_of(request)
    deployments = _deploys(request).deployments
    if deployments.get_app(app) is None:
        raise _not_deployed(app)
    return {"envs": [e.to_json() for e in deployments.list_envs(app) if visible(who, app, e.name)]}


@router.post("/apps/{app}/envs/{env}", status_code=201, summary="Create an empty environment (and the app)")
async def create_env(request: Request, app: str, env: str) -> dict[str, Any]:
    await _allow(request, Operation.DEPLOY, app, env)
    info = _deploys(request).create_env(app, env, by=_who(request))
    result: dict[str, Any] = info.to_json()
    return result


@router.get("/apps/{app}/envs/{env}", summary="An environment: what serves, its versions and history")
async def get_env(request: Request, app: str, env: str) -> dict[str, Any]:
    await _allow(request, Operation.READ, app, env)
    deploys = _deploys(request)
    info = _env_or_404(deploys, app, env)
    return {
        "env": info.to_json(),
        "versions": [v.to_json() for v in deploys.deployments.versions(app, env)],
        "history": [e.to_json() for e in deploys.deployments.history(app, env)],
        "endpoints": _endpoints(request, deploys, app, env),
    }


@router.delete("/apps/{app}/envs/{env}", summary="Undeploy an environment and forget it and its history")
async def delete_env(request: Request, app: str, env: str) -> dict[str, Any]:
    await _allow(request, Operation.DEPLOY, app, env)
    await _deploys(request).delete_env(app, env, by=_who(request))
    return {"deleted": f"{app}/{env}"}


@router.post(
    "/apps/{app}/envs/{env}/versions",
    status_code=202,
    summary="Upload a project (.tar.gz) as the next version; answers once it is stored and loaded",
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/gzip": {"schema": {"type": "string",
                                                                                      "format": "binary"}}}}
    },
)  # fmt: skip
async def deploy(
    request: Request,
    app: str,
    env: str,
    exclude: Annotated[
        str, Query(description="Packages left out of the dependency install, comma-separated (Flash's --exclude).")
    ] = "",
) -> dict[str, Any]:
    await _allow(request, Operation.DEPLOY, app, env)
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind not in ("application/gzip", "application/x-gzip", "application/octet-stream"):
        raise BadInputError(
            f"send the project as a .tar.gz body with Content-Type: application/gzip (got {kind or 'none'}); "
            "flashpoint deploy does this for you"
        )
    deploys = _deploys(request)
    data = await _upload(request, deploys.artifacts.limit_bytes)
    packages = [p.strip() for p in exclude.split(",") if p.strip()]
    rollout = await deploys.deploy(app, env, data, by=_who(request), exclude=packages)
    return {**rollout, "endpoints": [_with_url(request, e) for e in rollout["endpoints"]]}


@router.get("/apps/{app}/envs/{env}/versions/{number}", summary="A version and where its rollout is")
async def get_version(request: Request, app: str, env: str, number: int) -> dict[str, Any]:
    await _allow(request, Operation.READ, app, env)
    deploys = _deploys(request)
    _env_or_404(deploys, app, env)
    rollout = deploys.rollout(app, env, number)
    return {**rollout, "endpoints": [_with_url(request, e) for e in rollout["endpoints"]]}


async def _upload(request: Request, limit: int) -> bytes:
    """The upload's body, refused (413) as soon as it passes ``limit`` bytes, by its length or while it streams."""
    too_large = BadInputError(
        f"the upload is over the server's limit of {limit / 2**20:.0f} MB; leave big files out with .flashignore, "
        "or raise the server's --max-artifact-mb",
        code=TOO_LARGE,
    )
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise too_large
    return bytes(data)


def _json_body(raw: bytes, allowed: str, example: str) -> dict[str, Any]:
    try:
        body = loads_bounded(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError):
        raise BadInputError(f"send a JSON body like {example}") from None
    if not isinstance(body, dict) or not set(body) <= {allowed}:
        raise BadInputError(f"send a JSON body like {example} and nothing else")
    return body


def _json_doc(example: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"content": {"application/json": {"schema": {"type": "object"}, "example": example}}}}


@router.post(
    "/apps/{app}/envs/{env}/rollback",
    summary="Serve an older version again (the one before by default)",
    openapi_extra=_json_doc({"to": 2}),
)
async def rollback(request: Request, app: str, env: str) -> dict[str, Any]:
    await _allow(request, Operation.DEPLOY, app, env)
    body = _json_body(await request.body(), "to", '{"to": 2} (or {} for the version before)')
    to = body.get("to")
    if to is not None and (isinstance(to, bool) or not isinstance(to, int) or to < 1):
        raise BadInputError(f'"to" is a version number (1, 2, ...), got {to!r}')
    deploys = _deploys(request)
    _env_or_404(deploys, app, env)
    rollout = await deploys.rollback(app, env, to=to, by=_who(request))
    return {**rollout, "endpoints": [_with_url(request, e) for e in rollout["endpoints"]]}


@router.post(
    "/apps/{app}/envs/{env}/undeploy",
    summary="Take down one endpoint of an environment, or all of them",
    openapi_extra=_json_doc({"endpoint": "embed"}),
)
async def undeploy(request: Request, app: str, env: str) -> dict[str, Any]:
    await _allow(request, Operation.DEPLOY, app, env)
    body = _json_body(await request.body(), "endpoint", '{"endpoint": "embed"} (or {} for every endpoint)')
    endpoint = body.get("endpoint")
    if endpoint is not None and not isinstance(endpoint, str):
        raise BadInputError(f'"endpoint" is an endpoint name, got {endpoint!r}')
    deploys = _deploys(request)
    _env_or_404(deploys, app, env)
    info = await deploys.undeploy(app, env, endpoint=endpoint, by=_who(request))
    result: dict[str, Any] = info.to_json()
    return result
