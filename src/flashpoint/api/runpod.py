"""Runpod's client API under /v2/{endpoint}: run, runsync, status, stream, cancel, retry, purge-queue, health.

Bodies, statuses and quirks follow runpod-protocol.md §2 so the official ``runpod`` client works unchanged: every
response is JSON (errors too), ``runsync`` holds then falls back to ``{"id", "status"}``, terminal states are sticky,
``stream`` returns only chunks not read before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flashpoint.access import Operation
from flashpoint.api.errors import body as error_body, error_response
from flashpoint.api.guard import (
    UNAUTHORIZED,
    authorize_job,
    caller_worker,
    find_endpoint,
    key_state,
    keyless,
    principal_of,
    resolve_endpoint,
    submitter,
)
from flashpoint.api.loopguard import UNSUPPORTED_CODE, UNSUPPORTED_MESSAGE, json_typed
from flashpoint.api.webhooks import check_webhook_url
from flashpoint.api.workers import json_response
from flashpoint.errors import BadInputError, Error, NotFoundError
from flashpoint.jobs import LOW_PRIORITY_KEY, SUBMITTED_BY_KEY, Job, JobStatus
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.spec import split_endpoint_id
from flashpoint.wire import codec

#: keys of a job request, besides ``input``, that are handed to the worker as they are
PASSTHROUGH = ("webhook", "s3Config", "policy", "webhookV2")
_DAY_MS = 24 * 3600 * 1000
#: where the request scope holds the worker whose caller key a request carries
CALLER_SCOPE_KEY = "flashpoint.caller"
#: why a caller key is refused on a route it does not open
CALLER_REFUSED = (
    "a worker's caller key (FLASHPOINT_CALLER_KEY) opens only run, runsync, and status, stream and cancel of the jobs "
    "that worker started; give the endpoint FLASHPOINT_URL and FLASHPOINT_API_KEY to do more"
)
#: every route accepts every method and answers a wrong one itself, as JSON
_ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@dataclass(frozen=True, slots=True)
class Intake:
    """What the server checks a job request against: per-endpoint input checkers, and whether pickles may enter."""

    checkers: dict[str, Callable[[Any], None]]
    allow_pickle: bool = False
    #: whether webhooks may point at loopback, private and other non-public addresses (``--allow-private-webhooks``)
    allow_private_webhooks: bool = False


def _positive_ms(policy: dict[str, Any], key: str, maximum: int) -> int | None:
    value = policy.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= maximum:
        raise BadInputError(
            f'policy.{key} must be milliseconds between 1 and {maximum}, got {value!r}; e.g. {{"{key}": 600000}}',
            code="bad_request",
        )
    return value


def policy_limits(data: dict[str, Any]) -> tuple[int | None, int | None]:
    """A job request's ``policy.executionTimeout`` and ``policy.ttl`` in ms (None: not given).

    Raises:
        BadInputError: a policy that is not an object, or a limit that is not 1 ms to 7 days.
    """
    policy = data.get("policy")
    if policy is None:
        policy = {}
    if not isinstance(policy, dict):
        raise BadInputError('"policy" must be an object, e.g. {"executionTimeout": 600000}', code="bad_request")
    return _positive_ms(policy, "executionTimeout", 7 * _DAY_MS), _positive_ms(policy, "ttl", 7 * _DAY_MS)


async def _job_request(request: Request, plane: ControlPlane, endpoint: str, intake: Intake) -> Job:
    """Parse and check a /run or /runsync body, then submit it: nothing is stored unless every check passes."""
    ep = resolve_endpoint(request, plane, endpoint, Operation.INVOKE)  # 404 (or 403) before anything else
    raw = await request.body()
    return submit_checked(plane, ep.spec.key, parse_body(raw), intake, size=len(raw), record=job_record(request))


def job_record(request: Request) -> dict[str, Any]:
    """What the server notes in a job's ``flashpoint`` metadata about who submitted it: the key's name (which the job
    keeps as ``submitted_by``) and the worker whose caller key it was."""
    record: dict[str, Any] = {}
    name = submitter(request)
    if name is not None:
        record[SUBMITTED_BY_KEY] = name
    caller = request.scope.get(CALLER_SCOPE_KEY)
    if caller is not None:
        record["caller"] = caller
    return record


def parse_body(raw: bytes) -> dict[str, Any]:
    """A job request's body: a UTF-8 JSON object with ``input`` (``bad_json``, ``bad_request``, ``missing_input``)."""
    try:
        data = codec.loads_bounded(raw) if raw else None
    except codec.JSONTooDeepError as exc:
        raise BadInputError(f"the body is {exc}; send flatter input", code="bad_json") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInputError(
            f'the body is not valid UTF-8 JSON ({exc}); send {{"input": {{...}}}}', code="bad_json"
        ) from None
    if not isinstance(data, dict):
        raise BadInputError('the body must be a JSON object like {"input": {...}}', code="bad_request")
    if "input" not in data:
        raise BadInputError('the body has no "input"; send {"input": {...}}', code="missing_input")
    return data


