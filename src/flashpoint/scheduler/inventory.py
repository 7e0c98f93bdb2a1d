"""Devices and fleet snapshots: the pure values that placement reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from flashpoint.gpus import GPUModel


@dataclass(frozen=True, slots=True)
class Device:
    """One physical (or simulated) GPU on one node."""

    node: str
    #: index as CUDA_VISIBLE_DEVICES sees it on that node
    index: int
    #: the name NVML reports, e.g. "NVIDIA H200"
    name: str
    #: the catalog model, or None when the device matches no known model (ANY may still use it)
    model: GPUModel | None
    memory_mb: int
    #: True for devices declared through FLASHPOINT_SIMULATED_GPUS: the only fake in flashpoint
    simulated: bool
    uuid: str = ""

    @property
    def key(self) -> tuple[str, int]:
        return (self.node, self.index)

    @property
    def model_name(self) -> str:
        return self.model.name if self.model is not None else self.name


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a device: a worker of an endpoint."""

    worker_id: str
    endpoint: str
    #: an idle worker above its endpoint's minimum may be asked to give its devices up
    yieldable: bool = False


@dataclass(frozen=True, slots=True)
class Inventory:
    """A snapshot of the fleet: every device, in fleet order, and who holds it."""

    devices: tuple[Device, ...]
    holders: dict[tuple[str, int], Holder] = field(default_factory=dict)

    def holder(self, device: Device) -> Holder | None:
        return self.holders.get(device.key)

    def is_free(self, device: Device) -> bool:
        return device.key not in self.holders
