"""Every HTTP error is JSON: ``{"error", "code", "message"}``; flashpoint errors map to statuses in one table."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from flashpoint import errors
from flashpoint.api.workers import json_response

log = logging.getLogger("flashpoint.api")

#: the one table from flashpoint's error classes to HTTP statuses (first match in the class's MRO wins)
STATUS: dict[type[errors.Error], int] = {
    errors.NotFoundError: 404,
    errors.BadInputError: 400,
    errors.QueueFullError: 429,
    errors.BudgetSpentError: 429,
    errors.UnsatisfiableError: 409,
    errors.ConflictError: 409,
    errors.ForbiddenError: 403,
    errors.InvalidTransitionError: 409,
    errors.InvalidEndpointError: 400,
    errors.ConfigError: 400,
    errors.BackendError: 503,
    errors.StoreError: 500,
}


def body(code: str, message: str, **details: Any) -> dict[str, Any]:
    """Runpod clients read ``error``; flashpoint's client reads ``code`` and ``message``."""
    return {"error": message, "code": code, "message": message, **details}


#: codes whose status is not their type's: an upload over a limit is 413 whichever check found it
STATUS_BY_CODE = {"payload_too_large": 413}


def status_of(exc: errors.Error) -> int:
    if exc.code in STATUS_BY_CODE:
        return STATUS_BY_CODE[exc.code]
    for kind in type(exc).__mro__:
        if kind in STATUS:
            return STATUS[kind]
    return 500


def error_response(exc: errors.Error) -> Response:
    """The JSON answer of a flashpoint error: its body and status; a spent budget (decision 0113) adds the budget,
    when it renews (``renewsAt``, epoch seconds) and a ``Retry-After`` header."""
    if isinstance(exc, errors.BudgetSpentError):
        details = {"quota": exc.quota, "renewsAt": exc.renews_at, "retryAfterS": exc.retry_after_s}
        response = json_response(body(exc.code, str(exc), **details), status_of(exc))
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    return json_response(body(exc.code, str(exc)), status_of(exc))


async def _flashpoint_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, errors.Error)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if isinstance(exc.detail, dict) and "code" in exc.detail:
        detail = exc.detail
        extra = {k: v for k, v in detail.items() if k not in ("code", "message")}
        response = json_response(body(detail["code"], detail.get("message", ""), **extra), exc.status_code)
        response.headers.update(exc.headers or {})
        return response  # fmt: skip
    code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized", 413: "payload_too_large"}.get(
        exc.status_code, "http_error"
    )
    message = str(exc.detail) if exc.status_code != 404 else f"no route {request.method} {request.url.path}"
    return json_response(body(code, message), exc.status_code)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(p) for p in error.get('loc', ()))}: {error.get('msg', '')}" for error in exc.errors()
    )
    return json_response(body("bad_request", f"invalid request: {problems}"), 400)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error serving %s %s", request.method, request.url.path)
    return json_response(body("internal_error", f"{type(exc).__name__}: {exc}"), 500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(errors.Error, _flashpoint_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
