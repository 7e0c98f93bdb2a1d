"""The embedded server: a control plane and its worker routes, served in a background thread of this process.

It runs on its own event loop, so it outlives any one ``asyncio.run`` and serves sync callers too. The SDK's default
connection (``default_connection.connect()``) starts one on the first call of a decorated function when
``FLASHPOINT_URL`` is not set, and stops it at interpreter exit. It announces itself to ``flashpoint explain`` and
``flashpoint gpus`` on this machine with a file in ``$FLASHPOINT_STATE_DIR/run`` (``announce.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from flashpoint.config import Settings
from flashpoint.errors import ConfigError, UnsatisfiableError
from flashpoint.explain import Explanation
from flashpoint.hosting import announce
from flashpoint.hosting.plane import PlaneRole, build_plane, http_url, listening_socket
from flashpoint.jobs import JobStatus, JobView
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.sdk.jobhandle import job_failure
from flashpoint.spec import EndpointSpec, WorkerTarget
from flashpoint.terminal import InertFormatter
from flashpoint.wire import codec

log = logging.getLogger("flashpoint")
T = TypeVar("T")
#: the largest request body the embedded server's route proxy forwards (as ``flashpoint serve``'s default)
EMBEDDED_MAX_BODY_BYTES = 10 * 1024 * 1024
#: an embedded plane lives and ends with its script: PlaneSettings' defaults (its running jobs are cancelled at exit)
EMBEDDED_ROLE = PlaneRole()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # uvloop is optional (not on Windows)
        return asyncio.new_event_loop()


class EmbeddedServer:
    """A control plane (``.plane``) and its worker routes, served on 127.0.0.1 from a thread of this process.

    A ``Connection``: every call runs on the server's own event loop.
    """

    #: ``register`` takes the endpoint's code: this plane runs what the script declares
    hosts_code = True

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.load()
        self.plane: ControlPlane
        self.loop = _new_loop()
        self.url = ""
        self.api_key = secrets.token_urlsafe(24)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="flashpoint-plane", daemon=True)
        self._tmp = tempfile.TemporaryDirectory(prefix="flashpoint-")
        self._announce: Path | None = None
        self.closed = False

    # ----------------------------------------------------------------------------------------------------------------
    # life cycle

    def start(self) -> EmbeddedServer:
        self._thread.start()
        if not self._ready.wait(60):
            raise ConfigError("the embedded control plane did not start within 60 s")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as exc:  # reported to the thread that called start()
            self._error = exc
            self._ready.set()
        finally:
            self.loop.close()

    async def _main(self) -> None:
        import uvicorn
        from starlette.applications import Starlette
        from starlette.routing import Mount

        from flashpoint.api.loopguard import LoopbackGuard, host_names
        from flashpoint.api.transport import hardened_protocol
        from flashpoint.api.workers import worker_routes

        self._stop = asyncio.Event()
        # Workers on other nodes (Ray) reach the plane where FLASHPOINT_WORKER_URL says; every route needs a key
        where = urlsplit(self.settings.worker_url) if self.settings.worker_url else None
        host = (where.hostname if where else None) or "127.0.0.1"
        sock = listening_socket(host, (where.port if where else None) or 0)
        self.url = http_url(host, sock.getsockname()[1])
        self.plane = build_plane(
            self.settings, EMBEDDED_ROLE, base_url=self.url, simulated=self.settings.simulated_gpus
        )
        # the native /v1 routes (for `flashpoint explain` and `gpus`) load FastAPI on their first request only
        native = Mount("/v1", app=_LazyNativeApp(self.plane, (self.api_key,)))
        # Runpod's client routes, for code in workers calling other endpoints with their caller keys (this process's
        # own calls skip HTTP), built on their first request
        clients = _LazyClientRoutes(self.plane, self.api_key)
        # HTTP-route endpoints under /NAME/, with this plane's API key (its announcement file holds it)
        routes = [*worker_routes(self.plane), native]
        if self.settings.dashboard:  # the web page at / (Starlette only: FastAPI still waits for a /v1 request)
            from flashpoint.api.dashboard import dashboard_routes

            routes += dashboard_routes()
        inner = Starlette(routes=routes)
        inner.router.default = clients  # what no route takes
        app = _LazyRoutes(inner, self.plane, self.api_key, wait_s=self.settings.route_wait_s)
        # its key guards the API, not the dashboard's page: only this machine's names, and no other origin's page
        names = host_names(host, sock.getsockname()[0], worker_url=self.settings.worker_url)
        config = uvicorn.Config(
            LoopbackGuard(app, names, "set FLASHPOINT_WORKER_URL to the URL other machines reach this plane at"),
            http=hardened_protocol(),
            log_level="warning",
            access_log=False,
            proxy_headers=False,  # a client's X-Forwarded-* never names its address (the route proxy sends the peer's)
            lifespan="off",
            timeout_keep_alive=120,
        )
        server = uvicorn.Server(config)
        await self.plane.start()
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if serving.done():
                serving.result()  # raises what stopped it
            await asyncio.sleep(0.005)
        notice = announce.Announcement(announce.EMBEDDED, self.url, self.api_key)
        # quiet: a script whose plane cannot be announced runs all the same, without a warning on every run
        self._announce = announce.write(self.settings.state_dir, notice, name=f"{id(self):x}", quiet=True)
        log.debug("embedded control plane at %s; fleet: %s", self.url, self.plane.fleet_summary())
        if self.settings.dashboard:
            print(dashboard_line(self.url, self._announce), file=sys.stderr, flush=True)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            try:
                _warn_dropped(self.plane)
                await self.plane.close()
            finally:
                server.should_exit = True
                await serving
                await app.close()
            announce.withdraw(self._announce)

    def close(self) -> None:
        """Stop workers and the HTTP routes; safe to call twice."""
        if self.closed:
            return
        self.closed = True
        if self._thread.is_alive() and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(30)
        self._tmp.cleanup()

    # ----------------------------------------------------------------------------------------------------------------
    # Connection: every call runs on the plane's loop

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the plane's loop from a thread without a loop (tests, the CLI)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _on_plane(self, fn: Callable[[asyncio.Future[T]], None]) -> asyncio.Future[T]:
        """Run ``fn(future)`` on the plane's loop; it settles the caller's ``future`` through ``_deliver``.

        One callback each way and no tasks: this is the path of every SDK call.
        """
        if self.closed:
            raise ConfigError("this embedded control plane is closed")
        caller = asyncio.get_running_loop()
        future: asyncio.Future[T] = caller.create_future()

        def run() -> None:
            try:
                fn(future)
            except Exception as exc:
                _deliver(future, error=exc)

        self.loop.call_soon_threadsafe(run)
        return future

    async def _compute(self, fn: Callable[[], T]) -> T:
        """The value of ``fn()`` computed on the plane's loop."""
        return await self._on_plane(lambda future: _deliver(future, fn()))

    async def register(self, spec: EndpointSpec, target: WorkerTarget) -> None:
        def run() -> None:
            path = None
            if target.pickled is not None:
                digest = hashlib.sha256(target.pickled).hexdigest()[:16]  # a shared name's code grows as it joins
                path = Path(self._tmp.name) / f"{spec.name}-{digest}.pkl"
                if not path.exists():
                    path.write_bytes(target.pickled)
            self.plane.register(spec, target, str(path) if path else None)

        await self._compute(run)

    async def submit(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView:
        execution_ms, ttl_ms = _policy_limits(extra)
        return await self._compute(
            lambda: self.plane.submit(endpoint, payload, extra, execution_timeout_ms=execution_ms, ttl_ms=ttl_ms).view()
        )

    async def call(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView:
        execution_ms, ttl_ms = _policy_limits(extra)

        def run(future: asyncio.Future[JobView]) -> None:
            self._check_satisfiable(endpoint)
            job = self.plane.submit(endpoint, payload, extra, execution_timeout_ms=execution_ms, ttl_ms=ttl_ms)
            self.plane.on_finish(job.id, lambda view: _deliver(future, view))

        return await self._on_plane(run)

    def _check_satisfiable(self, endpoint: str) -> None:
        """A waiting call to an endpoint this fleet can never run fails at once when the fleet cannot change (the
        local backend): it would wait forever (README's first example on a machine without GPUs)."""
        ep = self.plane.endpoint(endpoint)
        if ep.never is None or not getattr(self.plane.supervisor.backend, "static_fleet", False):
            return
        from flashpoint.scheduler.views import never_message

        raise UnsatisfiableError(
            never_message(ep.spec, ep.never, self.plane.index)
            + " Nothing was submitted: this call would have waited forever (`fn.run(...)` queues the job anyway)."
        )

    async def get(self, job_id: str) -> JobView:
        return await self._compute(lambda: self.plane.job(job_id).view())

    async def wait(self, job_id: str, timeout: float | None) -> JobView:
        unsubscribe: list[Callable[[], None]] = []

        def run(future: asyncio.Future[JobView]) -> None:
            unsubscribe.append(self.plane.on_finish(job_id, lambda view: _deliver(future, view)))

        future = self._on_plane(run)
        try:
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            self.loop.call_soon_threadsafe(lambda: [stop() for stop in unsubscribe])
            raise TimeoutError(f"job {job_id} did not finish within {timeout}s") from None

    async def cancel(self, job_id: str) -> JobView:
        return await self._compute(lambda: self.plane.cancel(job_id))

    async def retry(self, job_id: str) -> JobView:
        return await self._compute(lambda: self.plane.retry(job_id).view())

    async def explain_job(self, job_id: str) -> Explanation:
        return await self._compute(lambda: self.plane.explain_job(job_id))

    async def explain_endpoint(self, name: str) -> Explanation:
        return await self._compute(lambda: self.plane.explain_endpoint(name))

    async def stream(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> AsyncIterator[Any]:
        """Submit, then yield each chunk a generator endpoint produces as it arrives."""
        view = await self.submit(endpoint, payload, extra)
        async for chunk in self.follow(view.id):
            yield chunk

    async def follow(self, job_id: str) -> AsyncIterator[Any]:
        """Yield each chunk of a job already submitted as it arrives; its failure as ``job_failure`` at the end."""
        while True:
            read = asyncio.run_coroutine_threadsafe(self.plane.read_chunks(job_id, 25.0), self.loop)
            state, chunks = await asyncio.wrap_future(read)
            for chunk in chunks:
                yield codec.decode_chunk(chunk)
            if state.status.terminal and not chunks:
                if state.status is not JobStatus.COMPLETED:
                    raise job_failure(state)
                return


def dashboard_line(url: str, key_file: Path | None) -> str:
    """The one line an embedded server prints at start: where its dashboard is, and where its API key is."""
    where = f"key in {key_file}" if key_file is not None else "its key could not be written to FLASHPOINT_STATE_DIR"
    return f"flashpoint: dashboard at {url}/ ({where}; FLASHPOINT_DASHBOARD=0 turns it off)"


class _LazyClientRoutes:
    """Runpod's client routes (``/v2/NAME/run``, ...), built on the first request under ``/v2/`` that no worker route
    took: they import FastAPI's error handling and the webhooks' aiohttp (about 0.3 s), which a script's cold start
    should not pay when no worker calls another endpoint. Pickles are allowed: every caller here runs this program's
    own code. Other paths get Starlette's own 404."""

    def __init__(self, plane: ControlPlane, api_key: str) -> None:
        from starlette.routing import Router

        self._plane = plane
        self._key = api_key
        self._clients: Any = None
        self._none = Router(routes=[])

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not scope.get("path", "").startswith("/v2/"):
            await self._none(scope, receive, send)
            return
        if self._clients is None:
            from starlette.routing import Router

            from flashpoint.api.runpod import Intake, client_routes

            routes = client_routes(self._plane, (self._key,), Intake({}, allow_pickle=True))
            self._clients = Router(routes=routes)
        await self._clients(scope, receive, send)


def _warn_dropped(plane: ControlPlane) -> None:
    """An embedded plane lives as long as its script: say how many jobs its end drops (submitted with ``fn.run`` and
    never waited for), rather than let them vanish."""
    queued = running = 0
    for job in plane.store.unfinished():
        if job.status is JobStatus.IN_QUEUE:
            queued += 1
        else:
            running += 1
    if queued or running:
        log.warning(
            "the script is ending with %d job(s) still queued and %d running: they are dropped (cancelled). Wait for "
            "their results before the script ends (`await job.result()`), or serve the endpoints with `flashpoint "
            "serve` for jobs that outlive a script",
            queued,
            running,
        )


class _LazyRoutes:
    """``app``, with requests under ``/{route endpoint}/`` going to a route proxy, built once a route endpoint is
    registered: an embedded server without route endpoints never imports the proxy or its client."""

    def __init__(self, app: Any, plane: ControlPlane, api_key: str, *, wait_s: float) -> None:
        self._app = app
        self._plane = plane
        self._key = api_key
        self._wait_s = wait_s
        self._proxy: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._plane.routed and scope["type"] == "http":
            if self._proxy is None:
                from flashpoint.api.routeproxy import RouteProxy

                self._proxy = RouteProxy(
                    self._plane, (self._key,), max_body_bytes=EMBEDDED_MAX_BODY_BYTES, wait_s=self._wait_s
                )
            ep = self._proxy.endpoint_of(scope["path"])
            if ep is not None:
                from starlette.requests import ClientDisconnect

                try:
                    await self._proxy.serve(ep, scope, receive, send)
                except ClientDisconnect:
                    log.debug("a client hung up before its request to %s was answered", scope["path"])
                return
        await self._app(scope, receive, send)

    async def close(self) -> None:
        if self._proxy is not None:
            await self._proxy.close()


class _LazyNativeApp:
    """The native /v1 app, built on its first request: the embedded server does not pay FastAPI's import at start."""

    def __init__(self, plane: ControlPlane, api_keys: tuple[str, ...]) -> None:
        self._plane = plane
        self._keys = api_keys
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from flashpoint.api.native import create_native_app

            self._app = create_native_app(self._plane, self._keys)
        await self._app(scope, receive, send)


def _policy_limits(extra: dict[str, Any]) -> tuple[int | None, int | None]:
    """A request's ``policy`` limits in ms, execution and ttl (Runpod SDK 2.x's ``with_options(execution_timeout=...,
    ttl=...)``), checked as the HTTP intake checks them; None where not given (the endpoint's own applies)."""
    if extra.get("policy") is None:
        return None, None
    from flashpoint.api.runpod import policy_limits

    return policy_limits(extra)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _deliver(future: asyncio.Future[Any], value: Any = None, *, error: BaseException | None = None) -> None:
    """Settle a caller's future from the plane's thread, unless the caller already ended its event loop."""
    caller = future.get_loop()
    if not caller.is_closed():
        caller.call_soon_threadsafe(_settle, future, value, error)


def show_worker_output() -> None:
    """Zero set-up: if the program configured no logging, worker output and warnings still reach stderr, inert."""
    root = logging.getLogger()
    package = logging.getLogger("flashpoint")
    if not root.handlers and not package.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(InertFormatter("%(name)s %(levelname)s: %(message)s"))
        package.addHandler(handler)
        package.setLevel(logging.INFO)
        logging.getLogger("flashpoint.plane").setLevel(logging.WARNING)
        logging.getLogger("flashpoint.backends").setLevel(logging.WARNING)
