"""The Runpod worker protocol's routes (runpod-protocol.md §3): job-take, job-take-batch, job-stop, job-done,
job-stream, ping; plus job-done-batch, flashpoint's own worker's way to post several results and take its next jobs in
one exchange. Plain Starlette routes: these are the hot path of every job.

Each request must carry the key of the worker its path names (``ControlPlane.worker_credential``: bound to that
worker id and endpoint), so one endpoint's code can neither take another's jobs nor post for another worker. Bodies
are read up to the plane's ``max_result_bytes`` and parsed with a nesting bound.
"""

from __future__ import annotations

import hmac
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flashpoint.scheduler.loop import ControlPlane
from flashpoint.wire import codec, coldstart, protocol

_EMPTY = Response(status_code=204)


def json_response(body: Any, status: int = 200) -> Response:
    """JSON that keeps every text, lone surrogates included (see ``codec.json_bytes``)."""
    return Response(codec.json_bytes(body), status_code=status, media_type="application/json")


def error_response(status: int, code: str, message: str) -> Response:
    return json_response({"error": message, "code": code, "message": message}, status)


def key_matches(header: str | None, keys: tuple[str, ...]) -> bool:
    """``Authorization: KEY`` (workers) or ``Bearer KEY`` (clients), compared in constant time."""
    if not header:
        return False
    token = header[7:] if header[:7].lower() == "bearer " else header
    token_bytes = token.strip().encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(token_bytes, key.encode())
    return matched


class _TooLarge(Exception):
    pass


async def read_limited(request: Request, limit: int) -> bytes:
    """The request body, refused past ``limit`` bytes (by Content-Length, or while it streams in)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def worker_routes(plane: ControlPlane) -> list[Route]:
    def denied(request: Request) -> Response | None:
        p = request.path_params
        key = plane.worker_credential(p["endpoint"], p["worker"])
        if key_matches(request.headers.get("authorization"), (key,)):
            return None
        return error_response(
            401, "unauthorized", "worker routes need the worker's own key (RUNPOD_AI_API_KEY) in Authorization"
        )

    def too_large() -> Response:
        limit = plane.max_result_bytes
        return error_response(
            413, "payload_too_large", f"a worker's post may hold at most {limit} bytes; post the results one at a time"
        )

    async def take(request: Request) -> Response:
        if (bad := denied(request)) is not None:
            return bad
        p = request.path_params
        jobs = await plane.take(p["endpoint"], p["worker"], 1, phases=request.headers.get(coldstart.HEADER))
        return json_response(jobs[0]) if jobs else _EMPTY

    async def take_batch(request: Request) -> Response:
        if (bad := denied(request)) is not None:
            return bad
        p = request.path_params
        try:
            size = max(1, min(int(request.query_params.get("batch_size", "1")), 1000))
        except ValueError:
            return error_response(400, "bad_request", "batch_size must be an integer")
        jobs = await plane.take(p["endpoint"], p["worker"], size, phases=request.headers.get(coldstart.HEADER))
        return json_response(jobs) if jobs else _EMPTY

    async def stop(request: Request) -> Response:
        if (bad := denied(request)) is not None:
            return bad
        p = request.path_params
        ids = await plane.stop_signals(p["endpoint"], p["worker"])
        return json_response({"jobsToStop": ids}) if ids else _EMPTY

    async def read_json(request: Request) -> Any:
        # Runpod workers send JSON labelled application/x-www-form-urlencoded: parse the raw body whatever the type
        raw = await read_limited(request, plane.max_result_bytes)
        return codec.loads_bounded(raw) if raw else {}

    async def done(request: Request) -> Response:
        if (bad := denied(request)) is not None:
            return bad
        p = request.path_params
        try:
            body = await read_json(request)
        except _TooLarge:
            # the job cannot complete with this output: it fails now, rather than wait for a retry that cannot work
            plane.output_too_large(p["endpoint"], p["worker"], p["job"], plane.max_result_bytes)
            return too_large()
        except (ValueError, UnicodeDecodeError) as exc:
            return error_response(400, "bad_json", f"job-done body must be UTF-8 JSON: {exc}")
        plane.done(p["endpoint"], p["worker"], p["job"], body)
        return json_response({})

    async def done_batch(request: Request) -> Response:
        """flashpoint's extension, beside Runpod's job-take-batch: ``[{"id": JOB, ...job-done body}, ...]`` in one
        request; with ``&take=N`` the answer holds for up to N next jobs (a list, as job-take-batch), else 204."""
        if (bad := denied(request)) is not None:
            return bad
        p = request.path_params
        try:
            body = await read_json(request)
            take = max(0, min(int(request.query_params.get("take", "0")), 1000))
        except _TooLarge:
            return too_large()
        except (ValueError, UnicodeDecodeError) as exc:
            return error_response(400, "bad_json", f"job-done-batch needs a JSON list and an integer take: {exc}")
        if not isinstance(body, list) or not all(isinstance(r, dict) and isinstance(r.get("id"), str) for r in body):
            return error_response(400, "bad_request", 'job-done-batch takes a list of results: [{"id": JOB, ...}]')
        results = [(r["id"], r) for r in body]
        phases = request.headers.get(coldstart.HEADER)
        jobs = await plane.done_batch(p["endpoint"], p["worker"], results, take, phases)
        return json_response(jobs) if jobs else _EMPTY

    async def chunk(request: Request) -> Response:
        if (bad := denied(request)) is not None:
            return bad
        p = request.path_params
        try:
            body = await read_json(request)
        except _TooLarge:
            return too_large()
        except (ValueError, UnicodeDecodeError) as exc:
            return error_response(400, "bad_json", f"job-stream body must be UTF-8 JSON: {exc}")
        plane.chunk(p["endpoint"], p["worker"], p["job"], body)
        return json_response({})

    async def ping(request: Request) -> Response:
        if (bad := denied(request)) is not None:
            return bad
        # Runpod's heartbeat names the jobs in progress in job_id (omitted when idle): the watchdog's evidence
        named = request.query_params.get("job_id", "") if request.scope["query_string"] else ""
        plane.ping(request.path_params["endpoint"], request.path_params["worker"], [j for j in named.split(",") if j])
        return json_response({})

    return [
        Route(protocol.TAKE, take, methods=["GET"]),
        Route(protocol.TAKE_BATCH, take_batch, methods=["GET"]),
        Route(protocol.STOP, stop, methods=["GET"]),
        Route(protocol.DONE, done, methods=["POST"]),
        Route(protocol.DONE_BATCH, done_batch, methods=["POST"]),
        Route(protocol.CHUNK, chunk, methods=["POST"]),
        Route(protocol.PING, ping, methods=["GET"]),
    ]
