"""A route worker: ``python -m flashpoint.worker --routes --import MODULE:ATTR | --pickle FILE``.

Runpod's load-balanced worker contract: serve the endpoint's routes (``routeapp.create_app``) over HTTP with uvicorn on
``$PORT`` at ``FLASHPOINT_ROUTE_HOST`` (127.0.0.1 by default), answer ``GET /ping`` (200 once the app has started),
pull no jobs; serve only requests that carry ``FLASHPOINT_ROUTE_SECRET`` (the server's proxy sends it; a worker
without one refuses to start). The code is loaded, and the app started, before the port is bound, as Flash's
generated handler does: while a worker loads its code its port refuses connections. It exits on SIGTERM or SIGINT
(in-flight requests get ``GRACE_S`` seconds) and when its parent dies; what it prints reaches the plane line by line,
as a queue worker's output does. Any HTTP server on ``$PORT`` with ``/ping`` (an unmodified Runpod load-balanced
worker) is as good a route worker as this one.

Worker side: imports uvicorn; never ``store/`` or ``scheduler/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator, Mapping

import uvicorn

from flashpoint.runpodapps.handles import ApiHandle
from flashpoint.sdk.routes import Route, route_table
from flashpoint.wire.protocol import ROUTE_SECRET_ENV, ROUTE_SECRET_HEADER
from flashpoint.worker import isolation
from flashpoint.worker.handler import dependency_problem, load_target
from flashpoint.worker.launch import die_with_parent
from flashpoint.worker.routeapp import MAX_BODY_BYTES, create_app, rc2_app, serve_app

__all__ = ["GRACE_S", "main"]

#: seconds in-flight requests get to finish after SIGTERM (the plane sends SIGKILL a little later)
GRACE_S = 4.0

log = logging.getLogger("flashpoint.worker")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn raises a SIGTERM it caught again after its graceful shutdown, so the process would die of it; a
        # worker its plane stops exits 0 instead, as a queue worker does
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)


def main(import_path: str | None, pickle_file: str | None, env: Mapping[str, str] | None = None) -> None:
    """Entry point of ``python -m flashpoint.worker --routes``."""
    env = dict(os.environ if env is None else env)
    parent = int(env["FLASHPOINT_PARENT_PID"]) if env.get("FLASHPOINT_PARENT_PID") else None
    die_with_parent(parent)
    isolation.apply()  # cores and volume, while this process has one thread
    for stream in (sys.stdout, sys.stderr):
        # every line reaches the plane as it is printed (a pipe is block-buffered); text UTF-8 cannot carry is
        # printed escaped rather than raising in the code that printed it
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace", line_buffering=True)
    isolation.configure_logging()
    host, port, max_body, secret = _settings(env)
    problem = dependency_problem(
        json.loads(env.get("FLASHPOINT_DEPENDENCIES", "[]")),
        json.loads(env.get("FLASHPOINT_SYSTEM_DEPENDENCIES", "[]")),
    )
    if problem:
        sys.exit(problem)
    target = load_target(import_path, pickle_file)
    if isinstance(target, ApiHandle):  # Runpod SDK 2.x's @app.api: an app of its own
        routes: list[Route] = []
        app = serve_app(rc2_app(target), max_body_bytes=max_body, route_secret=secret)
    else:
        routes = route_table(target)
        app = create_app(routes, max_body_bytes=max_body, route_secret=secret)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        access_log=False,
        log_config=None,  # uvicorn's warnings and errors go through the worker's logging, to stderr
        log_level="warning",
        timeout_graceful_shutdown=int(GRACE_S),
        # longer than the server's proxy keeps an idle connection (api/upstream.py's IDLE_S), so the worker never
        # closes a connection the proxy is about to reuse
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    shown = ", ".join(f"{method} {path}" for method, path, _ in routes) or "its app"
    name = env.get("FLASHPOINT_ENDPOINT") or "routes"
    print(f"flashpoint route worker {name}: serving {shown} on http://{host}:{port}", flush=True)
    try:
        import uvloop

        uvloop.run(_serve(_Server(config), parent))
    except ImportError:
        asyncio.run(_serve(_Server(config), parent))


#: seconds an idle connection stays open (uvicorn's default is 5)
KEEP_ALIVE_S = 75


def _settings(env: Mapping[str, str]) -> tuple[str, int, int, str]:
    """Host, port, body limit and route secret from the environment; exits with what to set when one is unusable."""
    text = env.get("PORT", "")
    if not text.isdigit() or not 0 < int(text) < 65536:
        sys.exit(f"a route worker serves HTTP on $PORT: set PORT to a free TCP port (1-65535), got {text!r}")
    limit = env.get("FLASHPOINT_MAX_BODY_MB", "")
    try:
        megabytes = float(limit) if limit else MAX_BODY_BYTES / 2**20
        if not megabytes > 0:
            raise ValueError(limit)
    except ValueError:
        sys.exit(f"FLASHPOINT_MAX_BODY_MB is the largest request body in MiB, e.g. 32; got {limit!r}")
    secret = env.get(ROUTE_SECRET_ENV, "")
    if not secret:
        sys.exit(
            f"a route worker serves only requests carrying its route secret: set {ROUTE_SECRET_ENV} (flashpoint's "
            f"plane sets it; by hand, any long random text) and send it as the {ROUTE_SECRET_HEADER} header"
        )
    return env.get("FLASHPOINT_ROUTE_HOST") or "127.0.0.1", int(text), int(megabytes * 2**20), secret


async def _serve(server: uvicorn.Server, parent: int | None) -> None:
    watcher = asyncio.create_task(_watch_parent(parent))
    try:
        await server.serve()
    finally:
        watcher.cancel()


async def _watch_parent(parent: int | None) -> None:
    # A worker never outlives the plane that started it; on Linux the kernel also kills it (die_with_parent), this
    # covers other systems.
    while parent is not None:
        await asyncio.sleep(0.5)
        if os.getppid() != parent:
            log.warning("control plane process %s is gone; worker exits", parent)
            os._exit(1)
