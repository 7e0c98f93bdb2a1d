"""``flashpoint dev``: a project's endpoints behind Runpod Flash's ``flash dev`` URLs, on this machine's GPUs, reloaded
when a file changes without losing queued jobs.

Edge module, a composition root beside ``hosting/server.py``: the plane ``hosting.plane.build_plane`` builds (local
workers, an in-memory job store), the server's own app (``api.app.Dispatch``) behind ``DevApp`` (``app.py``), the
project's reloads (``DevSession``) and its announcement to this machine's CLI.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import secrets
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flashpoint.api.runpod import Intake
from flashpoint.backends.local import python_env
from flashpoint.config import Settings
from flashpoint.dev.app import DevApp
from flashpoint.dev.layout import Changes, Layout, build_layout, changes, spec_of
from flashpoint.errors import BadInputError, ConfigError
from flashpoint.hosting import announce
from flashpoint.hosting.plane import PlaneRole, app_simulated, bind_port, build_plane, http_url, loopback
from flashpoint.hosting.project import IGNORE_FILES, Project, is_project_path, load_project
from flashpoint.hosting.server import input_checkers
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.spec import MissingSecretsError, WorkerTarget

log = logging.getLogger("flashpoint.dev")

NO_ENDPOINTS = (
    "no endpoints found in {root}: declare one in a .py file, e.g.\n"
    "    @Endpoint(name='worker', gpu=GpuGroup.ANY)\n"
    "    async def process(input_data: dict) -> dict: ...\n"
    "or HTTP routes:\n"
    "    api = Endpoint(name='api', cpu='cpu3g-2-8')\n"
    "    @api.post('/compute')\n"
    "    async def compute(data: dict) -> dict: ..."
)


# --------------------------------------------------------------------------------------------------------------------
# The served project and its reloads


class DevSession:
    """One project as served: its layout on the app, its endpoints on the plane. ``apply`` serves a new load of it,
    replacing the workers of what changed (``layout.changes``); ``watch`` reloads on every change of a project
    ``.py`` file."""

    def __init__(
        self,
        root: Path,
        plane: ControlPlane,
        app: DevApp,
        code_dir: Path,
        *,
        say: Callable[[str], None] = print,
    ) -> None:
        self.root = root.resolve()
        self.plane = plane
        self.app = app
        self.code_dir = code_dir
        self.say = say
        self.project = Project(self.root, ())
        self.layout = Layout({}, (), {}, {})
        self._code_files = 0

    def _code_file(self, target: WorkerTarget) -> str | None:
        """A pickled target's file (a shared name's table, routes declared from several modules); a new file per
        registration, since workers of the old code may still read theirs."""
        if target.pickled is None:
            return None
        self._code_files += 1
        path = self.code_dir / f"{self._code_files}.pkl"
        path.write_bytes(target.pickled)
        return str(path)

    def apply(self, project: Project) -> Changes:
        """Serve ``project``: register what is new, replace the workers of what changed (their queued jobs wait for
        the new workers; running jobs end on the old ones), stop what was removed (its queued jobs are cancelled)."""
        layout = build_layout(project)
        diff = changes(self.project, self.layout, project, layout)
        retired = 0
        for name in diff.removed:
            handle = self.layout.endpoints[name]
            spec = spec_of(handle)
            if not spec.serves_routes:
                self.plane.purge(name)
            # kept registered (the plane has no unregister) with no warm workers, so none starts again
            self.plane.redeclare(dataclasses.replace(spec, workers_min=0), self.layout.targets[name])
        refused: list[str] = []
        for name in (*diff.added, *diff.replaced):
            handle = layout.endpoints[name]
            spec, target = spec_of(handle), layout.targets[name]
            known = self.plane.endpoints.get(name)
            if known is not None and spec.serves_routes and not known.spec.serves_routes:
                self.plane.purge(name)  # its queued jobs could never run on route workers
            try:
                retired += self.plane.redeclare(spec, target, self._code_file(target))
            except MissingSecretsError as exc:  # the plane keeps no secrets here: this endpoint alone is not served
                fate = "its last good version is served" if known is not None else "not served"
                refused.append(f"flashpoint dev: {name} ({fate}): {exc}")
        removed = {name: _removed(name) for name in self.plane.endpoints if name not in layout.endpoints}
        self.app.intake.checkers.clear()
        self.app.intake.checkers.update({**removed, **input_checkers(layout.endpoints)})
        if "PYTHONPATH" in self.plane.supervisor.worker_env:  # files in new folders: workers import them too
            self.plane.supervisor.worker_env["PYTHONPATH"] = python_env()["PYTHONPATH"]
        first = not self.layout.endpoints
        self.project, self.layout = project, layout
        self.app.layout = layout
        for rel, error in project.errors:
            served = any(rel in homes for homes in layout.homes.values())
            kept = "its last good version is served" if served else "not served"
            self.say(f"flashpoint dev: {rel} failed to load ({kept}): {error}")
        for problem in layout.problems:
            self.say(f"flashpoint dev: {problem}")
        for line in refused:
            self.say(line)
        if not first:
            self.say(f"flashpoint dev: reloaded: {_summary(diff, retired)}")
        return diff

    async def reload(self) -> Changes:
        """Load the project again (in a thread: a file's imports may take long), then ``apply`` it."""
        project = await asyncio.to_thread(load_project, self.root, self.project)
        return self.apply(project)

    async def watch(self, stop: asyncio.Event) -> None:
        """Reload after each batch of changes to project ``.py`` files, until ``stop`` is set."""
        import watchfiles

        def project_source(change: watchfiles.Change, path: str) -> bool:
            return watched(self.root, path)

        logging.getLogger("watchfiles").setLevel(logging.WARNING)
        async for _ in watchfiles.awatch(self.root, watch_filter=project_source, stop_event=stop):
            try:
                await self.reload()
            except Exception:  # a bug in one reload must not end reloading
                log.exception("reloading %s failed", self.root)


def watched(root: Path, path: str) -> bool:
    """Whether a change to ``path`` reloads the project: a project ``.py`` file, or an ignore file (``.gitignore``
    at any depth, ``.flashignore``), whose change may add or drop project files."""
    if Path(path).name in IGNORE_FILES:
        return True
    return path.endswith(".py") and is_project_path(root, Path(path))


def _removed(name: str) -> Callable[[Any], None]:
    def refuse(payload: Any) -> None:
        raise BadInputError(f"endpoint {name!r} was removed from the project's files", code="not_found")

    return refuse


def _summary(diff: Changes, retired: int) -> str:
    if not diff:
        return "no endpoint changed"
    parts = []
    if diff.added:
        parts.append(f"added {', '.join(diff.added)}")
    if diff.replaced:
        parts.append(f"replaced {', '.join(diff.replaced)} ({retired} worker(s) retiring)")
    if diff.removed:
        parts.append(f"removed {', '.join(diff.removed)}")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------------------------------
# The server


class DevServer:
    """``flashpoint dev``: load the project, serve it until SIGINT/SIGTERM, reloading on change (``reload``)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        settings: Settings,
        host: str = "localhost",
        port: int = 8888,
        reload: bool = True,
        api_keys: tuple[str, ...] = (),
        max_body_bytes: int = 10 * 1024 * 1024,
        max_connections: int | None = None,
        header_timeout_s: float | None = None,
        body_timeout_s: float | None = None,
        say: Callable[[str], None] = print,
    ) -> None:
        """``max_connections``, ``header_timeout_s``, ``body_timeout_s``: the edge's, as serve's (None: defaults)."""
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise ConfigError(f"{str(root)!r} is not a folder; name the project folder to serve (default: .)")
        if not api_keys and not loopback(host):
            raise ConfigError(
                f"refusing to listen on {host} without an API key: anyone who can reach it could run code. "
                "Set FLASHPOINT_API_KEY=<key>, or serve on localhost"
            )
        self.settings = settings
        self.host, self.port, self.reload = host, port, reload
        self.api_keys = api_keys
        self.max_body_bytes = max_body_bytes
        self.max_connections = max_connections
        self.header_timeout_s, self.body_timeout_s = header_timeout_s, body_timeout_s
        self.say = say

    def plane_role(self) -> PlaneRole:
        """dev's plane: its jobs end with it (as the embedded plane's), and its workers write no bytecode: a file
        saved twice within one second at one size would look unchanged to a cached .pyc."""
        return PlaneRole(worker_env={"PYTHONDONTWRITEBYTECODE": "1"})

    def load(self) -> tuple[Project, Layout]:
        """The project as first served: every file must load (as Flash's dev server requires) and declare one
        endpoint at least.

        Raises:
            ConfigError: listing the files that failed, or saying how to declare an endpoint.
        """
        project = load_project(self.root)
        if project.errors:
            failed = "\n".join(f"  {rel}: {error}" for rel, error in project.errors)
            raise ConfigError(f"these files of {self.root} failed to load:\n{failed}")
        layout = build_layout(project)
        if not layout.endpoints:
            skipped = "".join(f"\n(not imported: {rel}: {why})" for rel, why in project.skipped)
            raise ConfigError(NO_ENDPOINTS.format(root=self.root) + skipped)
        return project, layout

    def run(self) -> None:
        import uvicorn

        from flashpoint.api.app import Dispatch, create_app
        from flashpoint.api.loopguard import LoopbackGuard, host_names
        from flashpoint.api.transport import hardened_protocol

        # no bytecode of the project: a file saved twice within one second at one size would look unchanged to a
        # cached .pyc, here and in the workers
        sys.dont_write_bytecode = True
        project, layout = self.load()
        settings = self.settings
        sock = bind_port(self.host, self.port)
        bound, port = sock.getsockname()[:2]
        # where processes of this machine reach it (its workers, the CLI): loopback for a wildcard bind
        local_url = http_url("127.0.0.1" if bound in ("0.0.0.0", "::") else bound, port)
        plane = build_plane(
            settings,
            self.plane_role(),
            base_url=settings.worker_url or local_url,
            simulated=app_simulated(settings),
        )
        code_dir = tempfile.TemporaryDirectory(prefix="flashpoint-dev-")
        # this machine's CLI gets a key of its own (in the announcement), so no configured key is ever written down
        cli_key = secrets.token_urlsafe(32) if self.api_keys else None
        api_keys = self.api_keys + ((cli_key,) if cli_key else ())
        announced: list[Path | None] = []
        stop = asyncio.Event()
        watching: list[asyncio.Task[None]] = []
        url = http_url(self.host, port)

        async def startup() -> None:
            await plane.start()
            session.apply(project)
            # announced before the line that says it serves: whoever waits for that line finds the file
            notice = announce.Announcement(announce.DEV, local_url, cli_key, app=str(self.root))
            announced.append(announce.write(settings.state_dir, notice))
            self._say_serving(session.layout, url, port, plane)
            if self.reload:
                watching.append(asyncio.create_task(session.watch(stop)))

        async def shutdown() -> None:
            for path in announced:
                announce.withdraw(path)
            stop.set()
            if watching:
                await asyncio.wait(watching, timeout=5)
            await plane.close()
            await dispatch.routes.close()
            code_dir.cleanup()

        intake = Intake({})
        api = create_app(
            plane,
            api_keys=api_keys,
            intake=intake,
            max_body_bytes=self.max_body_bytes,
            webhook_retry_delay_s=settings.webhook_retry_s,
            route_wait_s=settings.route_wait_s,
            on_startup=startup,
            on_shutdown=shutdown,
        )
        dispatch = Dispatch(api, plane)
        app = DevApp(
            dispatch, plane, intake, layout, api_keys=api_keys, max_body_bytes=self.max_body_bytes,
            title=str(self.root),
        )  # fmt: skip
        session = DevSession(self.root, plane, app, Path(code_dir.name), say=self.say)

        class _Uvicorn(uvicorn.Server):
            async def shutdown(self, sockets: Any = None) -> None:
                # stop workers and answer their long-polls first, so uvicorn finds no request left to cancel
                await plane.close()
                await super().shutdown(sockets)

        served: Any = app
        if not api_keys:  # only this machine's names, and no other origin's page (api/loopguard.py)
            served = LoopbackGuard(app, host_names(self.host, bound, worker_url=settings.worker_url))
        # serve's edge: header and body deadlines, a connection cap (api/transport.py)
        protocol = hardened_protocol(max_connections=self.max_connections, header_timeout_s=self.header_timeout_s,
                                     body_timeout_s=self.body_timeout_s)  # fmt: skip
        config = uvicorn.Config(
            served, http=protocol, log_level="warning", access_log=False, proxy_headers=False,
            timeout_graceful_shutdown=3,
        )  # fmt: skip
        _Uvicorn(config).run(sockets=[sock])

    def _say_serving(self, layout: Layout, url: str, port: int, plane: ControlPlane) -> None:
        busy = f"; port {self.port} was busy" if self.port not in (0, port) else ""
        self.say(f"flashpoint dev serving {url} (fleet: {plane.fleet_summary()}{busy})")
        rows = layout.rows()
        widths = [max((len(row[i]) for row in rows), default=0) for i in range(3)]
        for method, path, name, endpoint in rows:
            self.say(f"  {method:<{widths[0]}}  {path:<{widths[1]}}  {name:<{widths[2]}}  {endpoint}")
        self.say(f"  docs  {url}/docs")
        self.say(f"  dashboard  {url}/ (in a browser)")
        self.say(f"  {'reloading on changes in ' + str(self.root) if self.reload else 'reload off'}; stop: ctrl+c")
