"""Runpod Flash's own client on ``flashpoint serve``: ``POST /v2/flash/runsync`` naming the endpoint in a header.

In a plain ``python script.py``, Flash's client (runpod-flash 1.15+) calls every queue-based endpoint of a deployed
app through one URL, ``{RUNPOD_ENDPOINT_BASE_URL}/flash/runsync``, with ``X-Flash-Endpoint`` (the endpoint's name),
``X-Flash-App`` and ``X-Flash-Environment`` headers and ``Authorization: Bearer <RUNPOD_API_KEY>``. Pointed at a
server (``RUNPOD_ENDPOINT_BASE_URL=http://HOST:PORT/v2``, ``RUNPOD_API_KEY=<its key>``), an unmodified Flash script
calls the endpoints ``flashpoint serve`` runs.

- Only a request carrying ``X-Flash-Endpoint`` comes here; a plain ``/v2/flash/runsync`` is Runpod's route of an
  endpoint named ``flash``. Same keys, body limit and intake checks as Runpod's client routes (without a key, a body
  not declared ``application/json`` is 415, as Flash's client declares it); the call is the key's ``INVOKE`` of the
  endpoint (``api/guard.py``).
- Which endpoint (decisions 0100, 0104), among those the key sees: when ``X-Flash-App`` names an app deployed here,
  ``app.env.name`` of the three headers (without ``X-Flash-Environment``, Flash's default ``production``; Flash 1.21
  always sends all three), and nothing else: an environment not deployed is 404. Otherwise, for a key of no app, the
  endpoint's bare name when it names one endpoint (the app header is often only Flash's default, the folder's name);
  else 404 "app 'x' is not deployed; deploy it first with 'flashpoint deploy'" (Flash's client raises its own "not
  found in app ... deploy it first" for any 404).
- Bodies: ``{"input": {kwargs}}``; a class method's ``{"input": {"method": NAME, ...}}``; Flash's ``"__empty": true``
  (sent for a call without arguments) is dropped. ``X-Flash-App``/``X-Flash-Environment`` are recorded in the job's
  ``flashpoint`` metadata (``"flash": {"app", "environment"}``).
- An endpoint serving several functions (a shared name): Flash's ``function_name`` in the input names the one to
  call (as on Runpod's routes); else the one function whose signature the input fits; else 400 ``bad_input``
  listing them.
- Answers are shaped for Flash's ``_handle_sentinel_response``: a completed job's ``output`` is always present (a
  missing one makes Flash return the whole body as the result); any other end carries ``error`` (Flash raises
  ``RuntimeError("remote execution failed: <error>")``), and so does a job still running when the hold ends (its
  status and id beside it: the job goes on). An unknown endpoint is 404, which Flash reports as not deployed.

Edge module (HTTP layer): may import starlette and the rest of flashpoint.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from flashpoint.access import Operation
from flashpoint.api.errors import body as error_body, status_of
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
    CALLER_SCOPE_KEY,
    FUNCTION_NAME,
    Intake,
    job_record,
    parse_body,
    query_ms,
    served_targets,
    submit_checked,
)
from flashpoint.api.workers import json_response
from flashpoint.errors import BadInputError, ConflictError, Error, NotFoundError
from flashpoint.jobs import JobStatus, JobView
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.spec import endpoint_id
from flashpoint.wire import codec

log = logging.getLogger("flashpoint.api")

#: the one path Flash's client posts queue-based calls to (its "sentinel" endpoint id is ``flash``)
FLASH_PATH = "/v2/flash/runsync"
#: the header that makes a request on FLASH_PATH Flash's, and names the endpoint
ENDPOINT_HEADER = b"x-flash-endpoint"
#: Flash's marker for a call without arguments (Runpod drops an empty input); never an argument
EMPTY = "__empty"
#: how long a call waits for its job's end, by default: under Flash's client timeout (``FLASH_SENTINEL_TIMEOUT``,
#: 90 s), so that the client reads this answer rather than give up first
HOLD_MS = 85_000
#: the environment Flash's client sends when ``FLASH_ENV`` is unset (``runpod_flash.flash_context.DEFAULT_ENV``); a
#: call naming an app and no environment is for this one (decision 0104)
DEFAULT_ENV = "production"
#: the longest header values taken: an endpoint name, an app or environment name
MAX_ENDPOINT, MAX_LABEL = 256, 128


def is_flash_call(scope: Scope) -> bool:
    """A request for this route: ``/v2/flash/runsync`` with an ``X-Flash-Endpoint`` header (any value)."""
    return scope["path"] == FLASH_PATH and any(name == ENDPOINT_HEADER for name, _ in scope["headers"])


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


class FlashRoute:
    """The ASGI app of ``POST /v2/flash/runsync`` for Flash's client (``api.app.Dispatch`` sends it here)."""

    def __init__(self, plane: ControlPlane, api_keys: tuple[str, ...], intake: Intake, *, state: Any = None) -> None:
        self.plane = plane
        #: where the keys are read at each request (``api/guard.py``): the FastAPI app's state, or ``api_keys``
        self.state = key_state(api_keys) if state is None else state
        if getattr(self.state, "plane", None) is None:
            self.state.plane = plane
        self.intake = intake

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._answer(Request(scope, receive))
        await response(scope, receive, send)

    async def _answer(self, request: Request) -> Response:
        if request.method != "POST":
            return json_response(error_body("method_not_allowed", f"use POST {FLASH_PATH}"), 405)
        try:
            who = principal_of(request, self.state)
        except HTTPException:
            return json_response(error_body("unauthorized", UNAUTHORIZED + " (Flash sends RUNPOD_API_KEY)"), 401)
        caller = caller_worker(who)
        if caller is not None:  # a worker's caller key calls endpoints here as on /run
            request.scope[CALLER_SCOPE_KEY] = caller
        if keyless(self.state) and not json_typed(request.headers.get("content-type")):  # api/loopguard.py
            return json_response(error_body(UNSUPPORTED_CODE, UNSUPPORTED_MESSAGE), 415)
        try:
            return await self._runsync(request)
        except Error as exc:
            status = status_of(exc)
            if status == 400:
                # Flash's client raises only the status for anything but 404 (raise_for_status): say why here
                log.warning("Flash call refused (%s): %s", exc.code, exc)
            return json_response(error_body(exc.code, str(exc)), status)

    async def _runsync(self, request: Request) -> Response:
        scope = request.scope
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
        hold_ms = query_ms(request, "wait", HOLD_MS, 1000, 300_000)
        # 404 (or 403) before anything else: Flash reports a 404 as an endpoint not deployed
        ep = resolve_endpoint(request, self.plane, self._target(request, endpoint, record), Operation.INVOKE)
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
        job = submit_checked(
            self.plane, endpoint, data, self.intake, size=len(raw), record={"flash": record, **job_record(request)}
        )
        try:
            view = await self.plane.wait(job.id, hold_ms / 1000)
        except TimeoutError:
            status = self.plane.job(job.id).status.value
            message = (
                f"job {job.id} of endpoint {endpoint!r} is still {status} after {hold_ms / 1000:g} s; it goes on, and "
                f"its result will be at GET /v2/{endpoint}/status/{job.id}"
            )
            return json_response({"id": job.id, "status": status, "error": message})
        return json_response(flash_answer(view))

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
