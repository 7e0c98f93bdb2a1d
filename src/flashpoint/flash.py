"""Runpod Flash's public names that are not flashpoint's own: its value types, constants and legacy aliases.

Everything in ``runpod_flash.__all__`` (runpod-flash 1.21) imports from ``flashpoint`` with Flash's values:
``CpuInstanceType``, ``DataCenter``, ``CPU_DATACENTERS``, ``CudaVersion``, ``ServerlessType``, ``NetworkVolume``,
``PodTemplate`` and ``DEFAULT_WORKERS_MIN/MAX`` are defined here; ``GpuType``/``GpuGroup`` live in
``flashpoint.gpus`` and ``ServerlessScalerType`` in ``flashpoint.spec``. The legacy ``remote`` decorator and the
``Live*``/``*Serverless*``/``*LoadBalancer*`` resource classes are thin deprecated aliases: each warns once per
process (``DeprecationWarning``) when first used, then behaves as ``Endpoint``. ``FlashApp`` and
``ResourceManager`` manage apps and resources in Runpod's cloud; they import, and say so when constructed.

This module stays light: it imports nothing beyond the standard library and flashpoint's SDK layer.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Final

from flashpoint.errors import InvalidEndpointError

__all__ = [
    "CPU_DATACENTERS",
    "DEFAULT_WORKERS_MAX",
    "DEFAULT_WORKERS_MIN",
    "CpuInstanceType",
    "CpuLiveLoadBalancer",
    "CpuLiveServerless",
    "CpuLoadBalancerSlsResource",
    "CpuServerlessEndpoint",
    "CudaVersion",
    "DataCenter",
    "FlashApp",
    "LiveLoadBalancer",
    "LiveServerless",
    "LoadBalancerSlsResource",
    "NetworkVolume",
    "PodTemplate",
    "ResourceManager",
    "ServerlessEndpoint",
    "ServerlessType",
    "remote",
]


class _StrEnum(str, Enum):
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)


class CpuInstanceType(_StrEnum):
    """A CPU instance type, as in Flash: ``{generation}{kind}-{vCPUs}-{memory GB}``.

    ``cpu3g``: general purpose (4 GB per vCPU); ``cpu3c`` and ``cpu5c``: compute-optimized (2 GB per vCPU).
    """

    CPU3G_1_4 = "cpu3g-1-4"
    CPU3G_2_8 = "cpu3g-2-8"
    CPU3G_4_16 = "cpu3g-4-16"
    CPU3G_8_32 = "cpu3g-8-32"
    CPU3C_1_2 = "cpu3c-1-2"
    CPU3C_2_4 = "cpu3c-2-4"
    CPU3C_4_8 = "cpu3c-4-8"
    CPU3C_8_16 = "cpu3c-8-16"
    CPU5C_1_2 = "cpu5c-1-2"
    CPU5C_2_4 = "cpu5c-2-4"
    CPU5C_4_8 = "cpu5c-4-8"
    CPU5C_8_16 = "cpu5c-8-16"

    @property
    def vcpus(self) -> int:
        """The instance's vCPU count."""
        return int(self.value.split("-")[1])

    @property
    def memory_gb(self) -> int:
        """The instance's memory in GB."""
        return int(self.value.split("-")[2])


class DataCenter(_StrEnum):
    """A Runpod datacenter, as in Flash 1.21 (those with network storage)."""

    US_CA_2 = "US-CA-2"
    US_IL_1 = "US-IL-1"
    US_KS_2 = "US-KS-2"
    US_MO_1 = "US-MO-1"
    US_MO_2 = "US-MO-2"
    US_NC_2 = "US-NC-2"
    US_NE_1 = "US-NE-1"
    US_WA_1 = "US-WA-1"
    EU_CZ_1 = "EU-CZ-1"
    EU_RO_1 = "EU-RO-1"
    EUR_NO_1 = "EUR-NO-1"

    @classmethod
    def from_string(cls, value: str) -> DataCenter:
        """Parse ``"EU-RO-1"``, ``"eu_ro_1"`` and the like; ``ValueError`` naming the valid ones otherwise."""
        normalized = value.strip().upper().replace("_", "-")
        try:
            return cls(normalized)
        except ValueError:
            valid = ", ".join(dc.value for dc in cls)
            raise ValueError(f"Unknown datacenter '{value}'. Valid datacenters: {valid}") from None

    @classmethod
    def all(cls) -> list[DataCenter]:
        """Every datacenter, in Flash's order."""
        return list(cls)


