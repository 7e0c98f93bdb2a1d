"""The client verbs of ``Endpoint(id="NAME")``, in Runpod Flash's shapes: ``run``, ``runsync`` and ``cancel`` return an
``EndpointJob``; ``get``/``post``/``put``/``delete``/``patch`` call the endpoint's HTTP routes.

``endpoint.EndpointClient`` is ``ClientMethods`` plus ``Endpoint`` (so ``Endpoint(id=...)`` is an ``Endpoint``, as in
Flash); the verbs live here to keep ``endpoint.py`` about declarations. This module never imports ``endpoint``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine, Generator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from flashpoint.config import Settings
from flashpoint.errors import ConfigError
from flashpoint.jobs import JobView
from flashpoint.sdk.connection import ServerConnection
from flashpoint.sdk.default_connection import connect
from flashpoint.sdk.endpointjob import EndpointJob, run_job, runsync_job, with_webhook

if TYPE_CHECKING:
    from flashpoint.explain import Explanation

__all__ = ["ClientMethods", "RouteCall", "check_query", "sdk_extra"]


def sdk_extra() -> dict[str, Any]:
    """The metadata every SDK job carries: it accepts outputs JSON cannot carry (sent pickled, marked as such)."""
    return {"flashpoint": {"binary_ok": True}}


class RouteCall:
    """An HTTP call to a route of a served endpoint: ``await`` it for the parsed JSON answer.

    It is not a route decorator: ``@client.post("/x")`` on an ``Endpoint(id=...)`` raises ``TypeError`` saying so
    (as Flash's client does), instead of Python's "'coroutine' object is not callable".
    """

    __slots__ = ("_coro", "_method", "_path")

    def __init__(self, coro: Coroutine[Any, Any, Any], method: str, path: str) -> None:
        self._coro = coro
        self._method = method
        self._path = path

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._coro.close()
        raise TypeError(
            f'Endpoint(id=...) is a client, not a route decorator: @ep.{self._method.lower()}("{self._path}") cannot '
            "register a handler on it; declare routes on Endpoint(name=...) instead"
        )


class ClientMethods:
    """Flash's client verbs over a flashpoint server (``FLASHPOINT_URL``) for the endpoint named ``id``."""

    id: str
    _conn: ServerConnection | None

    def _server(self) -> ServerConnection:
        """The connection to the server, without I/O; ConfigError when there is no server to talk to."""
        if self._conn is not None:
            return self._conn
        if not Settings.load().url:
            raise ConfigError(
                f"Endpoint(id={self.id!r}) is a client of an endpoint served by a flashpoint server: set "
                "FLASHPOINT_URL to its address (e.g. FLASHPOINT_URL=http://127.0.0.1:8000 for `flashpoint serve "
                "app.py`) and FLASHPOINT_API_KEY to its key"
            )
        conn = connect()
        if not isinstance(conn, ServerConnection):
            raise ConfigError(
                f"Endpoint(id={self.id!r}) needs a connection to a flashpoint server, but the connection in use "
                f"({type(conn).__name__}) is an in-process control plane; unset it with "
                "flashpoint.sdk.default_connection.use(None)"
            )
        return conn

    async def _connect(self) -> ServerConnection:
        if self._conn is None:
            conn = self._server()
            await conn.check_endpoint(self.id)
            self._conn = conn
        return self._conn

    # -- queue jobs ---------------------------------------------------------------------------------------------------

    async def run(self, input_data: Any, *, webhook: str | None = None) -> EndpointJob:
        """Submit a job with ``input_data`` as its input, as it is, and return it as soon as it is queued.

        Args:
            input_data: the job's input: the served function's keyword arguments as a JSON object. An endpoint that
                serves several functions takes the one to call in ``"function_name"``, as Flash's workers do.
            webhook: a URL the server POSTs the job's final state to (Runpod's ``webhook``).
        """
        conn = await self._connect()
        return await run_job(conn, self.id, input_data, with_webhook(conn, sdk_extra(), webhook))

    async def runsync(self, input_data: Any, timeout: float | None = 60.0) -> EndpointJob:
        """Submit a job and wait for it to end; the job (``output``, or ``error`` if it failed: it does not raise).

        Raises:
            TimeoutError: ``timeout`` seconds passed first (None: wait as long as it takes); the job goes on, and the
                message names it (``ep.job(id)`` finds it again).
        """
        conn = await self._connect()
        return await runsync_job(conn, self.id, input_data, sdk_extra(), timeout)

    async def cancel(self, job_id: str) -> EndpointJob:
        """Cancel a job (queued or running) and return it; a finished job is left as it is."""
        conn = await self._connect()
        return await EndpointJob(conn, JobView.queued(job_id, self.id)).cancel()

    def job(self, job_id: str) -> EndpointJob:
        """A job of this endpoint by its id, not fetched yet: ``await job.status()`` fetches it (flashpoint's own)."""
        return EndpointJob(self._server(), JobView.queued(job_id, self.id))

    def stream(self, input_data: Any) -> AsyncIterator[Any]:
        """Run a job of a generator endpoint and yield its chunks: ``async for chunk in ep.stream({...})``."""
        return self._stream(input_data)

    async def _stream(self, input_data: Any) -> AsyncIterator[Any]:
        conn = await self._connect()
        async for chunk in closing(conn.stream(self.id, input_data, sdk_extra())):
            yield chunk

    async def explain(self) -> Explanation:
        """Why this endpoint's jobs wait (or that they don't), per GPU candidate, as the server sees it."""
        conn = await self._connect()
        return await conn.explain_endpoint(self.id)

    # -- HTTP routes --------------------------------------------------------------------------------------------------

    def get(self, path: str, data: Any = None, *, timeout: float = 60.0) -> RouteCall:
        """``GET {FLASHPOINT_URL}/{id}{path}``, ``data`` as query parameters; the parsed JSON answer.

        Flash sends GET's ``data`` as a JSON body, which the route's handler never reads (GET handlers take query
        parameters); flashpoint sends it as the query, what the handler reads.
        """
        return self._route_call("GET", path, data, timeout)

    def post(self, path: str, data: Any = None, *, timeout: float = 60.0) -> RouteCall:
        """``POST {FLASHPOINT_URL}/{id}{path}`` with ``data`` as the JSON body; the parsed JSON answer.

        Example:
            >>> await Endpoint(id="my-api").post("/compute", {"numbers": [1, 2]})
        """
        return self._route_call("POST", path, data, timeout)

    def put(self, path: str, data: Any = None, *, timeout: float = 60.0) -> RouteCall:
        """``PUT {FLASHPOINT_URL}/{id}{path}`` with ``data`` as the JSON body; the parsed JSON answer."""
        return self._route_call("PUT", path, data, timeout)

    def delete(self, path: str, data: Any = None, *, timeout: float = 60.0) -> RouteCall:
        """``DELETE {FLASHPOINT_URL}/{id}{path}`` with ``data`` as the JSON body; the parsed JSON answer."""
        return self._route_call("DELETE", path, data, timeout)

    def patch(self, path: str, data: Any = None, *, timeout: float = 60.0) -> RouteCall:
        """``PATCH {FLASHPOINT_URL}/{id}{path}`` with ``data`` as the JSON body; the parsed JSON answer."""
        return self._route_call("PATCH", path, data, timeout)

    def _route_call(self, method: str, path: str, data: Any, timeout: float) -> RouteCall:
        _check_path(path)
        if method == "GET":
            check_query(data)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        return RouteCall(self._route(method, path, data, float(timeout)), method, path)

    async def _route(self, method: str, path: str, data: Any, timeout: float) -> Any:
        return await self._server().route(self.id, method, path, data, timeout)


async def closing(chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Yield from ``chunks`` and close them (an async generator) when the consumer stops early."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


def check_query(data: Any) -> None:
    """GET's data travels as query parameters: None, or a mapping of names to scalars or to lists of them."""
    if data is None:
        return
    if not isinstance(data, Mapping):
        raise TypeError(
            f"GET sends data as query parameters: pass a dict such as {{'limit': 10}}, got {type(data).__name__}"
        )
    for name, value in data.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            if not isinstance(name, str) or not isinstance(item, str | int | float | bool | None):
                raise TypeError(
                    "GET sends data as query parameters: names must be strings and values strings, numbers, "
                    f"booleans or None (or lists of them); {name!r} has {type(item).__name__}"
                )


def _check_path(path: str) -> None:
    """A route path: starts with ``/``, no ``.``/``..`` segments (they would leave the endpoint's prefix)."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"a route path starts with '/', e.g. '/v1/completions'; got {path!r}")
    segments = path.split("?", 1)[0].split("#", 1)[0].split("/")
    if any(segment in (".", "..") for segment in segments):
        raise ValueError(f"a route path has no '.' or '..' segments, got {path!r}")
