"""What both ways of hosting a control plane need: its backend and fleet, its listening socket, its URL.

Shared by ``server.py`` (``flashpoint serve``) and ``embedded.py`` (the SDK's in-process server); imports neither.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket

from flashpoint.backends.base import Backend
from flashpoint.backends.local import LocalBackend, python_env
from flashpoint.config import Settings
from flashpoint.errors import ConfigError
from flashpoint.fleet.discovery import discover_fleet


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
