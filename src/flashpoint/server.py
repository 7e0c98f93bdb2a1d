"""Composition root: Settings -> fleet, store, backend, control plane, HTTP app; and the embedded plane.

The embedded plane runs the control plane and its HTTP routes (which workers pull from) on their own event loop in a
background thread of the calling process, so it outlives any one ``asyncio.run`` and serves sync callers too. It
is started by the first call of a decorated function and stopped at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import ipaddress
import json
import logging
import os
import secrets
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from flashpoint import codec
from flashpoint.backends.base import Backend
from flashpoint.backends.local import LocalBackend, python_env
from flashpoint.config import Settings
from flashpoint.endpoint import (
    Connection,
    EndpointClass,
    EndpointCommand,
    EndpointFunction,
    EndpointSpec,
    WorkerTarget,
)
from flashpoint.errors import BadInputError, ConfigError
from flashpoint.explain import Explanation
from flashpoint.fleet import discover
from flashpoint.jobhandle import job_failure
from flashpoint.jobs import JobStatus, JobView
from flashpoint.scheduler.loop import MAX_QUEUED_BYTES, MAX_QUEUED_JOBS, ControlPlane
from flashpoint.store.memory import MemoryJobStore

log = logging.getLogger("flashpoint")
T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # uvloop is optional (not on Windows)
        return asyncio.new_event_loop()


def open_backend(settings: Settings, simulated: str | None) -> tuple[Backend, dict[str, str], int | None]:
    """The backend ``settings`` names, with its fleet read; plus the environment and the parent pid its workers get.

    Local workers inherit this process's environment and die with it (their parent). A Ray worker's process is the
    child of its actor on its node: it gets the node's environment with only the import path added, and dies with the
    actor (the actor sets that up).
    """
    if settings.backend == "ray":
        from flashpoint.backends.ray import RayBackend

        local = [] if settings.ray_address else discover(simulated, node=settings.node)
        backend = RayBackend(settings.ray_address, ready_timeout_s=settings.ray_ready_timeout_s, local_devices=local)
        backend.connect()
        env = python_env()
        return backend, {"PYTHONPATH": env["PYTHONPATH"], "PYTHONUNBUFFERED": "1"}, None
    return LocalBackend(discover(simulated, node=settings.node)), python_env(), os.getpid()


def _worker_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit TCP_NODELAY: without it, small responses wait on delayed ACKs (~40 ms)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    # listen now: connections made between "serving" being printed and uvicorn's accept loop wait in the backlog
    # instead of being refused
    sock.listen(2048)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


class EmbeddedPlane:
    """A control plane plus its worker routes on 127.0.0.1, in a thread of this process. A ``Connection``."""

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

    def start(self) -> EmbeddedPlane:
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

        from flashpoint.api.transport import (
            CoalescingHttpToolsProtocol,
            default_max_connections,
            raise_open_file_limit,
        )
        from flashpoint.api.workers import worker_routes

        self._stop = asyncio.Event()
        backend, worker_env, parent_pid = open_backend(self.settings, self.settings.simulated_gpus)
        # Workers on other nodes (Ray) reach the plane where FLASHPOINT_WORKER_URL says; every route needs a key
        where = urlsplit(self.settings.worker_url) if self.settings.worker_url else None
        host = (where.hostname if where else None) or "127.0.0.1"
        sock = _worker_socket(host, (where.port if where else None) or 0)
        self.url = _url(host, sock.getsockname()[1])
        self.plane = ControlPlane(
            MemoryJobStore(),
            backend,
            worker_secret=secrets.token_urlsafe(32),
            take_hold_s=self.settings.take_hold_s,
            worker_env=worker_env,
            parent_pid=parent_pid,
            node=self.settings.node,
            base_url=self.url,
        )
        # the native /v1 routes (for `flashpoint explain` and `gpus`) load FastAPI on their first request only
        native = Mount("/v1", app=_LazyNativeApp(self.plane, (self.api_key,)))
        app = Starlette(routes=[*worker_routes(self.plane), native])
        open_files = raise_open_file_limit()
        config = uvicorn.Config(
            app,
            http=CoalescingHttpToolsProtocol.configured(max_connections=default_max_connections(open_files)),
            log_level="warning",
            access_log=False,
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
        self._announce = self._write_announcement()
        log.debug("embedded control plane at %s; fleet: %s", self.url, self.plane.fleet_summary())
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            try:
                await self.plane.close()
            finally:
                server.should_exit = True
                await serving
            if self._announce is not None:
                self._announce.unlink(missing_ok=True)

    def _write_announcement(self) -> Path | None:
        """Tell `flashpoint explain` on this machine where this plane is (file readable by this user only)."""
        try:
            folder = self.settings.state_dir / "run"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{os.getpid()}-{id(self):x}.json"
            partial = path.with_suffix(".tmp")
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump({"url": self.url, "key": self.api_key, "pid": os.getpid()}, handle)
            os.replace(partial, path)  # readers never see a half-written file
            return path
        except OSError as exc:
            log.debug("cannot announce the embedded plane: %s", exc)
            return None

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
                path = Path(self._tmp.name) / f"{spec.name}.pkl"
                if not path.exists():
                    path.write_bytes(target.pickled)
            self.plane.register(spec, target, str(path) if path else None)

        await self._compute(run)

    async def submit(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView:
        return await self._compute(lambda: self.plane.submit(endpoint, payload, extra).view())

    async def call(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView:
        def run(future: asyncio.Future[JobView]) -> None:
            job = self.plane.submit(endpoint, payload, extra)
            self.plane.on_finish(job.id, lambda view: _deliver(future, view))

        return await self._on_plane(run)

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

    async def explain_job(self, job_id: str) -> Explanation:
        return await self._compute(lambda: self.plane.explain_job(job_id))

    async def explain_endpoint(self, name: str) -> Explanation:
        return await self._compute(lambda: self.plane.explain_endpoint(name))

    async def stream(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> AsyncIterator[Any]:
        """Submit, then yield each chunk a generator endpoint produces as it arrives."""
        view = await self.submit(endpoint, payload, extra)
        while True:
            read = asyncio.run_coroutine_threadsafe(self.plane.read_stream(view.id, 25.0), self.loop)
            state, chunks = await asyncio.wrap_future(read)
            for chunk in chunks:
                yield codec.decode_chunk(chunk)
            if state.status.terminal and not chunks:
                if state.status is not JobStatus.COMPLETED:
                    raise job_failure(state)
                return


class _LazyNativeApp:
    """The native /v1 app, built on its first request: the embedded plane does not pay FastAPI's import at start."""

    def __init__(self, plane: ControlPlane, api_keys: tuple[str, ...]) -> None:
        self._plane = plane
        self._keys = api_keys
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from flashpoint.api.native import create_native_app

            self._app = create_native_app(self._plane, self._keys)
        await self._app(scope, receive, send)


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


