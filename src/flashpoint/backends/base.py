"""The Backend protocol: what the control plane needs to start and stop worker processes on a fleet."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from flashpoint.fleet.inventory import Device, Fleet, Node

#: called with (worker_id, channel "stdout" or "stderr", line without newline)
LineCallback = Callable[[str, str, str], None]


class ExitCallback(Protocol):
    """Called once when the worker process is gone: its exit code (negative: the signal that killed it), and, when
    the backend lost sight of the process instead of seeing it end (a Ray actor that died), ``cause``, in words
    (the code is then -1 and no signal is meant)."""

    def __call__(self, worker_id: str, code: int, /, cause: str = "") -> None: ...


#: called with the whole fleet (devices and nodes, in a stable order) whenever it changes (a node joined or left)
FleetCallback = Callable[[Fleet], None]


@dataclass(frozen=True, slots=True)
class Launch:
    """Everything needed to start one worker: command, environment, and the devices it was placed on."""

    worker_id: str
    endpoint: str
    argv: Sequence[str]
    #: kept out of the repr: it holds the worker's credentials and the values of the secrets it names
    env: Mapping[str, str] = field(repr=False)
    devices: tuple[Device, ...]
    cwd: str | None = None
    #: the node placement chose (a CPU worker's; a GPU worker's is its devices')
    node: str = ""
    #: a CPU worker's reserved vCPUs and memory (MiB); 0 for a GPU worker
    cpus: int = 0
    memory_mb: int = 0
    #: a route worker: it serves HTTP on a port the backend chooses on the worker's node and sets in its environment
    #: (``PORT`` and ``PORT_HEALTH``, the same, and ``FLASHPOINT_ROUTE_HOST``, the address to bind), as Runpod's
    #: load-balanced workers expect
    http: bool = False


@dataclass(frozen=True, slots=True)
class Started:
    """What a backend tells the plane of a worker it started."""

    #: the device ids the worker really got, when the backend numbers them itself (Ray hands an actor GPU ids of its
    #: own choosing on the node); None when the launch's devices are the ones
    device_ids: tuple[int, ...] | None = None
    #: where a route worker serves HTTP, ``host:port`` (an IPv6 host in brackets); None for a worker that pulls jobs
    address: str | None = None
    #: the worker's process id on this machine (GPU telemetry attributes NVML's processes by it); None when the
    #: backend runs it elsewhere or does not know it
    pid: int | None = None


#: the environment variables a route worker is told where to serve with (Runpod's load-balanced worker contract, plus
#: the address to bind, which is flashpoint's)
PORT_ENV = ("PORT", "PORT_HEALTH")
ROUTE_HOST_ENV = "FLASHPOINT_ROUTE_HOST"


def http_env(host: str, port: int) -> dict[str, str]:
    """The variables a route worker reads to serve on ``host:port``."""
    return {**{name: str(port) for name in PORT_ENV}, ROUTE_HOST_ENV: host}


def address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Backend(Protocol):
    """Starts and stops workers; reports their output and their exit. Core never names a concrete backend."""

    name: str

    def devices(self) -> list[Device]:
        """The GPUs this backend places workers on, in a stable order."""
        ...

    def nodes(self) -> list[Node]:
        """The nodes (GPU nodes and CPU-only ones) with their CPU capacity, CUDA version and labels, in a stable
        order; a node a device names but this list omits has no CPU capacity and an unknown CUDA version."""
        ...

    def watch(self, on_change: FleetCallback) -> None:
        """Report fleet changes from now on, on the running loop; a fixed fleet never calls ``on_change``."""
        ...

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> Started:
        """Start the worker; raise BackendError if it cannot be started at all, NotReadyError if its place never
        came up (the plane then tries the next candidate).

        Returns the device ids the worker really got when the backend, not the plane's ledger, numbers them, and,
        for a route worker (``launch.http``), the address it was told to serve on: the backend chooses a free port on
        the worker's node, since only it knows the node. A port taken between that choice and the worker's bind makes
        the worker exit before it is ready: a failed start like any other, and the next start gets another port.
        """
        ...

    async def stop(self, worker_id: str, grace_s: float) -> None:
        """Ask the worker to exit (SIGTERM), and force it (SIGKILL) after ``grace_s``."""
        ...

    async def close(self) -> None:
        """Stop every worker this backend started and wait for them."""
        ...
