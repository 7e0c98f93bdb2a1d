"""Runpod Flash's public names that are not flashpoint's own: its value types, constants and legacy aliases.

Everything in ``runpod_flash.__all__`` (runpod-flash 1.21) imports from ``flashpoint`` with Flash's values. The value
types and constants (``CpuInstanceType``, ``DataCenter``, ``CPU_DATACENTERS``, ``CudaVersion``, ``ServerlessType``,
``NetworkVolume``, ``PodTemplate``, ``DEFAULT_WORKERS_MIN/MAX``) live in ``flashpoint.flashtypes`` and are
re-exported here; ``GpuType``/``GpuGroup`` live in ``flashpoint.gpus`` and ``ServerlessScalerType`` in
``flashpoint.spec``. The legacy ``remote`` decorator and the ``Live*``/``*Serverless*``/``*LoadBalancer*`` resource
classes are thin deprecated aliases: each warns once per process (``DeprecationWarning``) when first used, then
behaves as ``Endpoint``. ``FlashApp`` and ``ResourceManager`` manage apps and resources in Runpod's cloud; they
import, and say so when constructed.

This module stays light: it imports nothing beyond the standard library and flashpoint's SDK layer.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar, Final

from flashpoint.errors import InvalidEndpointError
from flashpoint.flashtypes import (
    CPU_DATACENTERS,
    DEFAULT_WORKERS_MAX,
    DEFAULT_WORKERS_MIN,
    CpuInstanceType,
    CudaVersion,
    DataCenter,
    NetworkVolume,
    PodTemplate,
    ServerlessType,
)

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
            "`flashpoint explain` and `flashpoint gpus` show its endpoints and their workers"
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
    from flashpoint.sdk.endpoint import Endpoint

    options = resource_config.endpoint_options()
    if dependencies is not None:
        options["dependencies"] = dependencies
    if system_dependencies is not None:
        options["system_dependencies"] = system_dependencies
    if not accelerate_downloads:
        options["accelerate_downloads"] = accelerate_downloads
    endpoint: Callable[[Any], Any] = Endpoint(**options)
    return endpoint