def served_targets(intake: Intake, endpoint: str) -> list[str]:
    """The functions and classes ``endpoint`` serves, by name, as the intake knows them (none for a command)."""
    return sorted(key.partition("/")[2] for key in intake.checkers if key.startswith(f"{endpoint}/"))


#: the key naming the function a job calls in Flash's generic handler; on a shared endpoint it names the target
FUNCTION_NAME = "function_name"


def _function_name(
    payload: Any, meta: dict[str, Any] | None, intake: Intake, endpoint: str
) -> tuple[Any, dict[str, Any] | None]:
    """On an endpoint serving several functions, Flash's ``function_name`` in the input names the one to call (unless
    ``flashpoint.target`` does): it becomes the job's target and leaves the arguments. Elsewhere it is an argument.
    Returns the input and the metadata to use."""
    if (meta or {}).get("target") is not None or not isinstance(payload, dict) or FUNCTION_NAME not in payload:
        return payload, meta
    if len(served_targets(intake, endpoint)) < 2:
        return payload, meta
    name = payload[FUNCTION_NAME]
    if not isinstance(name, str):
        raise BadInputError(f'"{FUNCTION_NAME}" must name a function of {endpoint!r}, got {name!r}', code="bad_input")
    return {key: value for key, value in payload.items() if key != FUNCTION_NAME}, {**(meta or {}), "target": name}


def submit_checked(
    plane: ControlPlane,
    endpoint: str,
    data: dict[str, Any],
    intake: Intake,
    *,
    size: int,
    record: dict[str, Any] | None = None,
) -> Job:
    """Check a parsed job request (``parse_body``) and submit it; ``record`` joins the job's ``flashpoint`` metadata
    (what the server notes about the job, never what a caller sends there)."""
    payload = data["input"]
    execution_ms, ttl_ms = policy_limits(data)
    webhook = data.get("webhook")
    if webhook is not None and (not isinstance(webhook, str) or not webhook.startswith(("http://", "https://"))):
        raise BadInputError(f'"webhook" must be an http(s) URL, got {webhook!r}', code="bad_request")
    if webhook is not None:
        check_webhook_url(webhook, intake.allow_private_webhooks)
    meta = data.get("flashpoint")
    if meta is not None and not isinstance(meta, dict):
        raise BadInputError('"flashpoint" must be an object', code="bad_request")
    if not intake.allow_pickle and _has_pickle(payload, meta):
        raise BadInputError(
            "this server accepts JSON input only: pickled arguments can run code on the server; pass JSON values, "
            "or start the server with --allow-pickle if every API key holder may run code there",
            code="pickle_not_allowed",
        )
    payload, meta = _function_name(payload, meta, intake, endpoint)
    target = (meta or {}).get("target")
    # a shared endpoint's job names its function or class: one the endpoint does not serve is refused here
    checker = intake.checkers.get(endpoint if target is None else f"{endpoint}/{target}")
    if target is not None and checker is None and endpoint in intake.checkers:
        raise BadInputError(
            f"endpoint {endpoint!r} serves no function or class named {target!r}; it serves: "
            f"{', '.join(served_targets(intake, endpoint))}",
            code="bad_input",
        )
    if checker is not None and not (isinstance(payload, dict) and codec.PICKLE_KEY in payload):
        checker(payload)
    extra = {key: data[key] for key in PASSTHROUGH if key in data}
    low = low_priority(data, meta)
    if meta is not None or record or low:
        extra["flashpoint"] = {k: meta[k] for k in ("binary_ok", "init", "target") if meta and k in meta}
        extra["flashpoint"].update(record or {})
        if low:
            extra["flashpoint"][LOW_PRIORITY_KEY] = True  # ``Job.low_priority``: after the queue's other jobs
    return plane.submit(endpoint, payload, extra, execution_timeout_ms=execution_ms, ttl_ms=ttl_ms, size=size)