#: the datacenters where Flash runs CPU endpoints
CPU_DATACENTERS: Final[frozenset[DataCenter]] = frozenset({DataCenter.EU_RO_1})


class CudaVersion(_StrEnum):
    """A CUDA version, as in Flash (``min_cuda_version=``): the host driver's CUDA floor."""

    V11_8 = "11.8"
    V12_0 = "12.0"
    V12_1 = "12.1"
    V12_2 = "12.2"
    V12_3 = "12.3"
    V12_4 = "12.4"
    V12_5 = "12.5"
    V12_6 = "12.6"
    V12_7 = "12.7"
    V12_8 = "12.8"
    V12_9 = "12.9"
    V13_0 = "13.0"


class ServerlessType(_StrEnum):
    """An endpoint's execution model, as in Flash: ``QB`` (a job queue) or ``LB`` (HTTP routes, load-balanced)."""

    QB = "QB"
    LB = "LB"


#: Flash's default ``workers`` range is ``(DEFAULT_WORKERS_MIN, DEFAULT_WORKERS_MAX)``
DEFAULT_WORKERS_MIN: Final[int] = 0
DEFAULT_WORKERS_MAX: Final[int] = 1


@dataclass(frozen=True, kw_only=True)
class NetworkVolume:
    """A persistent volume, as Flash's ``NetworkVolume``: a ``name`` or an ``id``, a size and a datacenter.

    ``datacenter`` takes a ``DataCenter`` or its string (``"EU-RO-1"``); Flash's ``dataCenterId`` is its alias.
    """

    name: str | None = None
    id: str | None = None
    #: GB, 10 to 4096
    size: int = 100
    datacenter: DataCenter = DataCenter.EU_RO_1

    def __post_init__(self) -> None:
        if self.name is not None and not self.name.strip():
            raise ValueError("NetworkVolume: name must not be empty or whitespace-only")
        if not self.name and not self.id:
            raise ValueError("NetworkVolume: either 'name' or 'id' must be provided")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or not 10 <= self.size <= 4096:
            raise ValueError(f"NetworkVolume: size is 10 to 4096 GB, got {self.size!r}")
        datacenter: object = self.datacenter
        if not isinstance(datacenter, DataCenter):
            if not isinstance(datacenter, str):
                raise ValueError(f"NetworkVolume: datacenter is a DataCenter or its name, got {datacenter!r}")
            object.__setattr__(self, "datacenter", DataCenter.from_string(datacenter))

    @property
    def dataCenterId(self) -> DataCenter:
        """Flash's name for ``datacenter``."""
        return self.datacenter


@dataclass(frozen=True, kw_only=True)
class PodTemplate:
    """Pod overrides, as Flash's ``PodTemplate``; its fields keep Flash's (Runpod API) spelling.

    ``env`` takes Flash's ``[{"key": ..., "value": ...}]`` list or a plain mapping; it is kept as ``(key, value)``
    pairs.
    """

    advancedStart: bool = False
    config: Mapping[str, Any] = field(default_factory=dict)
    containerDiskInGb: int = 64
    containerRegistryAuthId: str = ""
    dockerArgs: str = ""
    env: Sequence[tuple[str, str]] = ()
    imageName: str = ""
    name: str = ""
    ports: str = ""
    startScript: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", _key_values(self.env))
        object.__setattr__(self, "config", dict(self.config))

    @property
    def env_dict(self) -> dict[str, str]:
        """``env`` as a mapping."""
        return dict(self.env)


