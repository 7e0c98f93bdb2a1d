"""Runpod Flash's sentinel routes on ``flashpoint serve``: ``/v2/flash/...`` naming the endpoint in headers.

Flash's clients call every queue-based endpoint of a deployed app through one pseudo-endpoint, ``flash``, with
``X-Flash-Endpoint`` (the endpoint's name), ``X-Flash-App`` and ``X-Flash-Environment`` headers and ``Authorization:
Bearer <RUNPOD_API_KEY>``. runpod-flash 1.x (1.15+) posts only ``{RUNPOD_ENDPOINT_BASE_URL}/flash/runsync``; Runpod SDK
2.x's App API (``runpod.apps.targets.QueueClient``) uses the whole job API there: ``POST run``, ``POST runsync?wait=N``,
``GET status/{id}``, ``GET stream/{id}``, ``POST cancel/{id}``, ``POST retry/{id}``. Pointed at a server
(``RUNPOD_ENDPOINT_BASE_URL=http://HOST:PORT/v2``, ``RUNPOD_API_KEY=<its key>``), either client calls the endpoints
``flashpoint serve`` runs.

- Only a request carrying ``X-Flash-Endpoint`` comes here (``is_flash_call``); without it ``/v2/flash/...`` is Runpod's
  route of an endpoint named ``flash``. Same keys, body limit and intake checks as Runpod's client routes (without a
  key, a run or runsync body not declared ``application/json`` is 415, as both clients declare it); submitting is the
  key's ``INVOKE`` of the endpoint, following a job the rules of ``/v2/{id}/status`` (``api/runpod.py``
  ``reachable_job``), and a worker's caller key opens the verbs ``CALLER_HANDLERS`` opens there (not retry).
- Which endpoint (decisions 0100, 0104), among those the key sees, the same for every verb: when ``X-Flash-App`` names
  an app deployed here, ``app.env.name`` of the three headers (without ``X-Flash-Environment``, Flash 1.x's default
  ``production``; both clients always send all three), and nothing else: an environment not deployed is 404.
  Otherwise, for a key of no app, the endpoint's bare name when it names one endpoint (the app header is often only
  Flash's default, the folder's name); else 404 "app 'x' is not deployed; deploy it first with 'flashpoint deploy'"
  (both clients report a 404 on run or runsync as an endpoint not deployed, rc2 at once).
- A job's verbs (status, stream, cancel, retry) find the job by its id, then check the headers name its endpoint: the
  same headers that submitted it (recorded with the job), its id ``app.env.name``, or what they resolve to now. A job
  whose endpoint was undeployed since answers from its record; 404 only for a job that does not exist, is another
  endpoint's, or the key may not see (rc2 retries a 404 there with backoff, then raises ``EndpointNotFound``).
- Bodies: ``{"input": {kwargs}}``; a class method's ``{"input": {"method": NAME, ...}}``; Flash's ``"__empty": true``
  (sent for a call without arguments) is dropped. ``webhook``, ``s3Config`` and ``policy`` as on ``/v2/{id}/run``
  (``submit_checked``: ``policy.lowPriority``, a boolean, sends the job at low priority, ``Job.low_priority``, as
  on every run route). ``X-Flash-App``/``X-Flash-Environment`` are recorded there too (``"flash": {"app",
  "environment"}``).
- An endpoint serving several functions (a shared name): Flash's ``function_name`` in the input names the one to
  call (as on Runpod's routes); else the one function whose signature the input fits; else 400 ``bad_input``
  listing them.
- Answers (decisions 0035, 0110): a job that has ended is shaped for both clients' readers (``flash_answer``): a
  completed job's ``output`` is always present (both return the whole body when it is missing), any other end carries
  ``error`` (both raise "remote execution failed: <error>"). A runsync whose job still runs when the hold ends answers
  Runpod's SDK (``User-Agent: RunPod-Python-SDK/...``, rc2) with Runpod's ``{"id", "status"}``, which it polls, and
  anyone else (Flash 1.x) with ``error`` beside them, which Flash raises (it would return the body as the result).
  ``stream`` holds until a chunk is there or the job ends (at most ``STREAM_HOLD_MS``), and its reply once the job has
  ended carries every chunk not read before.

Edge module (HTTP layer): may import starlette and the rest of flashpoint.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from flashpoint.access import Operation
from flashpoint.api.errors import body as error_body, error_response, status_of
from flashpoint.api.guard import (
    UNAUTHORIZED,
    caller_worker,
    find_endpoint,
    hidden_app,
    key_state,
    keyless,
    principal_of,
    resolve_endpoint,
    sees_endpoint,
)
from flashpoint.api.loopguard import UNSUPPORTED_CODE, UNSUPPORTED_MESSAGE, json_typed
from flashpoint.api.runpod import (
    CALLER_HANDLERS,
    CALLER_REFUSED,
    CALLER_SCOPE_KEY,
    FUNCTION_NAME,
    Intake,
    job_record,
    parse_body,
    query_ms,
    reachable_job,
    served_targets,
    submit_checked,
)
from flashpoint.api.workers import json_response
from flashpoint.errors import BadInputError, ConflictError, Error, NotFoundError
from flashpoint.jobs import Job, JobStatus, JobView
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.spec import endpoint_id, split_endpoint_id
from flashpoint.wire import codec

log = logging.getLogger("flashpoint.api")

#: the path Flash 1.x's client posts queue-based calls to (its "sentinel" endpoint id is ``flash``)
FLASH_PATH = "/v2/flash/runsync"
#: what every sentinel route's path starts with
FLASH_PREFIX = "/v2/flash/"
#: the sentinel routes: a verb that submits (``run``, ``runsync``) or one that follows a job by its id
_FLASH_ROUTE = re.compile(r"/v2/flash/(?:(runsync|run)|(status|stream|cancel|retry)/([^/]+))")
#: each verb's method (Runpod's, runpod-protocol.md §2.3)
METHODS = {"run": "POST", "runsync": "POST", "status": "GET", "stream": "GET", "cancel": "POST", "retry": "POST"}
#: what a worker's caller key opens here: the verbs whose Runpod routes it opens (``runpod.CALLER_HANDLERS``)
CALLER_VERBS = frozenset(handler.__name__.lstrip("_") for handler in CALLER_HANDLERS)
#: the header that makes a request on the sentinel routes Flash's, and names the endpoint
ENDPOINT_HEADER = b"x-flash-endpoint"
#: Flash's marker for a call without arguments (Runpod drops an empty input); never an argument
EMPTY = "__empty"
#: how long a call waits for its job's end, by default: under Flash 1.x's client timeout (``FLASH_SENTINEL_TIMEOUT``,
#: 90 s), so that the client reads this answer rather than give up first (rc2 always sends ``?wait=``)
HOLD_MS = 85_000
#: the longest a ``stream`` poll is held waiting for a chunk (rc2 polls again at once, without a pause)
STREAM_HOLD_MS = 30_000
#: what Runpod's Python SDK (rc2's App API among its clients) starts its User-Agent with (``runpod/user_agent.py``);
#: Flash 1.x sends ``Runpod Flash/<version>``
RUNPOD_SDK_AGENT = "RunPod-Python-SDK/"
#: the environment Flash's client sends when ``FLASH_ENV`` is unset (``runpod_flash.flash_context.DEFAULT_ENV``); a
#: call naming an app and no environment is for this one (decision 0104)
DEFAULT_ENV = "production"
#: the longest header values taken: an endpoint name, an app or environment name
MAX_ENDPOINT, MAX_LABEL = 256, 128


def is_flash_call(scope: Scope) -> bool:
    """A request for these routes: a sentinel route's path (``/v2/flash/runsync``, ``/v2/flash/status/{id}``, ...)
    with an ``X-Flash-Endpoint`` header (any value)."""
    path: str = scope["path"]
    return (
        path.startswith(FLASH_PREFIX)
        and _FLASH_ROUTE.fullmatch(path) is not None
        and any(name == ENDPOINT_HEADER for name, _ in scope["headers"])
    )


def _header(scope: Scope, name: bytes, limit: int, *, required: bool) -> str | None:
    """One header's value: printable ASCII, at most ``limit`` characters, given once (``bad_request`` otherwise)."""
    values = [value for key, value in scope["headers"] if key == name]
    title = name.decode().title()
    if not values:
        if required:
            raise BadInputError(f"send the endpoint's name in {title}", code="bad_request")
        return None
    if len(values) > 1:
        raise BadInputError(f"send {title} once, got it {len(values)} times", code="bad_request")
    raw = values[0]
    if len(raw) > limit or any(not 0x20 <= byte <= 0x7E for byte in raw):
        raise BadInputError(f"{title} must be at most {limit} printable ASCII characters", code="bad_request")
    return bytes(raw).decode("ascii")