# --------------------------------------------------------------------------------------------------------------------
# The process-wide default connection


_lock = threading.Lock()
_current: Connection | None = None


def _show_worker_output() -> None:
    """Zero set-up: if the program configured no logging, worker output and warnings still reach stderr."""
    root = logging.getLogger()
    package = logging.getLogger("flashpoint")
    if not root.handlers and not package.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        package.addHandler(handler)
        package.setLevel(logging.INFO)
        logging.getLogger("flashpoint.plane").setLevel(logging.WARNING)
        logging.getLogger("flashpoint.backends").setLevel(logging.WARNING)


def connection() -> Connection:
    """The connection decorated functions use: the one set by ``use()``, else a new embedded plane."""
    global _current
    with _lock:
        if _current is not None and not getattr(_current, "closed", False):
            return _current
        settings = Settings.load()
        if settings.url:  # client mode: the same decorated calls go to that server
            from flashpoint.client import HTTPConnection

            _current = HTTPConnection(settings.url, settings.api_key)
            return _current
        _show_worker_output()
        plane = EmbeddedPlane(settings).start()
        atexit.register(plane.close)
        _current = plane
        return plane


def use(conn: Connection | None) -> None:
    """Make ``conn`` the connection decorated functions use (``None``: start an embedded plane on the next call)."""
    global _current
    with _lock:
        _current = conn