def _key_values(env: object) -> tuple[tuple[str, str], ...]:
    items: list[object] = list(env.items()) if isinstance(env, Mapping) else list(env or ())  # type: ignore[call-overload]
    pairs: list[tuple[str, str]] = []
    for item in items:
        if isinstance(item, Mapping) and set(item) == {"key", "value"}:
            key, value = item["key"], item["value"]
        elif isinstance(item, tuple) and len(item) == 2:
            key, value = item
        elif hasattr(item, "key") and hasattr(item, "value"):
            key, value = item.key, item.value
        else:
            raise ValueError(f'PodTemplate: env entries are {{"key": ..., "value": ...}}, got {item!r}')
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"PodTemplate: env keys and values are strings, got {key!r}: {value!r}")
        pairs.append((key, value))
    return tuple(pairs)


# --- Runpod cloud management: importable, not usable -------------------------------------------------------------


class FlashApp:
    """Flash's app in Runpod's cloud (``flash app``/``flash deploy``); flashpoint has no cloud apps.

    The name imports so that Flash code does; constructing one raises ``NotImplementedError``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "FlashApp manages apps in Runpod's cloud; flashpoint runs endpoints on your own GPUs: "
            "declare them with Endpoint(...) and serve them with `flashpoint serve`"
        )


class ResourceManager:
    """Flash's tracker of resources deployed to Runpod's cloud; flashpoint's server keeps its own.

    The name imports so that Flash code does; constructing one raises ``NotImplementedError``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "ResourceManager tracks resources in Runpod's cloud; flashpoint has none: "
            "`flashpoint status` and `flashpoint explain` show its endpoints"
        )


# --- legacy aliases -----------------------------------------------------------------------------------------------

_warned: set[str] = set()


def _deprecated(name: str, stacklevel: int = 3) -> None:
    """Warn that ``name`` is deprecated, once per name per process."""
    if name in _warned:
        return
    _warned.add(name)
    warnings.warn(
        f"flashpoint.{name} is deprecated, as runpod_flash.{name} is. Use flashpoint.Endpoint instead.",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


#: legacy field (camelCase, Runpod API) -> Endpoint option
_FIELDS: Final[dict[str, str]] = {
    "name": "name",
    "gpus": "gpu",
    "instanceIds": "cpu",
    "gpuCount": "gpu_count",
    "idleTimeout": "idle_timeout",
    "executionTimeoutMs": "execution_timeout_ms",
    "env": "env",
    "scalerType": "scaler_type",
    "scalerValue": "scaler_value",
    "flashboot": "flashboot",
    "networkVolume": "volume",
    "networkVolumes": "volume",
    "datacenter": "datacenter",
    "minCudaVersion": "min_cuda_version",
    "template": "template",
    "imageName": "image",
    "workersMin": "workers",
    "workersMax": "workers",
}


class _LegacyResource:
    """A legacy Flash resource configuration: the fields given, kept as they are, for ``remote``."""

    _cpu: ClassVar[bool] = False
    _load_balanced: ClassVar[bool] = False

    def __init__(self, **fields: Any) -> None:
        _deprecated(type(self).__name__)
        unknown = sorted(set(fields) - set(_FIELDS))
        if unknown:
            raise TypeError(
                f"{type(self).__name__}: unknown field {', '.join(map(repr, unknown))}; "
                f"flashpoint maps: {', '.join(sorted(_FIELDS))}"
            )
        if "name" not in fields:
            raise TypeError(f"{type(self).__name__}: name is required")
        self.fields: dict[str, Any] = dict(fields)

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value!r}" for key, value in self.fields.items())
        return f"{type(self).__name__}({args})"

    @property
    def name(self) -> str:
        """The endpoint name."""
        return str(self.fields["name"])

    def endpoint_options(self) -> dict[str, Any]:
        """The ``Endpoint(...)`` options these fields mean (only those given, plus a CPU class's default type)."""
        options: dict[str, Any] = {}
        fields = dict(self.fields)
        if self._cpu and "instanceIds" not in fields:
            fields["instanceIds"] = [CpuInstanceType.CPU3G_2_8]
        if "workersMin" in fields or "workersMax" in fields:
            options["workers"] = (
                fields.pop("workersMin", DEFAULT_WORKERS_MIN),
                fields.pop("workersMax", DEFAULT_WORKERS_MAX),
            )
        for key, value in fields.items():
            option = _FIELDS[key]
            if key == "instanceIds" and isinstance(value, (list, tuple)) and len(value) == 1:
                value = value[0]
            if option in options:
                raise TypeError(f"{type(self).__name__}: {key} and another field both set {option}; keep one")
            options[option] = value
        return options