def low_priority(data: dict[str, Any], meta: dict[str, Any] | None = None) -> bool:
    """A job sent at low priority: Runpod's ``policy.lowPriority`` (true or false, absent being false; 400 naming it
    for anything else), or flashpoint's own ``"flashpoint": {"low_priority": true}`` (the SDK's)."""
    policy = data.get("policy")
    value: Any = False
    if isinstance(policy, dict) and "lowPriority" in policy:  # a policy that is not an object is policy_limits' 400
        value = policy["lowPriority"]
        if not isinstance(value, bool):
            raise BadInputError(
                f'policy.lowPriority must be true or false, got {value!r}; e.g. {{"lowPriority": true}}',
                code="bad_request",
            )
    own = (meta or {}).get(LOW_PRIORITY_KEY, False)
    if not isinstance(own, bool):
        raise BadInputError(f'"flashpoint.low_priority" must be true or false, got {own!r}', code="bad_request")
    return value or own


def _has_pickle(payload: Any, meta: dict[str, Any] | None) -> bool:
    init = (meta or {}).get("init")
    return any(isinstance(v, dict) and codec.PICKLE_KEY in v for v in (payload, init))


def _own_job(request: Request, plane: ControlPlane, endpoint: str, job_id: str) -> Job:
    """Job ``job_id`` of ``endpoint`` (its id, or the bare name it resolves from), when the request's key may reach it
    (its own job: ``INVOKE``; another's: ``READ``); with a worker's caller key, only a job that worker started. Any
    other job answers as one that does not exist."""
    job = plane.job(job_id)

    def missing() -> NotFoundError:
        return NotFoundError(f"endpoint {endpoint!r} has no job {job_id!r}")

    if not _of_endpoint(request, plane, job, endpoint):
        raise missing()
    return reachable_job(request, job, missing)


def reachable_job(request: Request, job: Job, missing: Callable[[], NotFoundError]) -> Job:
    """``job`` when the request's key may reach it (its own job: ``INVOKE``; another's: ``READ``); with a worker's
    caller key, only a job that worker started. Any other raises ``missing()``, as a job that does not exist would
    (or 403 naming the scope, for a key that sees the job's app but may not read others' jobs)."""
    caller = request_caller(request)
    if caller is not None and not started_by(job, caller):
        raise missing()
    authorize_job(request, job, missing)
    return job


def _of_endpoint(request: Request, plane: ControlPlane, job: Job, endpoint: str) -> bool:
    """Whether the path's ``endpoint`` names the job's: its id, or a bare name that resolves to it for this key."""
    if job.endpoint == endpoint:
        return True
    parts = split_endpoint_id(job.endpoint)
    if parts is None or parts[2] != endpoint:
        return False
    try:
        return find_endpoint(plane, principal_of(request), endpoint).spec.key == job.endpoint
    except Error:
        return False


def started_by(job: Job, caller: str) -> bool:
    """Whether worker ``caller`` started ``job`` with its caller key (its ``flashpoint`` metadata says so)."""
    meta = job.extra.get("flashpoint")
    return isinstance(meta, dict) and meta.get("caller") == caller


def request_caller(request: Request) -> str | None:
    """The worker whose caller key this request carries (``None``: an API key, or no key needed)."""
    caller: str | None = request.scope.get(CALLER_SCOPE_KEY)
    return caller


# ----------------------------------------------------------------------------------------------------------------------
# Routes. Plain Starlette routes behind one wrapper (API key, JSON errors): every job of a client crosses them, so
# they skip FastAPI's dependency injection and middleware (the native /v1 API, in the OpenAPI schema, keeps both).

Handler = Callable[[Request, ControlPlane, str, Intake], Awaitable[Response]]


def query_ms(request: Request, name: str, default: int, low: int, high: int) -> int:
    """The query parameter ``name`` in milliseconds (``default`` without it); outside ``[low, high]``: 400."""
    if not request.scope["query_string"]:  # the usual case: no query to parse
        return default
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise BadInputError(f"?{name}= must be milliseconds between {low} and {high}, got {text!r}", code="bad_request")
    return value


def _route(path: str, method: str, handler: Handler, plane: ControlPlane, state: Any, intake: Intake) -> Route:
    async def endpoint(request: Request) -> Response:
        if request.method != method:  # checked here: a bare router would answer 405 in plain text
            return json_response(error_body("method_not_allowed", f"use {method} {request.url.path}"), 405)
        try:
            who = principal_of(request, state)
        except HTTPException:
            return json_response(error_body("unauthorized", UNAUTHORIZED + " (or the raw key)"), 401)
        caller = caller_worker(who)
        if caller is not None:
            if handler not in CALLER_HANDLERS:
                return json_response(error_body("forbidden", CALLER_REFUSED), 403)
            request.scope[CALLER_SCOPE_KEY] = caller
        elif keyless(state) and handler in JSON_HANDLERS and not json_typed(request.headers.get("content-type")):
            # without a key, a body any web page could send (a form, text/plain) submits nothing (api/loopguard.py)
            return json_response(error_body(UNSUPPORTED_CODE, UNSUPPORTED_MESSAGE), 415)
        try:
            return await handler(request, plane, request.path_params["endpoint"], intake)
        except Error as exc:
            return error_response(exc)

    return Route(f"/v2/{{endpoint}}{path}", endpoint, methods=_ANY_METHOD)