# --------------------------------------------------------------------------------------------------------------------
# Server mode: `flashpoint serve APP`


def input_checker(handle: EndpointFunction[Any] | EndpointClass) -> Callable[[Any], None]:
    """Checks that a job's input fits the function's parameters (or the named method's), before it is stored."""
    name = handle.spec.name

    def fail(message: str) -> BadInputError:
        return BadInputError(f"endpoint {name!r}: {message}", code="bad_input")

    def bind(signature: inspect.Signature, payload: Any, *leading: Any) -> None:
        if not isinstance(payload, dict):
            raise fail(f"input must be a JSON object of keyword arguments for {name}{signature}, e.g. "
                       f'{{"input": {{"data": ...}}}}; got {type(payload).__name__}')  # fmt: skip
        try:
            signature.bind(*leading, **payload)
        except TypeError as exc:
            raise fail(f"input does not fit {name}{signature}: {exc}") from None

    if isinstance(handle, EndpointClass):
        cls, methods = handle.__wrapped__, handle.spec.methods

        def check_method(payload: Any) -> None:
            params = dict(payload) if isinstance(payload, dict) else payload
            method = params.pop("method", None) if isinstance(params, dict) else None
            if method is None and len(methods) > 1:
                raise fail(f'name a method in "method" ({", ".join(methods)}), e.g. {{"method": "{methods[0]}", ...}}')
            method = method or methods[0]
            if method not in methods:
                raise fail(f"unknown method {method!r}; methods: {', '.join(methods)}")
            bind(inspect.signature(getattr(cls, method)), params, None)

        return check_method
    signature = inspect.signature(handle.__wrapped__)
    return lambda payload: bind(signature, payload)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Server:
    """``flashpoint serve``: the app's endpoints behind Runpod's HTTP API, with a durable SQLite job store."""

    def __init__(
        self,
        target: str,
        *,
        settings: Settings,
        host: str = "127.0.0.1",
        port: int = 8000,
        db: str | os.PathLike[str] = ".flashpoint/jobs.db",
        api_keys: tuple[str, ...] = (),
        max_body_bytes: int = 10 * 1024 * 1024,
        allow_pickle: bool = False,
        allow_private_webhooks: bool = False,
        max_connections: int | None = None,
        header_timeout_s: float = 10.0,
        body_timeout_s: float = 60.0,
        max_result_bytes: int = codec.MAX_RESULT_BYTES,
        max_queued_jobs: int = MAX_QUEUED_JOBS,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        if any(not key.strip() for key in api_keys):
            raise ConfigError(
                "an API key is blank, so no request could match it; pass real keys (e.g. FLASHPOINT_API_KEY="
                "$(openssl rand -hex 24)), without blank items"
            )
        for name, value in (("max-connections", max_connections), ("header-timeout-s", header_timeout_s),
                            ("body-timeout-s", body_timeout_s), ("max-result-mb", max_result_bytes),
                            ("max-queued-jobs", max_queued_jobs), ("max-queued-mb", max_queued_bytes)):  # fmt: skip
            if value is not None and not value > 0:
                raise ConfigError(f"--{name} must be positive, got {value}")
        if not api_keys and not _loopback(host):
            raise ConfigError(
                f"refusing to listen on {host} without an API key: anyone who can reach it could run jobs. "
                "Set FLASHPOINT_API_KEY=<key> (or pass --api-key KEY), or serve on 127.0.0.1"
            )
        self.target = target
        self.settings = settings
        self.host, self.port, self.db = host, port, db
        self.api_keys = api_keys
        self.max_body_bytes = max_body_bytes
        self.allow_pickle = allow_pickle
        self.allow_private_webhooks = allow_private_webhooks
        self.max_connections = max_connections
        self.header_timeout_s, self.body_timeout_s = header_timeout_s, body_timeout_s
        self.max_result_bytes = max_result_bytes
        self.max_queued_jobs, self.max_queued_bytes = max_queued_jobs, max_queued_bytes

    def run(self) -> None:
        """Load the app, serve until SIGINT/SIGTERM, then stop the workers and put their jobs back in the queue."""
        import uvicorn

        from flashpoint.api.app import Dispatch, create_app
        from flashpoint.api.runpod import Intake
        from flashpoint.api.transport import (
            CoalescingHttpToolsProtocol,
            default_max_connections,
            raise_open_file_limit,
        )
        from flashpoint.discovery import load_endpoints
        from flashpoint.store.sqlite import SQLiteJobStore

        handles = load_endpoints(self.target)
        # read after the app is imported: an app may declare its simulated fleet itself (the examples do)
        simulated = self.settings.simulated_gpus or os.environ.get("FLASHPOINT_SIMULATED_GPUS") or None
        backend, worker_env, parent_pid = open_backend(self.settings, simulated)
        store = SQLiteJobStore(self.db)
        sock = _worker_socket(self.host, self.port)
        port = sock.getsockname()[1]
        # local workers reach a wildcard-bound server on loopback; workers on other nodes where the user says
        worker_host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        plane = ControlPlane(
            store,
            backend,
            worker_secret=secrets.token_urlsafe(32),
            take_hold_s=self.settings.take_hold_s,
            worker_env=worker_env,
            parent_pid=parent_pid,
            node=self.settings.node,
            requeue_on_close=True,
            max_result_bytes=self.max_result_bytes,
            max_queued_jobs=self.max_queued_jobs,
            max_queued_bytes=self.max_queued_bytes,
            base_url=self.settings.worker_url or _url(worker_host, port),
        )

        async def startup() -> None:
            await plane.start()
            for handle in handles.values():
                plane.register(handle.spec, handle.worker_target())
            recovered = plane.recover()
            print(
                f"flashpoint serving {', '.join(handles)} on http://{self.host}:{port} "
                f"(fleet: {plane.fleet_summary()}; jobs in {self.db}; {recovered} unfinished job(s) recovered)",
                flush=True,
            )

        async def shutdown() -> None:
            await plane.close()
            store.close()

        app = create_app(
            plane,
            api_keys=self.api_keys,
            intake=Intake(
                # a command's handler takes any JSON input (as on Runpod); functions are checked by signature
                {name: input_checker(h) for name, h in handles.items() if not isinstance(h, EndpointCommand)},
                allow_pickle=self.allow_pickle,
                allow_private_webhooks=self.allow_private_webhooks,
            ),
            max_body_bytes=self.max_body_bytes,
            webhook_retry_delay_s=self.settings.webhook_retry_s,
            on_startup=startup,
            on_shutdown=shutdown,
        )

        class _Uvicorn(uvicorn.Server):
            async def shutdown(self, sockets: Any = None) -> None:
                # Stop workers and answer their long-polls first, so uvicorn finds no request left to cancel.
                await plane.close()
                await super().shutdown(sockets)

        open_files = raise_open_file_limit()
        protocol = CoalescingHttpToolsProtocol.configured(
            max_connections=self.max_connections or default_max_connections(open_files),
            header_timeout_s=self.header_timeout_s,
            body_timeout_s=self.body_timeout_s,
        )
        config = uvicorn.Config(
            Dispatch(app, plane),
            http=protocol,
            log_level="warning",
            access_log=False,
            proxy_headers=False,
            timeout_keep_alive=120,
            timeout_graceful_shutdown=3,
        )
        _Uvicorn(config).run(sockets=[sock])