class ServerlessEndpoint(_LegacyResource):
    """Deprecated: a queue endpoint's configuration for ``remote``; use ``Endpoint(...)``."""


class CpuServerlessEndpoint(_LegacyResource):
    """Deprecated: a CPU queue endpoint's configuration for ``remote``; use ``Endpoint(cpu=...)``."""

    _cpu = True


class LiveServerless(_LegacyResource):
    """Deprecated: a queue endpoint's configuration for ``remote``; use ``Endpoint(...)``."""


class CpuLiveServerless(_LegacyResource):
    """Deprecated: a CPU queue endpoint's configuration for ``remote``; use ``Endpoint(cpu=...)``."""

    _cpu = True


class LoadBalancerSlsResource(_LegacyResource):
    """Deprecated: an HTTP-route endpoint's configuration for ``remote``; use ``Endpoint(...)`` routes."""

    _load_balanced = True


class CpuLoadBalancerSlsResource(_LegacyResource):
    """Deprecated: a CPU HTTP-route endpoint's configuration for ``remote``; use ``Endpoint(cpu=...)`` routes."""

    _cpu = True
    _load_balanced = True


class LiveLoadBalancer(_LegacyResource):
    """Deprecated: an HTTP-route endpoint's configuration for ``remote``; use ``Endpoint(...)`` routes."""

    _load_balanced = True


class CpuLiveLoadBalancer(_LegacyResource):
    """Deprecated: a CPU HTTP-route endpoint's configuration for ``remote``; use ``Endpoint(cpu=...)`` routes."""

    _cpu = True
    _load_balanced = True


def remote(
    resource_config: _LegacyResource,
    dependencies: list[str] | None = None,
    system_dependencies: list[str] | None = None,
    accelerate_downloads: bool = True,
    local: bool = False,
    method: str | None = None,
    path: str | None = None,
    **extra: Any,
) -> Callable[[Any], Any]:
    """Deprecated: Flash's legacy decorator; ``@remote(resource_config=LiveServerless(name=..., gpus=[...]))``.

    Behaves as ``@Endpoint(...)`` with the options the resource's fields mean; ``local=True`` returns the function
    unwrapped, as in Flash.
    """
    _deprecated("remote")
    if extra:
        raise TypeError(f"remote: unknown argument {', '.join(map(repr, sorted(extra)))}")
    if not isinstance(resource_config, _LegacyResource):
        raise InvalidEndpointError(
            f"remote: resource_config is a LiveServerless/ServerlessEndpoint-style config, "
            f"got {type(resource_config).__name__}; or use Endpoint(...)"
        )
    if local:
        return lambda target: target
    if method is not None or path is not None or resource_config._load_balanced:
        raise InvalidEndpointError(
            f"remote: {type(resource_config).__name__} declares HTTP routes, which flashpoint does not serve yet; "
            "declare a queue endpoint with Endpoint(...) instead"
        )
    from flashpoint.endpoint import Endpoint

    options = resource_config.endpoint_options()
    if dependencies is not None:
        options["dependencies"] = dependencies
    if system_dependencies is not None:
        options["system_dependencies"] = system_dependencies
    if not accelerate_downloads:
        options["accelerate_downloads"] = accelerate_downloads
    endpoint: Callable[[Any], Any] = Endpoint(**options)
    return endpoint