async def _run(request: Request, plane: ControlPlane, endpoint: str, intake: Intake) -> Response:
    job = await _job_request(request, plane, endpoint, intake)
    await plane.committed()  # an id is only given out for a job that survives a crash
    # the state the job entered; a waiting worker may already have taken it by now
    return json_response({"id": job.id, "status": JobStatus.IN_QUEUE.value})


async def _runsync(request: Request, plane: ControlPlane, endpoint: str, intake: Intake) -> Response:
    wait = query_ms(request, "wait", 90_000, 1000, 300_000)
    job = await _job_request(request, plane, endpoint, intake)
    try:
        view = await plane.wait(job.id, wait / 1000)
    except TimeoutError:
        return json_response({"id": job.id, "status": plane.job(job.id).status.value})
    return json_response(view.to_json())


async def _status(request: Request, plane: ControlPlane, endpoint: str, intake: Intake) -> Response:
    job = _own_job(request, plane, endpoint, request.path_params["job_id"])
    return json_response(job.view().to_json())


async def _stream(request: Request, plane: ControlPlane, endpoint: str, intake: Intake) -> Response:
    wait = query_ms(request, "wait", 0, 0, 60_000)  # flashpoint's extension: hold for a chunk up to this long
    job = _own_job(request, plane, endpoint, request.path_params["job_id"])
    view, chunks = await plane.read_chunks(job.id, wait / 1000)
    # each chunk is {"output": ...}, with its encoding beside it when a worker sent it binary to an SDK caller
    return json_response({"id": view.id, "status": view.status.value, "stream": chunks})


async def _cancel(request: Request, plane: ControlPlane, endpoint: str, intake: Intake) -> Response:
    job = _own_job(request, plane, endpoint, request.path_params["job_id"])
    view = plane.cancel(job.id)
    return json_response({"id": view.id, "status": view.status.value})


async def _retry(request: Request, plane: ControlPlane, endpoint: str, intake: Intake) -> Response:
    job = plane.retry(_own_job(request, plane, endpoint, request.path_params["job_id"]).id)
    return json_response({"id": job.id, "status": JobStatus.IN_QUEUE.value})  # as for /run


async def _purge(request: Request, plane: ControlPlane, endpoint: str, intake: Intake) -> Response:
    # it removes every caller's queued jobs, as cancelling another key's job would: READ (decision 0100)
    ep = resolve_endpoint(request, plane, endpoint, Operation.READ)
    return json_response({"removed": plane.purge(ep.spec.key), "status": "completed"})


async def _health(request: Request, plane: ControlPlane, endpoint: str, intake: Intake) -> Response:
    return json_response(plane.health(resolve_endpoint(request, plane, endpoint, Operation.INVOKE).spec.key))


#: the routes that read a JSON body: without a key, they take only one declared ``application/json`` (else 415)
JSON_HANDLERS: frozenset[Handler] = frozenset({_run, _runsync})
#: what a worker's caller key opens here: calling endpoints and following the jobs that worker started
CALLER_HANDLERS: frozenset[Handler] = frozenset({_run, _runsync, _status, _stream, _cancel})


def client_routes(plane: ControlPlane, api_keys: tuple[str, ...], intake: Intake, *, state: Any = None) -> list[Route]:
    """Runpod's client API for ``plane``; with ``api_keys`` empty, no key is asked for. ``state``: where the keys are
    read at each request (the FastAPI app's ``state``: ``api_keys``, ``key_lookup``; then ``api_keys`` is unused)."""
    if state is None:
        state = key_state(api_keys)
    if getattr(state, "plane", None) is None:
        state.plane = plane
    table: list[tuple[str, str, Handler]] = [
        ("/run", "POST", _run),
        ("/runsync", "POST", _runsync),
        ("/status/{job_id}", "GET", _status),
        ("/stream/{job_id}", "GET", _stream),
        ("/cancel/{job_id}", "POST", _cancel),
        ("/retry/{job_id}", "POST", _retry),
        ("/purge-queue", "POST", _purge),
        ("/health", "GET", _health),
    ]
    return [_route(path, method, handler, plane, state, intake) for path, method, handler in table]
