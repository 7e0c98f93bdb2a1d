"""Composition root of ``flashpoint serve``: the app's endpoints, a SQLite store, the plane ``plane.build_plane``
builds for it (durable, with serve's limits), the HTTP app, its announcement and its console.

The SDK's in-process server is ``embedded.py``; what every host needs is ``plane.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashpoint.config import Settings
from flashpoint.errors import ConfigError
from flashpoint.hosting import announce, console, shapes
from flashpoint.hosting.artifacts import DEFAULT_LIMIT, ArtifactStore
from flashpoint.hosting.plane import PlaneRole, app_simulated, build_plane, http_url, listening_socket, loopback
from flashpoint.hosting.quotastore import QuotaStore
from flashpoint.hosting.secretstore import SecretStore
from flashpoint.scheduler.jobbook import MAX_QUEUED_BYTES, MAX_QUEUED_JOBS
from flashpoint.sdk.endpoint import EndpointClass, EndpointCommand, EndpointFunction
from flashpoint.spec import APP_NAME, DEFAULT_ENV, WorkerTarget, endpoint_id
from flashpoint.wire import codec

if TYPE_CHECKING:
    from flashpoint.hosting.deploying import DeployManager
    from flashpoint.scheduler.loop import ControlPlane

log = logging.getLogger("flashpoint.server")


def input_checker(handle: EndpointFunction[..., Any] | EndpointClass[..., Any]) -> Callable[[Any], None]:
    """Checks that a job's input fits the function's parameters (or the named method's), before it is stored."""
    name = handle.spec.name
    return shapes.checkers(name, {name: shapes.call_shape(handle)}, "queue")[name]


def input_checkers(handles: Mapping[str, Any], app: str | None = None) -> dict[str, Callable[[Any], None]]:
    """The intake's checkers: ``name`` for a job naming no target, ``name/target`` for one naming its target (the
    functions and classes sharing one endpoint name); a command's handler takes any JSON input, as on Runpod; a route
    endpoint takes no jobs (its requests go through the route proxy). Built from each handle's call shapes
    (``hosting.shapes``), as a deployed project's are from the shapes its loader sent. With ``app``, keyed by the
    endpoints' ids in its ``production`` environment (``serve APP``'s app)."""
    checkers: dict[str, Callable[[Any], None]] = {}
    for name, handle in handles.items():
        kind = "route" if not isinstance(handle, EndpointCommand) and handle.spec.serves_routes else "queue"
        # a Runpod SDK 2.x resource is its own App's (decision 0108); the others are APP's
        key = handle.spec.key if handle.spec.app is not None or app is None else endpoint_id(app, DEFAULT_ENV, name)
        checkers.update(shapes.checkers(key, shapes.shape_of(handle), kind, name=handle.spec.name))
    return checkers


def app_name_of(target: str) -> str:
    """The app ``serve APP`` serves ``APP`` as (decision 0106): its folder's name (a file's folder, a project folder,
    else the current folder for a module), made a valid app name (other characters become ``-``)."""
    from flashpoint.hosting.discovery import split_target

    source = split_target(target.strip())[0]
    path = Path(source).expanduser()
    folder = path if path.is_dir() and not (path / "__init__.py").is_file() else path.parent
    if not (source.endswith(".py") or path.is_dir()):  # a module: package.module
        folder = Path.cwd()
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", folder.resolve().name).strip("-_")[:63]
    return name if APP_NAME.fullmatch(name) else "app"


def load_target(target: str) -> dict[str, tuple[Any, WorkerTarget]]:
    """The endpoints ``serve`` serves, each with its worker's target: a project folder's (a folder without
    ``__init__.py``: ``hosting.project``, as ``flashpoint dev`` loads it), else an app file's or module's
    (``hosting.discovery``; a folder with ``__init__.py`` is a package).

    Raises:
        ConfigError: what failed to load, a name declared twice, or no endpoint at all.
    """
    from flashpoint.hosting.discovery import load_endpoints, split_target
    from flashpoint.hosting.project import load_project

    source, attr = split_target(target.strip()) if target.strip() else (target, None)
    folder = Path(source).expanduser()
    if attr is None and folder.is_dir() and not (folder / "__init__.py").is_file():
        found = load_project(folder).endpoints()
        if not found:
            raise ConfigError(
                f"no endpoints found in {str(folder)!r}: declare one at module level in a .py file of it, e.g. "
                "@Endpoint(name='worker', gpu=GpuGroup.ANY) (files its .gitignore or .flashignore leave out, tests "
                "and files whose top level runs work are not read)"
            )
        return found
    return {name: (handle, handle.worker_target()) for name, handle in load_endpoints(target).items()}


#: seconds a stopping server lets running jobs and requests finish (``--grace-s``)
GRACE_S = 30.0


async def drain(plane: ControlPlane, grace_s: float) -> None:
    """Take no new work and wait up to ``grace_s`` for the running jobs and requests to finish (decision 0105); what
    is still running then is cut short by ``plane.close``: requeued, counted as a retry."""
    loop = asyncio.get_running_loop()
    plane.drain()
    deadline = loop.time() + grace_s
    if plane.busy():
        log.info("stopping: waiting up to %.0f s for %d running job(s) and request(s)", grace_s, plane.busy())
    while plane.busy() and loop.time() < deadline:
        await asyncio.sleep(0.05)  # bounded by the grace period; the plane has no event for "nothing running"
    if plane.busy():
        log.warning(
            "the grace period of %.0f s is over: %d job(s) and request(s) cut short; jobs go back to the queue, "
            "counted as a retry",
            grace_s,
            plane.busy(),
        )


class Server:
    """``flashpoint serve``: the app's endpoints behind Runpod's HTTP API, with a durable SQLite job store."""

    def __init__(
        self,
        target: str | None,
        *,
        settings: Settings,
        host: str = "127.0.0.1",
        port: int = 8000,
        db: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        max_artifact_bytes: int = DEFAULT_LIMIT,
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
        route_wait_s: float | None = None,
        grace_s: float = GRACE_S,
        priority_classes: Mapping[str, int] | None = None,
        app_weights: Mapping[str, float] | None = None,
        preempt_grace_s: float | None = None,
    ) -> None:
        """``target``: the app to serve from the start (a file, module or project folder; None: an empty server, for
        apps deployed to it). ``route_wait_s``: how long a request to a route endpoint waits for a ready worker
        (default: the settings', ``FLASHPOINT_ROUTE_WAIT_S``, 60 s). ``data_dir``: the server's data directory: its
        job database (``jobs.db``, unless ``db`` names one), deployments, artifacts, keys and the secrets endpoints
        name (None: none of those but the jobs, in ``db`` or ``.flashpoint/jobs.db``; ``flashpoint serve`` gives
        ``~/.flashpoint/server``). ``max_artifact_bytes``: the largest project a deploy may upload. ``grace_s``: how
        long a stopping server lets running jobs and requests finish. ``priority_classes`` (name: rank, higher first;
        None: high, normal, low), ``app_weights`` (fair share; 1 when not named) and ``preempt_grace_s`` (None: the
        settings', FLASHPOINT_PREEMPT_GRACE_S) are the sharing rules' (decision 0115)."""
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
        if not grace_s >= 0:
            raise ConfigError(f"--grace-s must be 0 or more seconds, got {grace_s}")
        if preempt_grace_s is not None and not preempt_grace_s >= 0:
            raise ConfigError(f"--preempt-grace-s must be 0 or more seconds, got {preempt_grace_s}")
        if route_wait_s is not None and not route_wait_s >= 0:
            raise ConfigError(f"--route-wait-s must be 0 or more seconds, got {route_wait_s}")
        if not api_keys and not loopback(host):
            raise ConfigError(
                f"refusing to listen on {host} without an API key: anyone who can reach it could run jobs. "
                "Set FLASHPOINT_API_KEY=<key> (or pass --api-key KEY), or serve on 127.0.0.1"
            )
        if allow_pickle and not api_keys:
            raise ConfigError(
                "refusing --allow-pickle without an API key: a pickled argument runs code on this server, and without "
                "a key any local user or web page that reaches it could send one. Set FLASHPOINT_API_KEY=<key> (or "
                "pass --api-key KEY) too"
            )
        if max_artifact_bytes <= 0:
            raise ConfigError(f"--max-artifact-mb must be positive, got {max_artifact_bytes / 2**20}")
        self.target = target
        self.settings = settings
        self.data_dir = None if data_dir is None else Path(data_dir).expanduser()
        if db is None:
            db = ".flashpoint/jobs.db" if self.data_dir is None else self.data_dir / "jobs.db"
        self.host, self.port, self.db = host, port, db
        #: the secrets endpoints name in their env, in the data directory (None: the server keeps none)
        self.secrets = None if self.data_dir is None else SecretStore(self.data_dir / "secrets")
        #: the quotas and budgets in force, in the data directory (None: the server keeps none; decision 0113)
        self.quotas = None if self.data_dir is None else QuotaStore(self.data_dir / "quotas")
        self.max_artifact_bytes = max_artifact_bytes
        self.grace_s = grace_s
        self.priority_classes = priority_classes
        self.app_weights = dict(app_weights or {})
        self.preempt_grace_s = preempt_grace_s
        self.api_keys = api_keys
        self.max_body_bytes = max_body_bytes
        self.allow_pickle = allow_pickle
        self.allow_private_webhooks = allow_private_webhooks
        self.max_connections = max_connections
        self.header_timeout_s, self.body_timeout_s = header_timeout_s, body_timeout_s
        self.max_result_bytes = max_result_bytes
        self.max_queued_jobs, self.max_queued_bytes = max_queued_jobs, max_queued_bytes
        self.route_wait_s = settings.route_wait_s if route_wait_s is None else route_wait_s

    def plane_role(self) -> PlaneRole:
        """serve's plane: durable (its SQLite file; running jobs go back in the queue when it stops), with serve's
        limits, running endpoints' cron schedules."""
        quiet_runpod = logging.getLogger().getEffectiveLevel() > logging.DEBUG
        return PlaneRole(
            user_scalers=False,  # a server runs no deployed code in its own process
            db=self.db,
            secrets=None if self.secrets is None else self.secrets.resolver,
            max_result_bytes=self.max_result_bytes,
            max_queued_jobs=self.max_queued_jobs,
            max_queued_bytes=self.max_queued_bytes,
            # route workers accept the bodies the server's proxy forwards (it refuses larger ones first); exact:
            # bytes over a power of two
            worker_env={"FLASHPOINT_MAX_BODY_MB": repr(self.max_body_bytes / 2**20)},
            # Runpod's worker logger prints DEBUG lines by default: not on this console unless --log-level debug
            # (an endpoint's own env= may still ask for them)
            worker_env_defaults={"RUNPOD_LOG_LEVEL": "INFO"} if quiet_runpod else {},
            schedules=True,  # endpoints' cron schedules (decision 0109)
            quotas=self.quotas,
            priority_classes=self.priority_classes,
            app_weights=self.app_weights,
            preempt_grace_s=self.preempt_grace_s,
        )

    def deploy_manager(self, plane: ControlPlane, checkers: dict[str, Callable[[Any], None]]) -> DeployManager | None:
        """The deploy manager over the data directory's deployments and artifacts (None without a data
        directory: nothing can be deployed)."""
        if self.data_dir is None:
            return None
        from flashpoint.hosting.deploying import DeployManager
        from flashpoint.hosting.deployments import Deployments

        return DeployManager(
            plane,
            Deployments(self.data_dir / "deployments.db"),
            ArtifactStore(self.data_dir / "artifacts", limit_bytes=self.max_artifact_bytes),
            checkers,
            code_root=self.data_dir / "code",
            missing_secrets=None if self.secrets is None else self.secrets.missing,
        )

    def run(self) -> None:
        """Load the app, serve until SIGINT/SIGTERM, then drain (``drain``), stop the workers and put the jobs cut
        short back in the queue."""
        import uvicorn

        from flashpoint.api.app import Dispatch, create_app
        from flashpoint.api.approutes import is_upload, router as app_router
        from flashpoint.api.guard import principal_lookup
        from flashpoint.api.keyroutes import router as key_router
        from flashpoint.api.loopguard import LoopbackGuard, host_names
        from flashpoint.api.quotaroutes import router as quota_router
        from flashpoint.api.runpod import Intake
        from flashpoint.api.secretroutes import router as secret_router
        from flashpoint.api.transport import hardened_protocol
        from flashpoint.hosting.keystore import KeyStore

        loaded = load_target(self.target) if self.target else {}
        handles = {name: handle for name, (handle, _) in loaded.items()}
        # APP's endpoints serve as an app of their own, named after its folder, environment production
        pinned = app_name_of(self.target) if self.target else None
        sock = listening_socket(self.host, self.port)
        port = sock.getsockname()[1]
        # local workers reach a wildcard-bound server on loopback; workers on other nodes where the user says
        worker_host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        local_url = http_url(worker_host, port)
        plane = build_plane(
            self.settings,
            self.plane_role(),
            base_url=self.settings.worker_url or local_url,
            simulated=app_simulated(self.settings),  # read after the app is imported
        )
        plane.listen(console.log_finished)  # a line per finished job (console.py)

        # the workers of a shared name load a pickled table of its functions' import paths from a file
        code_dir = tempfile.TemporaryDirectory(prefix="flashpoint-serve-")
        # this machine's CLI gets a key of its own (in the announcement), so no configured key is ever written down
        cli_key = secrets.token_urlsafe(32) if self.api_keys else None
        announced: list[Path | None] = []
        intake = Intake(
            # a command's handler takes any JSON input (as on Runpod); functions are checked by signature
            input_checkers(handles, pinned),
            allow_pickle=self.allow_pickle,
            allow_private_webhooks=self.allow_private_webhooks,
        )
        deploys = self.deploy_manager(plane, intake.checkers)
        if deploys is not None and pinned is not None:
            # APP's own app, and each Runpod SDK 2.x App it declares, change by editing APP and restarting
            for app_name in {pinned, *(h.spec.app for h in handles.values() if h.spec.app is not None)}:
                deploys.pinned[app_name] = str(self.target)

        async def startup() -> None:
            await plane.start()
            for number, (handle, target) in enumerate(loaded.values()):
                code_file = None
                if target.pickled is not None:
                    code_file = os.path.join(code_dir.name, f"{number}.pkl")
                    Path(code_file).write_bytes(target.pickled)
                spec = (
                    handle.spec
                    if pinned is None or handle.spec.app is not None
                    else dataclasses.replace(handle.spec, app=pinned, app_env=DEFAULT_ENV)
                )
                plane.register(spec, target, code_file)
            deployed = []
            if deploys is not None:  # what was deployed comes back before the plane requeues its jobs
                for problem in await deploys.recover():
                    print(f"flashpoint: {problem}", file=sys.stderr, flush=True)
                deployed = [d.spec.key for app, env in deploys.live() for d in deploys.endpoints(app, env)]
            recovered = plane.recover()
            # announced before the line that says it serves: whoever waits for that line finds the file
            notice = announce.Announcement(announce.SERVER, local_url, cli_key, app=self.target)
            announced.append(announce.write(self.settings.state_dir, notice))
            # APP's own endpoints by name, in its folder's app; a Runpod SDK 2.x App's by id (their own app)
            bare = [name for name, handle in handles.items() if handle.spec.app is None]
            own = f"{', '.join(bare)} (app {pinned})" if pinned is not None and bare else ""
            apps = [name for name, handle in handles.items() if handle.spec.app is not None]
            serving = ", ".join(p for p in (own, *apps, *deployed) if p) or "no app yet (flashpoint deploy sends one)"
            print(
                f"flashpoint serving {serving} on http://{self.host}:{port} "
                f"(fleet: {plane.fleet_summary()}; jobs in {self.db}; {recovered} unfinished job(s) recovered)",
                flush=True,
            )

        def unannounce() -> None:
            for path in announced:
                announce.withdraw(path)
            announced.clear()

        async def shutdown() -> None:
            unannounce()
            if deploys is not None:
                await deploys.close()
                deploys.deployments.close()
            await plane.close()
            await dispatch.routes.close()
            plane.store.close()
            code_dir.cleanup()

        app = create_app(
            plane,
            api_keys=self.api_keys + ((cli_key,) if cli_key else ()),
            intake=intake,
            max_body_bytes=self.max_body_bytes,
            webhook_retry_delay_s=self.settings.webhook_retry_s,
            route_wait_s=self.route_wait_s,
            on_startup=startup,
            on_shutdown=shutdown,
            body_exempt=is_upload if deploys is not None else None,
        )
        if deploys is not None:  # apps deployed to it, their versions and rollouts
            app.include_router(app_router, prefix="/v1")
            app.state.deploys = deploys
        if self.data_dir is not None:  # scoped keys beside the server's own (decision 0093), managed by admin keys
            keys = KeyStore(self.data_dir / "keys")
            app.include_router(key_router, prefix="/v1")
            app.state.keys = keys
            app.state.key_lookup = principal_lookup(keys)
        if self.quotas is not None:  # quotas and budgets, managed by admin keys (decision 0113)
            app.include_router(quota_router, prefix="/v1")
            app.state.quotas = self.quotas
        if self.secrets is not None:  # its --data-dir's: set, listed and deleted with the server's key
            app.include_router(secret_router, prefix="/v1")
            app.state.secrets = self.secrets

        grace_s = self.grace_s

        class _Uvicorn(uvicorn.Server):
            async def shutdown(self, sockets: Any = None) -> None:
                # Drain while still listening (workers post their results over HTTP), then stop workers and answer
                # their long-polls, so uvicorn finds no request left to cancel.
                await drain(plane, grace_s)
                await plane.close()
                await super().shutdown(sockets)

        protocol = hardened_protocol(
            max_connections=self.max_connections,
            header_timeout_s=self.header_timeout_s,
            body_timeout_s=self.body_timeout_s,
        )
        dispatch = Dispatch(app, plane)
        served: Any = dispatch
        if not self.api_keys:  # only this machine's names, and no other origin's page (api/loopguard.py)
            names = host_names(self.host, sock.getsockname()[0], worker_url=self.settings.worker_url)
            served = LoopbackGuard(dispatch, names)
        config = uvicorn.Config(
            served,
            http=protocol,
            log_level="warning",
            access_log=False,
            proxy_headers=False,
            timeout_keep_alive=120,
            timeout_graceful_shutdown=3,
        )
        try:
            _Uvicorn(config).run(sockets=[sock])
        finally:
            unannounce()
