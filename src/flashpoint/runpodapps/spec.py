"""What an App decorator declares: one resource's options, normalized and checked (mirrors ``runpod/apps/spec.py``
of ``runpod==2.0.0rc2``).

A ``ResourceSpec`` holds no live state. ``validate()`` (run on construction and again before every call) normalizes
the options in place, as rc2 does, and raises ``InvalidResourceError`` (or ``VolumeError`` for mounts) with rc2's
messages: after it, ``gpu`` is a list of pool ids and device names or None, ``cpu`` a list of flavour ids or None,
``workers`` a ``(min, max)`` tuple, ``datacenter`` a list of ids or None, ``mounts`` a dict of path to volume, and
``scaler_type``/``min_cuda_version`` canonical strings or None. The bridge turns a validated spec into flashpoint's
endpoint. Left out: rc2's ``to_manifest`` (its cloud deploy format).

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from flashpoint.runpodapps.datacenter import DataCenter
from flashpoint.runpodapps.errors import InvalidResourceError
from flashpoint.runpodapps.gpu import GpuGroup, GpuLike, GpuType, resolve_gpu_string
from flashpoint.runpodapps.markers import validate_route
from flashpoint.runpodapps.volume import Volume, normalize_mounts, validate_mounts

__all__ = [
    "CUDA_VERSIONS",
    "DEFAULT_SCALER_VALUE",
    "DEFAULT_WORKERS",
    "SCALER_TYPES",
    "ResourceKind",
    "ResourceSpec",
    "RouteSpec",
    "normalize_cpu",
    "normalize_cuda_version",
    "normalize_datacenter",
    "normalize_gpu",
    "normalize_scaler_type",
    "normalize_workers",
]

DEFAULT_WORKERS: tuple[int, int] = (0, 3)

SCALER_TYPES = frozenset({"QUEUE_DELAY", "REQUEST_COUNT"})
DEFAULT_SCALER_VALUE = 4

#: cuda versions the platform can filter hosts by
CUDA_VERSIONS = frozenset(
    {"11.8", "12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.7", "12.8", "12.9", "13.0"}
)


class ResourceKind(str, Enum):
    QUEUE = "queue"
    """queue-based serverless endpoint."""

    API = "api"
    """load-balanced serverless endpoint with http routes."""

    TASK = "task"
    """ephemeral pod compute, provisioned per call (on flashpoint: a single-use worker per job)."""


@dataclass(frozen=True)
class RouteSpec:
    """one http route on an api resource."""

    method: str
    path: str
    handler_name: str


def normalize_workers(workers: int | tuple[int, int] | None) -> tuple[int, int]:
    """int n -> (0, n); (min, max) passes through; None -> default."""
    if workers is None:
        return DEFAULT_WORKERS
    if isinstance(workers, int):
        parsed = (DEFAULT_WORKERS[0], workers)
    elif isinstance(workers, (tuple, list)) and len(workers) == 2:
        parsed = (int(workers[0]), int(workers[1]))
    else:
        raise InvalidResourceError(f"workers must be an int or (min, max) tuple, got {workers!r}")
    min_w, max_w = parsed
    if min_w < 0 or max_w < 1:
        raise InvalidResourceError(f"invalid worker range ({min_w}, {max_w})")
    if min_w > max_w:
        raise InvalidResourceError(f"workers min ({min_w}) cannot exceed max ({max_w})")
    return (min_w, max_w)


def normalize_gpu(gpu: GpuLike | Sequence[GpuLike] | None) -> list[str] | None:
    """normalize gpu input to a list of api-facing string values.

    strings resolve strictly: pool ids and device names pass through, shorthands ("4090", "B200") expand, and typos
    fail at decoration time. only a list is a list of choices (as rc2: a tuple is one bad value).
    """
    if gpu is None:
        return None
    items: list[Any] = gpu if isinstance(gpu, list) else [gpu]
    out: list[str] = []
    for item in items:
        if isinstance(item, (GpuGroup, GpuType)):
            out.append(item.value)
        elif isinstance(item, str):
            out.extend(resolve_gpu_string(item))
        else:
            raise InvalidResourceError(f"gpu must be a GpuGroup, GpuType, or string, got {type(item).__name__}")
    return out


def normalize_cpu(cpu: str | Sequence[str] | None) -> list[str] | None:
    """normalize cpu instance ids to a list of strings."""
    if cpu is None:
        return None
    items: Any = [cpu] if isinstance(cpu, str) else cpu
    if not isinstance(items, list):
        raise InvalidResourceError(f"cpu must be an instance id string or list, got {type(items).__name__}")
    if not items or any(not isinstance(item, str) or not item.strip() for item in items):
        raise InvalidResourceError("cpu must contain non-empty instance ids")
    return list(items)


def normalize_scaler_type(scaler_type: str | None) -> str | None:
    """validate a scaler type string, tolerating lowercase."""
    if scaler_type is None:
        return None
    normalized = str(scaler_type).strip().upper()
    if normalized not in SCALER_TYPES:
        raise InvalidResourceError(f"scaler_type must be one of {sorted(SCALER_TYPES)}, got {scaler_type!r}")
    return normalized


def normalize_cuda_version(version: str | None) -> str | None:
    """validate a minimum cuda version string."""
    if version is None:
        return None
    normalized = str(version).strip()
    if normalized not in CUDA_VERSIONS:
        raise InvalidResourceError(
            f"min_cuda_version must be one of {', '.join(sorted(CUDA_VERSIONS))}, got {version!r}"
        )
    return normalized


def normalize_datacenter(datacenter: str | Sequence[str] | None) -> list[str] | None:
    """normalize enum values and string variants to api datacenter ids."""
    if datacenter is None:
        return None
    values = [datacenter] if isinstance(datacenter, str) else datacenter
    try:
        return [DataCenter.from_string(value).value for value in values]
    except (AttributeError, TypeError, ValueError) as exc:
        raise InvalidResourceError(f"invalid datacenter: {datacenter!r}") from exc


@dataclass
class ResourceSpec:
    """declarative config for one app resource (normalized in place by ``validate()``)."""

    kind: ResourceKind
    name: str
    gpu: GpuLike | Sequence[GpuLike] | None = None
    cpu: str | Sequence[str] | None = None
    gpu_count: int = 1
    workers: int | tuple[int, int] | None = DEFAULT_WORKERS
    idle_timeout: int = 60
    dependencies: list[str] | None = None
    system_dependencies: list[str] | None = None
    mounts: Mapping[str, Volume] | None = None
    env: dict[str, Any] | None = None
    datacenter: str | Sequence[str] | None = None
    image: str | None = None
    registry_auth: str | None = None
    model: Any | None = None
    schedule: str | None = None
    max_concurrency: int = 1
    execution_timeout_ms: int = 0
    flashboot: bool = True
    scaler_type: str | None = None
    scaler_value: int = DEFAULT_SCALER_VALUE
    min_cuda_version: str | None = None
    accelerate_downloads: bool = True
    container_disk_gb: int | None = None
    routes: list[RouteSpec] = field(default_factory=list)
    asgi_factory: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """normalize and validate mutable configuration before it is consumed (rc2's checks, in rc2's order)."""
        try:
            self.kind = ResourceKind(self.kind)
        except ValueError as exc:
            raise InvalidResourceError(f"invalid resource kind: {self.kind!r}") from exc
        self.gpu = normalize_gpu(self.gpu)
        self.cpu = normalize_cpu(self.cpu)
        self.workers = normalize_workers(self.workers)
        self.scaler_type = normalize_scaler_type(self.scaler_type)
        self.min_cuda_version = normalize_cuda_version(self.min_cuda_version)
        self.datacenter = normalize_datacenter(self.datacenter)
        self.mounts = normalize_mounts(self.mounts)
        if self.gpu is not None and self.cpu is not None:
            raise InvalidResourceError(f"resource '{self.name}': gpu and cpu are mutually exclusive")
        validate_mounts(self.mounts, self.kind.value, self.is_cpu)
        if not isinstance(self.name, str) or not self.name:
            raise InvalidResourceError("resource name must be a non-empty string")
        if self.gpu_count < 1:
            raise InvalidResourceError(f"resource '{self.name}': gpu_count must be >= 1")
        if self.max_concurrency < 1:
            raise InvalidResourceError(
                f"resource '{self.name}': max_concurrency must be >= 1, got {self.max_concurrency}"
            )
        if self.execution_timeout_ms < 0:
            raise InvalidResourceError(f"resource '{self.name}': execution_timeout_ms must be >= 0")
        if self.scaler_value < 1:
            raise InvalidResourceError(f"resource '{self.name}': scaler_value must be >= 1")
        if self.container_disk_gb is not None and self.container_disk_gb < 1:
            raise InvalidResourceError(f"resource '{self.name}': container_disk_gb must be >= 1")
        if self.min_cuda_version is not None and self.is_cpu:
            raise InvalidResourceError(f"resource '{self.name}': min_cuda_version has no effect on cpu resources")
        if self.model is not None and self.kind is ResourceKind.TASK:
            raise InvalidResourceError(
                f"resource '{self.name}': platform-cached models are only available on queue and api resources; "
                f"tasks download weights themselves"
            )
        if self.schedule is not None and (not isinstance(self.schedule, str) or not self.schedule):
            raise InvalidResourceError("cron must be a non-empty string")
        seen: set[tuple[str, str]] = set()
        for route in self.routes:
            if not isinstance(route, RouteSpec):
                raise InvalidResourceError("routes must contain RouteSpec values")
            try:
                validate_route(route.method, route.path)
            except ValueError as exc:
                raise InvalidResourceError(str(exc)) from exc
            key = (route.method, route.path)
            if key in seen:
                raise InvalidResourceError(f"duplicate route {route.method} {route.path} on {self.name}")
            seen.add(key)

    @property
    def is_cpu(self) -> bool:
        return self.cpu is not None

    @property
    def effective_scaler_type(self) -> str:
        """the scaler the endpoint deploys with: explicit or kind default."""
        if self.scaler_type:
            return self.scaler_type
        return "REQUEST_COUNT" if self.kind is ResourceKind.API else "QUEUE_DELAY"
