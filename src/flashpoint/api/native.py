"""flashpoint's own read API, served under /v1: fleet, endpoints, jobs, their logs and their explanations.

Routes are thin: an unknown job or endpoint raises ``NotFoundError`` in the plane, which ``api/errors.py`` turns
into a 404 with code ``not_found``; a bad query parameter is a 400 with code ``bad_request``.

Each route names its operation of the access rule (``api/guard.py``, decisions 0094 and 0100): the fleet is
``ADMIN``; one endpoint (the SDK's check) ``INVOKE``; its explanation ``READ``; a job, its logs, explanation and wait
``INVOKE`` for the key's own job and ``READ`` for another's; the lists show what the key may see (jobs: those it may
read), and what it may not see answers 404 as what does not exist.

``/schedules`` lists endpoints' cron schedules (next run, latest run) and ``/schedules/{endpoint}`` one endpoint's
history (decision 0109).

``/usage`` is workers' device time, busy and idle, grouped by app, environment, endpoint, key or model (decision
0112): an admin key sees all of it; another key the time of the endpoints it sees, and an invoke key only the busy
time of its own jobs.

Every endpoint and job row carries the ``app`` and ``env`` its endpoint id names (null for an endpoint outside any
app), and both lists take ``?app=`` and ``?env=`` (decision 0102): applied before the limit, so a filtered list of
jobs is the newest ``limit`` of that app, however many of other apps are newer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from flashpoint.access import Operation, endpoint_visible
from flashpoint.api import errors, schemas
from flashpoint.api.deps import Plane, require_api_key
from flashpoint.api.guard import (
    app_env_of,
    authorize,
    authorize_job,
    identify,
    principal_of,
    resolve_endpoint,
    sees_endpoint,
    sees_job,
)
from flashpoint.api.workers import error_response, json_response
from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.jobs import Job, JobStatus, JobView
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.usage import BUCKET_S, Share, parse_since, summarize
from flashpoint.spec import APP_NAME, endpoint_id, split_endpoint_id

if TYPE_CHECKING:
    from flashpoint.api.metrics import PlaneMetrics

#: the longest a client may hold GET /jobs/{id}/wait open, in seconds
MAX_WAIT_S = 60.0

_UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"model": schemas.ErrorBody, "description": "missing or wrong API key (code `unauthorized`)"},
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "no such job or endpoint (code `not_found`)"},
}
_FORBIDDEN: dict[int | str, dict[str, Any]] = {
    403: {"model": schemas.ErrorBody, "description": "a key whose scope does not allow it (code `forbidden`)"},
}
_BAD_REQUEST: dict[int | str, dict[str, Any]] = {
    400: {"model": schemas.ErrorBody, "description": "a query parameter is invalid (code `bad_request`)"},
}

router = APIRouter(tags=["native"], dependencies=[Depends(require_api_key)], responses={**_UNAUTHORIZED, **_FORBIDDEN})
#: how many of the newest jobs a list for a key that may not read every job looks through (filtered after)
SCOPED_LIST_WINDOW = 1000
#: how much larger each read of the store is than the last while a list filtered by app looks for enough jobs
GROWTH = 4

AppFilter = Annotated[
    str | None,
    Query(
        pattern=f"^{APP_NAME.pattern}$",
        description="only endpoints (jobs of endpoints) of this app; one outside any app matches no app",
    ),
]
EnvFilter = Annotated[
    str | None,
    Query(
        pattern=f"^{APP_NAME.pattern}$",
        description="only endpoints (jobs of endpoints) of this deployment environment, of any app unless `app` "
        "says which",
    ),
]


def readable_job(request: Request, plane: ControlPlane, job_id: str) -> Job:
    """Job ``job_id`` when the request's key may read it (its own: ``INVOKE``; another's: ``READ``); one it may not
    see is the same 404 as one that does not exist."""
    job = plane.job(job_id)
    authorize_job(request, job, lambda: NotFoundError(f"no job with id {job_id!r}"))
    return job


def with_app(row: dict[str, Any], key: str) -> dict[str, Any]:
    """``row`` with the ``app`` and ``env`` of endpoint ``key`` (both None outside any app)."""
    row["app"], row["env"] = app_env_of(key)
    return row


def in_app(key: str, app: str | None, env: str | None) -> bool:
    """Whether endpoint ``key`` is of ``app`` and ``env`` (None: any); one outside any app matches no filter."""
    of_app, of_env = app_env_of(key)
    return (app is None or app == of_app) and (env is None or env == of_env)


def newest_jobs(
    plane: ControlPlane,
    endpoint: str | None,
    status: JobStatus | None,
    limit: int,
    keep: Callable[[JobView], bool] | None = None,
) -> list[JobView]:
    """The newest ``limit`` jobs that ``keep`` accepts (every job without it), newest first.

    The store filters only by endpoint and status, so the rest is filtered here: it is read in windows ``GROWTH``
    times larger each time until enough jobs match or it holds no more, and a filtered list is as complete as an
    unfiltered one up to its limit.
    """
    if keep is None:
        return plane.list_jobs(endpoint=endpoint, status=status, limit=limit)
    window = limit
    while True:
        views = plane.list_jobs(endpoint=endpoint, status=status, limit=window)
        kept = [view for view in views if keep(view)]
        if len(kept) >= limit or len(views) < window:
            return kept[:limit]
        window *= GROWTH


def job_body(plane: ControlPlane, job_id: str) -> dict[str, Any]:
    """``GET /v1/jobs/{id}``: every field of the job, its log lines and its explanation."""
    job = plane.job(job_id)
    body = with_app(job.view().to_native(), job.endpoint)
    body["explanation"] = plane.explain_job(job_id).to_json()
    body["flash"] = flash_call(job.extra)
    return body


def flash_call(extra: dict[str, Any]) -> dict[str, str | None] | None:
    """The Flash app and environment recorded with a job that came through Flash's client (strings only: a client of
    ``/run`` may have written anything in its metadata)."""
    meta = extra.get("flashpoint")
    flash = meta.get("flash") if isinstance(meta, dict) else None
    if not isinstance(flash, dict):
        return None
    return {
        key: value if isinstance(value, str) else None
        for key, value in (("app", flash.get("app")), ("environment", flash.get("environment")))
    }


@router.get(
    "/fleet", response_model=schemas.Fleet, summary="The fleet's devices and nodes, and who holds or reserves them"
)
async def get_fleet(request: Request, plane: Plane) -> Response:
    authorize(request, Operation.ADMIN, None, None)  # every app's workers, and the server's devices
    return json_response(
        {"devices": with_telemetry(plane), "nodes": plane.node_view(), "summary": plane.fleet_summary()}
    )


def with_telemetry(plane: ControlPlane) -> list[dict[str, Any]]:
    """The fleet's device rows, each with its GPU telemetry (``scheduler/gpustats.py``): the latest sample of a real
    device, "unknown" and why, or "simulated: no telemetry"."""
    rows = plane.fleet_view()
    devices = {device.key: device for device in plane.index.devices}
    for row in rows:
        device = devices.get((row["node"], row["index"]))
        if device is not None:
            row["telemetry"] = plane.state.gpus.telemetry(device)
    return rows


@router.get(
    "/endpoints",
    response_model=schemas.Endpoints,
    responses=_BAD_REQUEST,
    summary="Every endpoint, its workers and why it waits",
)
async def list_endpoints(request: Request, plane: Plane, app: AppFilter = None, env: EnvFilter = None) -> Response:
    who = principal_of(request)
    rows = plane.endpoint_rows()
    if who.scope != "admin":
        rows = [row for row in rows if sees_endpoint(who, row["name"])]
    if app is not None or env is not None:
        rows = [row for row in rows if in_app(row["name"], app, env)]
    return json_response({"endpoints": [with_app(row, row["name"]) for row in rows]})


@router.get("/endpoints/{name}", response_model=schemas.Endpoint, responses=_NOT_FOUND, summary="One endpoint")
async def get_endpoint(name: str, request: Request, plane: Plane) -> Response:
    # what a caller asks of an endpoint (the SDK's check before it submits): INVOKE
    ep = resolve_endpoint(request, plane, name, Operation.INVOKE)
    return json_response(with_app(plane.endpoint_rows(ep.spec.key)[0], ep.spec.key))


@router.get(
    "/endpoints/{name}/explain",
    response_model=schemas.Explanation,
    responses=_NOT_FOUND,
    summary="What an endpoint waits for",
)
async def explain_endpoint(name: str, request: Request, plane: Plane) -> Response:
    ep = resolve_endpoint(request, plane, name, Operation.READ)
    return json_response(plane.explain_endpoint(ep.spec.key).to_json())


@router.get("/jobs", response_model=schemas.Jobs, responses=_BAD_REQUEST, summary="Jobs, newest first")
async def list_jobs(
    request: Request,
    plane: Plane,
    endpoint: Annotated[
        str | None,
        Query(description="only this endpoint's jobs (its id; a bare name with `app` and `env` names their endpoint)"),
    ] = None,
    status: Annotated[JobStatus | None, Query(description="only jobs in this status")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="at most this many jobs")] = 100,
    app: AppFilter = None,
    env: EnvFilter = None,
) -> Response:
    who = principal_of(request)
    if endpoint is not None and app is not None and env is not None and split_endpoint_id(endpoint) is None:
        endpoint = endpoint_id(app, env, endpoint)
    keep = None if app is None and env is None else lambda view: in_app(view.endpoint, app, env)
    if who.scope == "admin":
        views = newest_jobs(plane, endpoint, status, limit, keep)
    else:
        # the store lists the server's newest jobs; those this key may not read are left out after (at most
        # SCOPED_LIST_WINDOW of those the filters keep looked through)
        window = newest_jobs(plane, endpoint, status, max(limit, SCOPED_LIST_WINDOW), keep)
        views = [view for view in window if sees_job(who, view.endpoint, view.submitted_by)][:limit]
    jobs = []
    for view in views:
        body = with_app(view.to_native(), view.endpoint)
        del body["logs"]
        jobs.append(body)
    return json_response({"jobs": jobs})


@router.get("/jobs/{job_id}", response_model=schemas.Job, responses=_NOT_FOUND, summary="One job, with its logs")
async def get_job(job_id: str, request: Request, plane: Plane) -> Response:
    readable_job(request, plane, job_id)
    return json_response(job_body(plane, job_id))


@router.get(
    "/jobs/{job_id}/explain", response_model=schemas.Explanation, responses=_NOT_FOUND, summary="What a job waits for"
)
async def explain_job(job_id: str, request: Request, plane: Plane) -> Response:
    readable_job(request, plane, job_id)
    return json_response(plane.explain_job(job_id).to_json())


@router.get("/jobs/{job_id}/logs", response_model=schemas.JobLogs, responses=_NOT_FOUND, summary="A job's log lines")
async def job_logs(job_id: str, request: Request, plane: Plane) -> Response:
    job = readable_job(request, plane, job_id)
    return json_response({"id": job.id, "logs": list(job.logs)})


@router.get(
    "/jobs/{job_id}/wait",
    response_model=schemas.Job,
    responses={**_NOT_FOUND, **_BAD_REQUEST},
    summary="Hold until the job ends or the timeout passes, then return it",
    description="Answers as soon as the job is COMPLETED, FAILED, CANCELLED or TIMED_OUT. When `timeout` seconds "
    "pass first, it answers 200 with the job as it is then: check `status`.",
)
async def wait_job(
    job_id: str,
    request: Request,
    plane: Plane,
    timeout: Annotated[float, Query(ge=0, le=MAX_WAIT_S, description="seconds to wait at most")] = 30.0,
) -> Response:
    readable_job(request, plane, job_id)
    try:
        await plane.wait(job_id, timeout)
    except TimeoutError:
        pass
    return json_response(job_body(plane, job_id))


# ---------------------------------------------------------------------------------------------------------------------
# endpoints' cron schedules (decision 0109): the list shows the scheduled endpoints the key sees, as /endpoints does;
# one endpoint's history is READ of it, as its explanation is


@router.get(
    "/schedules",
    response_model=schemas.Schedules,
    responses=_BAD_REQUEST,
    summary="Scheduled endpoints: cron, next run (UTC), latest run",
)
async def list_schedules(request: Request, plane: Plane, app: AppFilter = None, env: EnvFilter = None) -> Response:
    who = principal_of(request)
    shown = [
        ep
        for key, ep in plane.endpoints.items()
        if (who.scope == "admin" or sees_endpoint(who, key)) and in_app(key, app, env)
    ]
    return json_response({"schedules": [with_app(row, row["endpoint"]) for row in plane.schedules.rows(shown)]})


@router.get(
    "/schedules/{endpoint}",
    response_model=schemas.ScheduleHistory,
    responses={**_NOT_FOUND, **_BAD_REQUEST},
    summary="One endpoint's schedule and its runs, newest first",
    description="Each fire time's line: submitted (with its job and the job's status now), skipped (the previous run "
    "was still queued or running), missed (the server was down then), failed (the submit was refused) or stopped.",
)
async def schedule_history(
    endpoint: str,
    request: Request,
    plane: Plane,
    limit: Annotated[int, Query(ge=1, le=1000, description="at most this many lines")] = 100,
) -> Response:
    ep = resolve_endpoint(request, plane, endpoint, Operation.READ)
    return json_response(with_app(plane.schedules.history(ep, limit), ep.spec.key))


# ---------------------------------------------------------------------------------------------------------------------
# usage (decision 0112): what each key sees is filtered as the job lists are


@router.get(
    "/usage",
    response_model=schemas.Usage,
    responses=_BAD_REQUEST,
    summary="Workers' device time (GPU-, vCPU- and MB-seconds), busy, idle and starting, grouped",
    description="Time in the window from `since` to now, per group and per kind. An admin key sees every worker's; "
    "another key the time of the endpoints it sees; an invoke key only the busy time of its own jobs.",
)
async def get_usage(
    request: Request,
    plane: Plane,
    since: Annotated[
        str, Query(description="the window's start: a duration back from now (90s, 30m, 24h, 7d, 2w) or epoch seconds")
    ] = "24h",
    by: Annotated[
        Literal["app", "env", "endpoint", "key", "model"], Query(description="what the time is grouped by")
    ] = "endpoint",
    app: AppFilter = None,
    env: EnvFilter = None,
) -> Response:
    who = principal_of(request)
    until = plane.clock.time()
    try:
        start = parse_since(since, until)
    except BadInputError as exc:  # a query parameter: bad_request, as FastAPI's own checks answer
        raise BadInputError(str(exc), code="bad_request") from None

    def shown(share: Share) -> bool:
        if (app is not None and share.app != app) or (env is not None and share.env != env):
            return False
        if who.scope == "admin":
            return True
        if who.scope == "invoke" and (share.kind != "busy" or share.key != who.name):
            return False
        return endpoint_visible(who, share.app or None, share.env or None)

    shares = [share for share in plane.usage.window(start, until) if shown(share)]
    body = {"since": start, "until": until, "by": by, "resolutionS": BUCKET_S, "usage": summarize(shares, by)}
    return json_response(body)


def create_native_app(
    plane: ControlPlane, api_keys: tuple[str, ...] = (), *, metrics: PlaneMetrics | None = None
) -> FastAPI:
    """The native routes as an app of their own, to mount at /v1; with ``metrics``, it serves ``/metrics`` too.

    A mounted app has its own ``state`` and exception handlers, so both are set here.
    """
    app = FastAPI(title="flashpoint native API", docs_url=None, redoc_url=None)
    app.state.plane = plane
    app.state.api_keys = tuple(api_keys)
    app.state.key_lookup = None  # scoped keys' lookup (api/guard.py), when the host has any
    errors.install(app)
    require_key_for_docs(app)
    app.include_router(router)
    if metrics is not None:
        from flashpoint.api.metrics import metrics_route

        app.router.routes.append(metrics_route(metrics))
    return app


def require_key_for_docs(app: FastAPI) -> None:
    """Put FastAPI's own routes (``/openapi.json``, ``/docs``, its OAuth2 redirect, ``/redoc``) behind
    ``app.state.api_keys`` like every other route: FastAPI adds them without the router's dependencies.

    With no keys (a server on loopback only) they stay open. The key is read from the app serving the request, so a
    mounted app checks its own keys.
    """
    paths = {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url} - {None}
    for route in app.router.routes:
        if isinstance(route, Route) and route.path in paths:
            route.app = _keyed(route.app)


def _keyed(inner: ASGIApp) -> ASGIApp:
    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        state = scope["app"].state
        if getattr(state, "api_keys", ()):
            header = dict(scope["headers"]).get(b"authorization")
            # any key the server knows reads the API's description (a scoped key too: it only describes routes)
            if (
                identify(getattr(state, "plane", None), state, header.decode("latin-1") if header is not None else None)
                is None
            ):
                denied = error_response(401, "unauthorized", "send the API key as Authorization: Bearer KEY")
                denied.headers["WWW-Authenticate"] = "Bearer"
                await denied(scope, receive, send)
                return
        await inner(scope, receive, send)

    return guarded
