"""Client mode: a ``Connection`` to a flashpoint server over HTTP, used when ``FLASHPOINT_URL`` is set.

Jobs go in through Runpod's ``/v2/{endpoint}/...`` routes and come back through flashpoint's native ``/v1`` API,
whose job bodies carry everything a ``JobView`` holds (the error's remote type and traceback included). Waiting is a
long poll (``/v1/jobs/{id}/wait``), streaming too (``/v2/{endpoint}/stream/{id}?wait=...``).

One ``httpx.AsyncClient`` per event loop: the SDK may be driven by several ``asyncio.run`` calls in a row, and an
httpx client belongs to the loop that opened its connections. Each one is closed when its loop shuts down.

Edge module (L5): flashpoint's domain (L0-L2) and httpx only; never ``flashpoint.api`` or the server.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import ssl
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx

from flashpoint.errors import (
    BackendError,
    BadInputError,
    BudgetSpentError,
    ConfigError,
    ConflictError,
    Error,
    ForbiddenError,
    InvalidEndpointError,
    InvalidTransitionError,
    JobCancelledError,
    JobFailedError,
    JobTimeoutError,
    NotFoundError,
    NotReadyError,
    QueueFullError,
    RolloutFailed,
    StoreError,
    UnknownGPUError,
    UnsatisfiableError,
)
from flashpoint.explain import Explanation
from flashpoint.jobs import JobStatus, JobView
from flashpoint.sdk.jobhandle import job_failure
from flashpoint.spec import EndpointSpec, WorkerTarget
from flashpoint.wire import codec

#: the wire ``code`` of an error body -> the class raised here (the inverse of the server's class -> status table)
ERRORS_BY_CODE: dict[str, type[Error]] = {
    cls.code: cls
    for cls in (
        Error,
        ConfigError,
        InvalidEndpointError,
        UnknownGPUError,
        NotFoundError,
        InvalidTransitionError,
        BadInputError,
        ConflictError,
        ForbiddenError,
        JobFailedError,
        JobCancelledError,
        JobTimeoutError,
        BackendError,
        NotReadyError,
        QueueFullError,
        BudgetSpentError,
        RolloutFailed,
        StoreError,
        UnsatisfiableError,
    )
}
#: codes of requests the server rejected, raised as ``BadInputError`` with that code
REJECTED_CODES = frozenset({"bad_request", "bad_json", "missing_input", "pickle_not_allowed", "payload_too_large"})

#: longest hold asked of ``/v1/jobs/{id}/wait`` (the server allows 60 s; stay below proxies' idle timeouts)
WAIT_HOLD_S = 50.0
#: hold asked of ``/v2/{endpoint}/stream/{id}``, in milliseconds
STREAM_HOLD_MS = 25_000
#: job id -> endpoint entries remembered for ``cancel`` (which needs the endpoint in its path)
_REMEMBERED_JOBS = 4096
#: the largest answer an HTTP-route call reads (as a worker's largest result); a larger one is an error
MAX_ROUTE_RESPONSE_BYTES = 32 * 1024 * 1024
#: what ``route`` calls; GET's data travels as query parameters, the others' as a JSON body
ROUTE_METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH"})


class HTTPConnection:
    """A ``Connection`` to the flashpoint server at ``url``: what decorated calls use when ``FLASHPOINT_URL`` is set.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8000``.
        api_key: sent as ``Authorization: Bearer KEY`` (``FLASHPOINT_API_KEY``; of a comma-separated list, the first).
        timeout_s: how long one request may take, on top of any long-poll hold it asks for.

    ``register`` only checks that the server serves the endpoint: code is never uploaded; the server runs its own.
    """

    #: the server runs its own code (``register`` only checks that it serves the endpoint)
    hosts_code = False

    def __init__(self, url: str, api_key: str | None = None, *, timeout_s: float = 30.0) -> None:
        base = url.strip().rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ConfigError(f"FLASHPOINT_URL must be an http(s) URL such as http://127.0.0.1:8000; got {url!r}")
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.url = base
        keys = [part.strip() for part in (api_key or "").split(",") if part.strip()]
        self.api_key = keys[0] if keys else None
        self.timeout_s = float(timeout_s)
        self._clients: dict[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, AsyncGenerator[None, None]]] = {}
        self._jobs: OrderedDict[str, str] = OrderedDict()

    def __repr__(self) -> str:
        return f"<HTTPConnection {self.url}>"

    # ----------------------------------------------------------------------------------------------------------------
    # one httpx client per event loop

    async def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is not None:
            return entry[0]
        for stale in [other for other in self._clients if other.is_closed()]:
            del self._clients[stale]  # its loop closed it already (see _closed_with_loop)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        client = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(self.timeout_s, pool=None),
            # many concurrent long polls each hold a connection; past the limit they queue for one (pool=None)
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            verify=_tls(),
        )
        closer = _closed_with_loop(client)
        self._clients[loop] = (client, closer)
        await closer.asend(None)  # started: the loop now tracks it and closes it at shutdown (asyncio.run does)
        return client

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop (the others close with their loops)."""
        entry = self._clients.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[1].aclose()

    # ----------------------------------------------------------------------------------------------------------------
    # requests

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        hold_s: float = 0.0,
    ) -> Any:
        """One request; the JSON answer, or the flashpoint error its error body names."""
        client = await self._client()
        timeout = httpx.Timeout(self.timeout_s + hold_s, connect=self.timeout_s, pool=None)
        try:
            response = await client.request(method, path, json=body, params=params, timeout=timeout)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise BackendError(
                f"cannot reach the flashpoint server at {self.url} ({exc or type(exc).__name__}); "
                "start it with `flashpoint serve app.py`, or unset FLASHPOINT_URL to run endpoints in this process"
            ) from None
        except httpx.TimeoutException:
            raise BackendError(
                f"the flashpoint server at {self.url} did not answer {method} {path} within "
                f"{self.timeout_s + hold_s:g}s"
            ) from None
        except httpx.TransportError as exc:
            raise BackendError(
                f"lost the connection to the flashpoint server at {self.url} during {method} {path}: {exc!r}"
            ) from None
        if not response.is_success:
            raise self._error(response, f"{method} {path}")
        try:
            return response.json()
        except ValueError:
            raise Error(
                f"the flashpoint server at {self.url} answered {method} {path} with a body that is not JSON: "
                f"{response.text[:200]!r}"
            ) from None

    def _error(self, response: httpx.Response, what: str) -> Error:
        """The flashpoint error for a non-2xx answer, by its body's ``code``."""
        try:
            data = response.json()
        except ValueError:
            data = None
        code = data.get("code") if isinstance(data, dict) else None
        message = data.get("message") if isinstance(data, dict) else None
        if response.status_code == 401 or code == "unauthorized":
            if self.api_key is None:
                return ConfigError(
                    f"the flashpoint server at {self.url} needs an API key; "
                    "set FLASHPOINT_API_KEY to one of the keys it was started with"
                )
            return ConfigError(
                f"the flashpoint server at {self.url} refused the API key; "
                "set FLASHPOINT_API_KEY to one of the keys it was started with"
            )
        if not isinstance(code, str):
            return Error(
                f"the flashpoint server at {self.url} answered {what} with HTTP {response.status_code}: "
                f"{response.text[:200]!r}"
            )
        text = message if isinstance(message, str) and message else f"{code} (HTTP {response.status_code})"
        return error_for(code, text)

    def _view(self, data: Any) -> JobView:
        view = JobView.from_native(data)
        self._remember(view.id, view.endpoint)
        return view

    def _remember(self, job_id: str, endpoint: str) -> None:
        self._jobs[job_id] = endpoint
        self._jobs.move_to_end(job_id)
        while len(self._jobs) > _REMEMBERED_JOBS:
            self._jobs.popitem(last=False)

    # ----------------------------------------------------------------------------------------------------------------
    # Connection

    async def check_endpoint(self, name: str) -> None:
        """Raise ``NotFoundError`` (listing what the server serves) unless the server has endpoint ``name``."""
        try:
            await self._request("GET", f"/v1/endpoints/{_seg(name)}")
        except NotFoundError:
            if self.url == os.environ.get("FLASHPOINT_CALLER_URL", "").rstrip("/"):  # inside a worker
                # (its caller key may not list the plane's endpoints)
                raise NotFoundError(
                    f"the control plane that runs this worker has no endpoint {name!r}: a script's "
                    "endpoints are registered at their first call, with the endpoints their code names; name it in the "
                    "code of an endpoint the script calls, call it once from the script, or serve the file that "
                    "declares them all (`flashpoint serve app.py`)"
                ) from None
            served = await self._served()
            listing = f"it serves {', '.join(served)}" if served else "it serves no endpoint"
            raise NotFoundError(
                f"the flashpoint server at {self.url} has no endpoint {name!r} ({listing}); serve the file that "
                "declares it (`flashpoint serve app.py`), or unset FLASHPOINT_URL to run it in this process"
            ) from None

    async def _served(self) -> list[str]:
        try:
            data = await self._request("GET", "/v1/endpoints")
        except Error:
            return []
        rows = data.get("endpoints", []) if isinstance(data, dict) else data
        if not isinstance(rows, list):
            return []
        return sorted(str(row["name"]) if isinstance(row, dict) else str(row) for row in rows)

    async def register(self, spec: EndpointSpec, target: WorkerTarget) -> None:
        """Check that the server serves ``spec.name``; the server runs its own code, so nothing is uploaded."""
        await self.check_endpoint(spec.name)

    async def submit(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView:
        data = await self._request("POST", f"/v2/{_seg(endpoint)}/run", body={"input": payload, **extra})
        view = JobView.queued(data["id"], endpoint, created_at=time.time())
        self._remember(view.id, endpoint)
        return view

    async def call(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView:
        view = await self.submit(endpoint, payload, extra)
        return await self.wait(view.id, None)

    async def get(self, job_id: str) -> JobView:
        return self._view(await self._request("GET", f"/v1/jobs/{_seg(job_id)}"))

    async def wait(self, job_id: str, timeout: float | None) -> JobView:
        """Long-poll until the job ends; the builtin ``TimeoutError`` once ``timeout`` seconds have passed."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        pause = _Pause()
        while True:
            hold = WAIT_HOLD_S if deadline is None else max(0.0, min(deadline - loop.time(), WAIT_HOLD_S))
            asked = loop.time()
            data = await self._request(
                "GET", f"/v1/jobs/{_seg(job_id)}/wait", params={"timeout": _seconds(hold)}, hold_s=hold
            )
            view = self._view(data)
            if view.status.terminal:
                return view
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"job {job_id} did not finish within {timeout}s (it is {view.status.value})")
            await pause.unless_held(loop.time() - asked, hold, deadline, loop)

    async def cancel(self, job_id: str) -> JobView:
        endpoint = self._jobs.get(job_id) or (await self.get(job_id)).endpoint
        await self._request("POST", f"/v2/{_seg(endpoint)}/cancel/{_seg(job_id)}")
        return await self.get(job_id)

    async def retry(self, job_id: str) -> JobView:
        endpoint = self._jobs.get(job_id) or (await self.get(job_id)).endpoint
        await self._request("POST", f"/v2/{_seg(endpoint)}/retry/{_seg(job_id)}")
        return await self.get(job_id)

    async def explain_job(self, job_id: str) -> Explanation:
        return Explanation.from_json(await self._request("GET", f"/v1/jobs/{_seg(job_id)}/explain"))

    async def explain_endpoint(self, name: str) -> Explanation:
        return Explanation.from_json(await self._request("GET", f"/v1/endpoints/{_seg(name)}/explain"))

    async def route(self, endpoint: str, method: str, path: str, data: Any, timeout: float) -> Any:
        """Call an HTTP route of a served endpoint: ``METHOD {url}/{endpoint}{path}`` with the server's API key, where
        ``flashpoint serve`` hands it to one of the endpoint's workers. ``data`` is the JSON body (POST, PUT, PATCH,
        DELETE) or the query parameters (GET); the answer is its parsed JSON (None when empty).

        Raises:
            TimeoutError: no whole answer within ``timeout`` seconds.
            ConfigError: the server refused the API key (401).
            NotFoundError: 404 (no such endpoint or route); Error: any other non-2xx answer, a body that is not JSON
                or one over ``MAX_ROUTE_RESPONSE_BYTES``; both name the status and the start of the body.
            BackendError: the server cannot be reached.
        """
        if method not in ROUTE_METHODS:
            raise ValueError(f"method must be one of {', '.join(sorted(ROUTE_METHODS))}, got {method!r}")
        target = f"/{_seg(endpoint)}{path}"
        what = f"{method} {self.url}{target}"
        params, content, headers = None, None, {}
        if method == "GET":
            params = _query(data)
        elif data is not None:
            content, headers = codec.json_bytes(data), {"Content-Type": "application/json"}
        client = await self._client()

        async def exchange() -> tuple[httpx.Response, bytes]:
            request = client.build_request(
                method, target, params=params, content=content, headers=headers, timeout=httpx.Timeout(timeout)
            )
            response = await client.send(request, stream=True)
            try:
                return response, await _read_bounded(response, what)
            finally:
                await response.aclose()

        try:
            # the whole exchange, not only each read, is bounded: a server that trickles bytes cannot hold it longer
            response, body = await asyncio.wait_for(exchange(), timeout)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise TimeoutError(f"{what} did not answer within {timeout:g}s") from None
        except httpx.ConnectError as exc:
            raise BackendError(
                f"cannot reach the flashpoint server at {self.url} ({exc or type(exc).__name__}); start it with "
                "`flashpoint serve app.py`"
            ) from None
        except httpx.TransportError as exc:
            raise BackendError(f"lost the connection to the flashpoint server during {what}: {exc!r}") from None
        return _route_answer(response, body, what, has_key=self.api_key is not None)

    async def stream(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> AsyncIterator[Any]:
        """Submit a job to a generator endpoint and yield its chunks as they arrive.

        Raises:
            JobFailedError: (or JobCancelledError, JobTimeoutError) when the job ends without completing, after the
                chunks it streamed before that.
        """
        view = await self.submit(endpoint, payload, extra)
        async for chunk in self.follow(view.id):
            yield chunk

    async def follow(self, job_id: str) -> AsyncIterator[Any]:
        """Yield the chunks of a job already submitted as they arrive; ``JobFailedError`` (or a subclass) at the end
        when it ends without completing."""
        endpoint = self._jobs.get(job_id) or (await self.get(job_id)).endpoint
        path = f"/v2/{_seg(endpoint)}/stream/{_seg(job_id)}"
        loop = asyncio.get_running_loop()
        hold = STREAM_HOLD_MS / 1000
        pause = _Pause()
        while True:
            asked = loop.time()
            data = await self._request("GET", path, params={"wait": str(STREAM_HOLD_MS)}, hold_s=hold)
            chunks = data.get("stream") or []
            for chunk in chunks:
                yield codec.decode_chunk(chunk)
            status = JobStatus(data["status"])
            if status.terminal and not chunks:
                break
            if not chunks:
                await pause.unless_held(loop.time() - asked, hold, None, loop)
        if status is not JobStatus.COMPLETED:
            raise job_failure(await self.get(job_id))


def error_for(code: str, message: str) -> Error:
    """The flashpoint error an error body ``{"code", "message"}`` stands for (``Error`` for codes unknown here)."""
    kind = ERRORS_BY_CODE.get(code)
    if kind is BadInputError or code in REJECTED_CODES:
        return BadInputError(message, code=code)
    return (kind or Error)(message)


class _Pause:
    """Back off between polls that came back early with nothing new (a server that does not hold long polls)."""

    def __init__(self) -> None:
        self.delay = 0.05

    async def unless_held(
        self, took: float, hold: float, deadline: float | None, loop: asyncio.AbstractEventLoop
    ) -> None:
        if took >= hold / 2:
            self.delay = 0.05
            return
        pause = self.delay if deadline is None else min(self.delay, max(0.0, deadline - loop.time()))
        self.delay = min(self.delay * 1.5, 1.0)
        await asyncio.sleep(pause)


async def _closed_with_loop(client: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """Suspended at its ``yield`` for the life of the loop; the loop's shutdown (``shutdown_asyncgens``) closes it."""
    try:
        yield
    finally:
        await client.aclose()


def _query(data: Any) -> list[tuple[str, Any]] | None:
    """GET's data as query parameters: a mapping of names to scalars, or to lists of them (a repeated name); the SDK
    checked its shape (``endpointclient.check_query``)."""
    if data is None:
        return None
    return [
        (name, item) for name, value in data.items() for item in (value if isinstance(value, list | tuple) else [value])
    ]


async def _read_bounded(response: httpx.Response, what: str) -> bytes:
    """The response's body, read up to ``MAX_ROUTE_RESPONSE_BYTES``."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_ROUTE_RESPONSE_BYTES:
        raise Error(f"{what} answered {declared} bytes, more than the {MAX_ROUTE_RESPONSE_BYTES} read at most")
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_ROUTE_RESPONSE_BYTES:
            raise Error(f"{what} answered more than the {MAX_ROUTE_RESPONSE_BYTES} bytes read at most")
    return bytes(body)


def _route_answer(response: httpx.Response, body: bytes, what: str, *, has_key: bool) -> Any:
    """The parsed JSON of a route's answer, or the error a non-2xx answer stands for."""
    text = body[:500].decode("utf-8", "replace")
    if response.status_code == 401:
        key = "refused the API key" if has_key else "needs an API key"
        raise ConfigError(
            f"{what} answered HTTP 401: the server {key}; set FLASHPOINT_API_KEY to one of its keys ({text!r})"
        )
    if response.status_code == 404:
        raise NotFoundError(
            f"{what} answered HTTP 404: {text!r}; is the endpoint served there, and does it have that route?"
        )
    if not response.is_success:
        raise Error(f"{what} answered HTTP {response.status_code}: {text!r}")
    if not body.strip():
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Error(f"{what} answered HTTP {response.status_code} with a body that is not JSON: {text!r}") from None


def _seg(text: str) -> str:
    """A path segment, quoted."""
    return quote(text, safe="")


def _seconds(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"


__all__ = [
    "ERRORS_BY_CODE",
    "MAX_ROUTE_RESPONSE_BYTES",
    "REJECTED_CODES",
    "ROUTE_METHODS",
    "HTTPConnection",
    "error_for",
]


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client of this process, made as httpx makes its default one (its CA bundle,
    ``SSL_CERT_FILE``/``SSL_CERT_DIR``): building one loads the bundle (about 60 ms here), which httpx would otherwise
    do for each client (one per event loop, so once per ``asyncio.run``)."""
    return httpx.create_ssl_context()
