"""Runpod's client API under /v2/{endpoint}: run, runsync, status, stream, cancel, retry, purge-queue, health.

Bodies, statuses and quirks follow runpod-protocol.md §2 so the official ``runpod`` client works unchanged: every
response is JSON (errors too), ``runsync`` holds then falls back to ``{"id", "status"}``, terminal states are sticky,
``stream`` returns only chunks not read before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from flashpoint import codec
from flashpoint.api.deps import Plane, require_api_key
from flashpoint.api.workers import json_response
from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.jobs import Job, JobStatus
from flashpoint.scheduler.loop import ControlPlane

router = APIRouter(prefix="/v2/{endpoint}", tags=["runpod"], dependencies=[Depends(require_api_key)])

#: keys of a job request, besides ``input``, that are handed to the worker as they are
PASSTHROUGH = ("webhook", "s3Config", "policy", "webhookV2")
_DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class Intake:
    """What the server checks a job request against: per-endpoint input checkers, and whether pickles may enter."""

    checkers: dict[str, Callable[[Any], None]]
    allow_pickle: bool = False


def _intake(request: Request) -> Intake:
    intake = getattr(request.app.state, "intake", None)
    return intake if isinstance(intake, Intake) else Intake({})


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


async def _job_request(request: Request, plane: ControlPlane, endpoint: str) -> Job:
    """Parse and check a /run or /runsync body, then submit it: nothing is stored unless every check passes."""
    plane.endpoint(endpoint)  # 404 before anything else
    raw = await request.body()
    try:
        data = json.loads(raw.decode("utf-8")) if raw else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInputError(
            f'the body is not valid UTF-8 JSON ({exc}); send {{"input": {{...}}}}', code="bad_json"
        ) from None
    if not isinstance(data, dict):
        raise BadInputError('the body must be a JSON object like {"input": {...}}', code="bad_request")
    if "input" not in data:
        raise BadInputError('the body has no "input"; send {"input": {...}}', code="missing_input")
    payload = data["input"]
    policy = data.get("policy") or {}
    if not isinstance(policy, dict):
        raise BadInputError('"policy" must be an object, e.g. {"executionTimeout": 600000}', code="bad_request")
    execution_ms = _positive_ms(policy, "executionTimeout", 7 * _DAY_MS)
    ttl_ms = _positive_ms(policy, "ttl", 7 * _DAY_MS)
    webhook = data.get("webhook")
    if webhook is not None and (not isinstance(webhook, str) or not webhook.startswith(("http://", "https://"))):
        raise BadInputError(f'"webhook" must be an http(s) URL, got {webhook!r}', code="bad_request")
    meta = data.get("flashpoint")
    if meta is not None and not isinstance(meta, dict):
        raise BadInputError('"flashpoint" must be an object', code="bad_request")
    intake = _intake(request)
    if not intake.allow_pickle and _has_pickle(payload, meta):
        raise BadInputError(
            "this server accepts JSON input only: pickled arguments can run code on the server; pass JSON values, "
            "or start the server with --allow-pickle if every API key holder may run code there",
            code="pickle_not_allowed",
        )
    checker = intake.checkers.get(endpoint)
    if checker is not None and not (isinstance(payload, dict) and codec.PICKLE_KEY in payload):
        checker(payload)
    extra = {key: data[key] for key in PASSTHROUGH if key in data}
    if meta is not None:
        extra["flashpoint"] = {k: meta[k] for k in ("binary_ok", "init") if k in meta}
    return plane.submit(endpoint, payload, extra, execution_timeout_ms=execution_ms, ttl_ms=ttl_ms)


def _has_pickle(payload: Any, meta: dict[str, Any] | None) -> bool:
    init = (meta or {}).get("init")
    return any(isinstance(v, dict) and codec.PICKLE_KEY in v for v in (payload, init))


def _own_job(plane: ControlPlane, endpoint: str, job_id: str) -> Job:
    job = plane.job(job_id)
    if job.endpoint != endpoint:
        raise NotFoundError(f"endpoint {endpoint!r} has no job {job_id!r}")
    return job


@router.post("/run", summary="Submit a job; answers at once with its id")
async def run(endpoint: str, request: Request, plane: Plane) -> Response:
    job = await _job_request(request, plane, endpoint)
    await plane.committed()  # an id is only given out for a job that survives a crash
    # the state the job entered; a waiting worker may already have taken it by now
    return json_response({"id": job.id, "status": JobStatus.IN_QUEUE.value})


@router.post("/runsync", summary="Submit a job and hold until it ends, or answer with its id after `wait` ms")
async def runsync(
    endpoint: str,
    request: Request,
    plane: Plane,
    wait: int = Query(90_000, ge=1000, le=300_000, description="milliseconds to hold before answering"),
) -> Response:
    job = await _job_request(request, plane, endpoint)
    try:
        view = await plane.wait(job.id, wait / 1000)
    except TimeoutError:
        return json_response({"id": job.id, "status": plane.job(job.id).status.value})
    return json_response(view.to_json())


@router.get("/status/{job_id}", summary="A job's state: status, output or error, delay and execution time")
async def status(endpoint: str, job_id: str, plane: Plane) -> Response:
    return json_response(_own_job(plane, endpoint, job_id).view().to_json())


@router.get("/stream/{job_id}", summary="Streamed chunks not read before; empty once the job ended and all were read")
async def stream(
    endpoint: str,
    job_id: str,
    plane: Plane,
    wait: int = Query(0, ge=0, le=60_000, description="flashpoint extension: hold up to this many ms for a chunk"),
) -> Response:
    _own_job(plane, endpoint, job_id)
    view, chunks = await plane.read_stream(job_id, wait / 1000)
    return json_response({"id": view.id, "status": view.status.value, "stream": [{"output": c} for c in chunks]})


@router.post("/cancel/{job_id}", summary="Cancel a queued or running job; finished jobs stay as they are")
async def cancel(endpoint: str, job_id: str, plane: Plane) -> Response:
    _own_job(plane, endpoint, job_id)
    view = plane.cancel(job_id)
    return json_response({"id": view.id, "status": view.status.value})


@router.post("/retry/{job_id}", summary="Queue a FAILED or TIMED_OUT job again, under the same id")
async def retry(endpoint: str, job_id: str, plane: Plane) -> Response:
    _own_job(plane, endpoint, job_id)
    job = plane.retry(job_id)
    return json_response({"id": job.id, "status": JobStatus.IN_QUEUE.value})  # as for /run


@router.post("/purge-queue", summary="Cancel every queued job of the endpoint; running jobs go on")
async def purge_queue(endpoint: str, plane: Plane) -> Response:
    return json_response({"removed": plane.purge(endpoint), "status": "completed"})


@router.get("/health", summary="Job counters and workers by state")
async def health(endpoint: str, plane: Plane) -> Response:
    return json_response(plane.health(endpoint))
