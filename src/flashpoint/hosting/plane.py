"""What every way of hosting a control plane needs: the plane itself (``build_plane``: its job store, its backend and
fleet, its workers' environment, its ``PlaneSettings``), its listening socket and its URL.

Shared by the three composition roots, ``server.py`` (``flashpoint serve``), ``embedded.py`` (the SDK's in-process
server) and ``dev/server.py`` (``flashpoint dev``); imports none of them. Each root says what is its own in a
``PlaneRole`` (a durable store or none, its limits, what its workers' environment adds) and builds its plane here.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from flashpoint.backends.base import Backend
from flashpoint.backends.local import LocalBackend, python_env
from flashpoint.config import Settings
from flashpoint.errors import ConfigError
from flashpoint.fleet.discovery import discover_fleet
from flashpoint.scheduler.jobbook import MAX_QUEUED_BYTES, MAX_QUEUED_JOBS
from flashpoint.scheduler.launcher import AppSecrets
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.quotas import QuotaSource
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.spec import PRIORITY_CLASSES
from flashpoint.store.base import JobStore
from flashpoint.store.memory import MemoryJobStore
from flashpoint.wire import codec


@dataclass(frozen=True)
class PlaneRole:
    """What a composition root decides about its plane, beside what ``config.Settings`` and the backend decide. The
    defaults are the embedded plane's (a script's: its jobs end with it)."""

    #: the SQLite file of a durable plane (``flashpoint serve``'s), which puts running jobs back in the queue when it
    #: closes; None: jobs live in memory and end with the plane
    db: str | os.PathLike[str] | None = None
    #: the largest result body a worker may post
    max_result_bytes: int = codec.MAX_RESULT_BYTES
    #: the queues' caps, in jobs and in bytes of input
    max_queued_jobs: int = MAX_QUEUED_JOBS
    max_queued_bytes: int = MAX_QUEUED_BYTES
    #: set in every worker's environment, over what the backend gives it
    worker_env: Mapping[str, str] = field(default_factory=dict)
    #: set in every worker's environment unless the backend's already has them
    worker_env_defaults: Mapping[str, str] = field(default_factory=dict)
    #: the values of the secrets endpoints name in their ``env``, per app (``serve``'s store at ``--data-dir``:
    #: ``SecretStore.resolver``); None: the plane keeps no secrets, and an endpoint that names one is refused at
    #: registration
    secrets: AppSecrets | None = None
    #: the plane runs endpoints' cron schedules (``serve``'s: Runpod runs schedules only where an app is deployed)
    schedules: bool = False
    #: the quotas and budgets in force (``serve``'s store at ``--data-dir``: ``QuotaStore``); None: none
    quotas: QuotaSource | None = None
    #: priority classes by name and rank (None: high, normal, low), fair-share weights per app, and how long a
    #: preempted worker has to stop (None: the settings', FLASHPOINT_PREEMPT_GRACE_S) (decision 0115)
    priority_classes: Mapping[str, int] | None = None
    app_weights: Mapping[str, float] = field(default_factory=dict)
    preempt_grace_s: float | None = None
    #: the plane runs in the user's own program (embedded, dev), so an endpoint's ``scaler=`` function may run in it;
    #: a server takes none (decision 0120)
    user_scalers: bool = True


def app_simulated(settings: Settings) -> str | None:
    """The simulated fleet of a plane that serves an app (serve, dev): the settings', else
    ``FLASHPOINT_SIMULATED_GPUS`` read now, after the app was imported: an app may declare its fleet itself (the
    examples do)."""
    return settings.simulated_gpus or os.environ.get("FLASHPOINT_SIMULATED_GPUS") or None


def plane_settings(
    settings: Settings,
    role: PlaneRole,
    *,
    base_url: str,
    worker_env: Mapping[str, str],
    parent_pid: int | None,
) -> PlaneSettings:
    """The ``PlaneSettings`` of a plane hosted in ``role``: its tunables from ``settings``, its limits from ``role``,
    and ``worker_env`` (the backend's) with the role's additions. ``base_url``: where workers reach the plane."""
    env = {**role.worker_env_defaults, **worker_env, **role.worker_env}
    return PlaneSettings(
        take_hold_s=settings.take_hold_s,
        worker_env=env,
        parent_pid=parent_pid,
        node=settings.node,
        requeue_on_close=role.db is not None,
        max_result_bytes=role.max_result_bytes,
        max_queued_jobs=role.max_queued_jobs,
        max_queued_bytes=role.max_queued_bytes,
        base_url=base_url,
        route_ready_timeout_s=settings.route_ready_timeout_s,
        run_schedules=role.schedules,
        priority_classes=dict(PRIORITY_CLASSES if role.priority_classes is None else role.priority_classes),
        app_weights=dict(role.app_weights),
        preempt_grace_s=settings.preempt_grace_s if role.preempt_grace_s is None else role.preempt_grace_s,
        idle_timeout_auto=settings.idle_timeout_auto,
        user_scalers=role.user_scalers,
        gpu_sample_s=settings.gpu_sample_s,
    )


def build_plane(settings: Settings, role: PlaneRole, *, base_url: str, simulated: str | None) -> ControlPlane:
    """A control plane in ``role``: the backend ``settings`` names with its fleet read (``simulated``: a simulated
    fleet's description, or None for the real one), then its job store (SQLite at ``role.db``, else in memory), its
    ``plane_settings``, the role's secrets and a worker secret of its own."""
    backend, worker_env, parent_pid = open_backend(settings, simulated)
    store: JobStore
    if role.db is not None:
        from flashpoint.store.sqlite import SQLiteJobStore

        store = SQLiteJobStore(role.db)
    else:
        store = MemoryJobStore()
    return ControlPlane(
        store,
        backend,
        worker_secret=secrets.token_urlsafe(32),
        settings=plane_settings(settings, role, base_url=base_url, worker_env=worker_env, parent_pid=parent_pid),
        secrets=role.secrets,
        quotas=role.quotas,
    )


def open_backend(settings: Settings, simulated: str | None) -> tuple[Backend, dict[str, str], int | None]:
    """The backend ``settings`` names, with its fleet read; plus the environment and the parent pid its workers get.

    Local workers inherit this process's environment and die with it (their parent). A Ray worker's process is the
    child of its actor on its node: it gets the node's environment with only the import path added, and dies with the
    actor (the actor sets that up).
    """
    if settings.backend == "ray":
        from flashpoint.backends.ray import RayBackend

        local = None if settings.ray_address else discover_fleet(settings, simulated)
        backend = RayBackend(
            settings.ray_address,
            ready_timeout_s=settings.ray_ready_timeout_s,
            # one knob for both backends: a local build's time limit is Ray's runtime_env setup timeout
            env_setup_timeout_s=settings.env_build_timeout_s,
            local_devices=local.devices if local is not None else (),
            local_node=local.nodes[0] if local is not None and local.nodes else None,
        )
        backend.connect()
        env = python_env()
        return backend, {"PYTHONPATH": env["PYTHONPATH"], "PYTHONUNBUFFERED": "1"}, None
    fleet = discover_fleet(settings, simulated)
    return LocalBackend(list(fleet.devices), list(fleet.nodes)), python_env(), os.getpid()


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: any free one) and already listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit TCP_NODELAY: without it, small responses wait on delayed ACKs (~40 ms)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is already in use (another flashpoint serve? `flashpoint status` lists this "
                "machine's); pick another with --port, or --port 0 for a free one"
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(
                f"{host} is not an address of this machine; listen on one it has, e.g. 127.0.0.1"
            ) from None
        raise
    # listen now: connections made between "serving" being printed and uvicorn's accept loop wait in the backlog
    # instead of being refused
    sock.listen(2048)
    return sock


def loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address to listen on) is this machine only: ``localhost`` or a loopback address.
    A server bound anywhere else needs an API key."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: ports tried from the one asked for, as Flash's dev server does, when it is busy
PORT_ATTEMPTS = 20


def bind_port(host: str, port: int, attempts: int = PORT_ATTEMPTS) -> socket.socket:
    """A listening socket on ``port``, or the next free one of ``attempts`` (port 0: any free port), as Flash's dev
    server moves to the next port when its own is busy (``flashpoint dev``).

    Raises:
        ConfigError: every port tried is busy.
    """
    for candidate in [0] if port == 0 else range(port, min(port + attempts, 65536)):
        try:  # a probe first: listening_socket does not close its socket when the bind fails
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
                probe.bind((host, candidate))
            return listening_socket(host, candidate)
        except OSError:
            continue
    raise ConfigError(f"no free port on {host} from {port} to {port + attempts - 1}; choose another with --port")


def http_url(host: str, port: int) -> str:
    """``http://host:port``, with an IPv6 host in brackets."""
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"
