"""Runpod Flash's value types: ``CpuInstanceType``, ``DataCenter``, ``CudaVersion``, ``ServerlessType``,
``NetworkVolume``, ``PodTemplate`` and Flash's constants, with Flash's values.

A leaf of the domain layer (standard library and ``errors`` only): ``spec`` validates ``Endpoint`` options with these,
and ``flashpoint.flash.names`` re-exports them beside Flash's legacy aliases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

__all__ = [
    "CPU_DATACENTERS",
    "DEFAULT_WORKERS_MAX",
    "DEFAULT_WORKERS_MIN",
    "CpuInstanceType",
    "CudaVersion",
    "DataCenter",
    "NetworkVolume",
    "PodTemplate",
    "ServerlessType",
    "cpu_size",
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


def cpu_size(instance: str) -> tuple[int, int]:
    """``(vcpus, memory_gb)`` of a CPU instance type value: ``cpu_size("cpu3c-2-4") == (2, 4)``."""
    instance_type = CpuInstanceType(instance)
    return instance_type.vcpus, instance_type.memory_gb


def cuda_tuple(version: str) -> tuple[int, ...]:
    """A CUDA version as a comparable tuple: ``"12.8"`` -> ``(12, 8)``; ``ValueError`` when it is not one."""
    parts = version.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(part.isdigit() for part in parts):
        raise ValueError(f"not a CUDA version: {version!r} (write it as 12.8)")
    return tuple(int(part) for part in parts)