def _names(scope: Scope) -> tuple[str, dict[str, str]]:
    """The endpoint's name the headers give, and the app and environment they give (only those sent)."""
    endpoint = _header(scope, ENDPOINT_HEADER, MAX_ENDPOINT, required=True)
    assert endpoint is not None
    if not endpoint or "/" in endpoint:
        raise BadInputError("X-Flash-Endpoint must name an endpoint (no '/')", code="bad_request")
    record = {
        key: value
        for key, value in (
            ("app", _header(scope, b"x-flash-app", MAX_LABEL, required=False)),
            ("environment", _header(scope, b"x-flash-environment", MAX_LABEL, required=False)),
        )
        if value is not None
    }
    return endpoint, record


def runpod_client(request: Request) -> bool:
    """Whether the request comes from Runpod's Python SDK (rc2's App API), which reads a runsync answer as a Runpod
    job and polls one still running, rather than Flash 1.x's client, which raises an answer's ``error`` (decision
    0110)."""
    return request.headers.get("user-agent", "").startswith(RUNPOD_SDK_AGENT)


class FlashRoute:
    """The ASGI app of the sentinel routes for Flash's clients (``api.app.Dispatch`` sends them here)."""

    def __init__(self, plane: ControlPlane, api_keys: tuple[str, ...], intake: Intake, *, state: Any = None) -> None:
        self.plane = plane
        #: where the keys are read at each request (``api/guard.py``): the FastAPI app's state, or ``api_keys``
        self.state = key_state(api_keys) if state is None else state
        if getattr(self.state, "plane", None) is None:
            self.state.plane = plane
        self.intake = intake
        #: the verbs that follow a job, by name
        self.job_verbs: dict[str, Callable[[Request, Job], Awaitable[Response]]] = {
            "status": self._status,
            "stream": self._stream,
            "cancel": self._cancel,
            "retry": self._retry,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._answer(Request(scope, receive))
        await response(scope, receive, send)

    async def _answer(self, request: Request) -> Response:
        route = _FLASH_ROUTE.fullmatch(request.scope["path"])
        if route is None:  # Dispatch sends only is_flash_call's requests; a direct caller may not
            return json_response(error_body("not_found", f"no route {request.method} {request.scope['path']}"), 404)
        verb, job_id = route[1] or route[2], route[3]
        if request.method != METHODS[verb]:
            return json_response(error_body("method_not_allowed", f"use {METHODS[verb]} {route[0]}"), 405)
        try:
            who = principal_of(request, self.state)
        except HTTPException:
            return json_response(error_body("unauthorized", UNAUTHORIZED + " (Flash sends RUNPOD_API_KEY)"), 401)
        caller = caller_worker(who)
        if caller is not None:  # a worker's caller key calls endpoints here as on /run
            if verb not in CALLER_VERBS:
                return json_response(error_body("forbidden", CALLER_REFUSED), 403)
            request.scope[CALLER_SCOPE_KEY] = caller
        elif job_id is None and keyless(self.state) and not json_typed(request.headers.get("content-type")):
            return json_response(error_body(UNSUPPORTED_CODE, UNSUPPORTED_MESSAGE), 415)  # api/loopguard.py
        try:
            name, record = _names(request.scope)
            if job_id is None:
                return await self._submit(request, name, record, sync=verb == "runsync")
            return await self.job_verbs[verb](request, self._job(request, name, record, job_id))
        except Error as exc:
            status = status_of(exc)
            if status == 400:
                # Flash 1.x's client raises only the status for anything but 404 (raise_for_status): say why here
                log.warning("Flash call refused (%s): %s", exc.code, exc)
            return error_response(exc)

    # ------------------------------------------------------------------------------------------------------------------
    # submitting: run, runsync

    async def _submit(self, request: Request, name: str, record: dict[str, str], *, sync: bool) -> Response:
        hold_ms = query_ms(request, "wait", HOLD_MS, 1000, 300_000) if sync else 0
        # 404 (or 403) before anything else: both clients report a 404 as an endpoint not deployed
        ep = resolve_endpoint(request, self.plane, self._target(request, name, record), Operation.INVOKE)
        endpoint = ep.spec.key
        raw = await request.body()
        data = parse_body(raw)
        payload = data["input"]
        if isinstance(payload, dict) and EMPTY in payload:
            data["input"] = payload = {key: value for key, value in payload.items() if key != EMPTY}
        meta = data.get("flashpoint")
        if meta is not None and not isinstance(meta, dict):
            raise BadInputError('"flashpoint" must be an object', code="bad_request")
        target = self._fitting_target(endpoint, payload, meta)
        if target is not None:
            data["flashpoint"] = {**(meta or {}), "target": target}
        noted: dict[str, Any] = {"flash": record, **job_record(request)}
        job = submit_checked(self.plane, endpoint, data, self.intake, size=len(raw), record=noted)
        if not sync:
            await self.plane.committed()  # an id is only given out for a job that survives a crash (as /run)
            return json_response({"id": job.id, "status": JobStatus.IN_QUEUE.value})
        try:
            view = await self.plane.wait(job.id, hold_ms / 1000)
        except TimeoutError:
            status = self.plane.job(job.id).status.value
            if runpod_client(request):
                return json_response({"id": job.id, "status": status})  # rc2 polls /flash/status/{id}
            message = (
                f"job {job.id} of endpoint {endpoint!r} is still {status} after {hold_ms / 1000:g} s; it goes on, and "
                f"its result will be at GET /v2/{endpoint}/status/{job.id}"
            )
            return json_response({"id": job.id, "status": status, "error": message})
        return json_response(flash_answer(view))

    # ------------------------------------------------------------------------------------------------------------------
    # following a job: status, stream, cancel, retry

    def _job(self, request: Request, name: str, record: dict[str, str], job_id: str) -> Job:
        """Job ``job_id`` when the headers name its endpoint and the request's key may reach it; otherwise the 404 of
        a job that does not exist (what a key may not see is absent)."""
        where = f" in app {record['app']!r}" if record.get("app") else ""

        def missing() -> NotFoundError:
            return NotFoundError(f"endpoint {name!r}{where} has no job {job_id!r}")

        try:
            job = self.plane.job(job_id)
        except NotFoundError:
            raise missing() from None
        if not self._names_job(request, name, record, job):
            raise missing()
        return reachable_job(request, job, missing)

    def _names_job(self, request: Request, name: str, record: dict[str, str], job: Job) -> bool:
        """Whether the headers name ``job``'s endpoint: the headers that submitted it (recorded with it), its id
        ``app.env.name``, or the endpoint they resolve to now. The first two hold whatever is deployed now, so a job
        whose endpoint was undeployed since still answers."""
        parts = split_endpoint_id(job.endpoint)
        meta = job.extra.get("flashpoint")
        if name in (job.endpoint, parts and parts[2]) and isinstance(meta, dict) and meta.get("flash") == record:
            return True
        app = record.get("app")
        if app and job.endpoint == endpoint_id(app, record.get("environment") or DEFAULT_ENV, name):
            return True
        try:
            target = self._target(request, name, record)
            return find_endpoint(self.plane, principal_of(request), target).spec.key == job.endpoint
        except Error:
            return False

    async def _status(self, request: Request, job: Job) -> Response:
        return json_response(job_answer(job.view()))

    async def _stream(self, request: Request, job: Job) -> Response:
        # held until a chunk is there or the job ends: rc2 polls again at once; once it has ended, every chunk not
        # read before is in this reply (the read takes them all)
        wait = query_ms(request, "wait", STREAM_HOLD_MS, 0, STREAM_HOLD_MS)
        view, chunks = await self.plane.read_chunks(job.id, wait / 1000)
        body: dict[str, Any] = {"id": view.id, "status": view.status.value, "stream": chunks}
        if view.status.terminal and view.status is not JobStatus.COMPLETED:
            body["error"] = flash_answer(view)["error"]  # rc2 raises it, as for a result
        return json_response(body)

    async def _cancel(self, request: Request, job: Job) -> Response:
        return json_response(job_answer(self.plane.cancel(job.id)))

    async def _retry(self, request: Request, job: Job) -> Response:
        if job.status in (JobStatus.FAILED, JobStatus.TIMED_OUT) and job.endpoint not in self.plane.endpoints:
            # not a 404: rc2 would retry that for half a minute, then call the endpoint missing, not the job
            raise ConflictError(
                f"job {job.id}'s endpoint {job.endpoint!r} is not deployed any more: the job cannot run again; "
                "deploy it and submit a new job"
            )
        self.plane.retry(job.id)
        return json_response({"id": job.id, "status": JobStatus.IN_QUEUE.value})  # as for /run

    # ------------------------------------------------------------------------------------------------------------------
    # which endpoint, which function

    def _target(self, request: Request, name: str, record: dict[str, str]) -> str:
        """The endpoint a call names (decisions 0100, 0104), among the endpoints the request's key sees.

        - ``X-Flash-App`` names an app deployed here: ``app.env.name``, the environment ``X-Flash-Environment`` or,
          without one, Flash's default ``production``; an environment of the app not deployed is 404 (never another
          environment's endpoint).
        - Else, for a key limited to an app, 404: the app is not deployed (for it: hidden is absent).
        - Else the bare name, when it names one endpoint (Flash's app header is its default, the folder's name, far
          more often than a deliberate one: a served project's, say).
        - Else 404: the app is not deployed (Flash's client reports any 404 as such), the endpoints of that name, when
          several apps have it, named in the body; or, where no app is deployed at all, the missing endpoint's 404.
        """
        app = record.get("app")
        if not app:
            return name
        env = record.get("environment") or DEFAULT_ENV
        who = principal_of(request, self.state)
        seen = [ep.spec for ep in self.plane.state.endpoints.values() if sees_endpoint(who, ep.spec.key)]
        if any(spec.app == app for spec in seen):
            if not any(spec.app == app and spec.app_env == env for spec in seen):
                raise hidden_app(who, app, env)
            return endpoint_id(app, env, name)
        if who.app is not None:
            # a key of one app that names another: not deployed, for it, whether or not it is (hidden is absent)
            raise hidden_app(who, app, None)
        try:
            return find_endpoint(self.plane, who, name).spec.key
        except NotFoundError:
            if all(spec.app is None for spec in seen):
                raise
            raise hidden_app(who, app, None) from None
        except ConflictError:
            ids = ", ".join(sorted(spec.key for spec in seen if spec.name == name))
            raise NotFoundError(f"{hidden_app(who, app, None)}; {name!r} is deployed as {ids}") from None

    def _fitting_target(self, endpoint: str, payload: Any, meta: dict[str, Any] | None) -> str | None:
        """On an endpoint serving several functions, when nothing names one (Flash's client cannot), the one whose
        signature the input fits; ``None`` when the endpoint serves one, or the input or metadata names it."""
        targets = served_targets(self.intake, endpoint)
        if len(targets) < 2 or not isinstance(payload, dict) or FUNCTION_NAME in payload or codec.PICKLE_KEY in payload:
            return None
        if meta is not None and meta.get("target") is not None:
            return None
        misfits: dict[str, str] = {}
        for target in targets:
            try:
                self.intake.checkers[f"{endpoint}/{target}"](payload)
            except BadInputError as exc:
                misfits[target] = str(exc)
        fitting = [target for target in targets if target not in misfits]
        if len(fitting) == 1:
            return fitting[0]
        how = f'name one in the input: {{"{FUNCTION_NAME}": "{targets[0]}", ...}}'
        if fitting:
            raise BadInputError(
                f"endpoint {endpoint!r} serves several functions and the input fits {', '.join(fitting)}; {how}",
                code="bad_input",
            )
        raise BadInputError(
            f"endpoint {endpoint!r} serves several functions ({', '.join(targets)}) and the input fits none of them "
            f"({'; '.join(misfits.values())}); {how}",
            code="bad_input",
        )


def flash_answer(view: JobView) -> dict[str, Any]:
    """A finished job as Flash's client reads it: ``output`` always present when it completed (Flash returns the
    whole body when it is missing), ``error`` on any other end (Flash raises it)."""
    body = view.to_json()
    if view.status is JobStatus.COMPLETED:
        body["output"] = view.output
        return body
    if view.error is not None:
        body["error"] = f"{view.error.type}: {view.error.message}"
        if view.error.traceback:
            body["traceback"] = view.error.traceback
    else:
        reason = f" ({view.reason.value})" if view.reason is not None else ""
        body["error"] = f"job {view.id} ended {view.status.value}{reason}"
    return body


def job_answer(view: JobView) -> dict[str, Any]:
    """A job's state for status and cancel: Runpod's state object while it runs; once it has ended, ``flash_answer``
    (rc2's job reads a missing ``output`` as the whole body, and raises an ``error``)."""
    return flash_answer(view) if view.status.terminal else view.to_json()
