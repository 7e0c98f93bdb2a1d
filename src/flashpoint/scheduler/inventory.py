"""Devices and their holders: the pure values the fleet index and placement read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

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
    #: True when the model was inferred from a coarse name (Ray's accelerator type, e.g. "A100") rather than read
    #: from the node's exact ``gpu-model`` label: explanations say so
    coarse: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.node, self.index)

    @property
    def model_name(self) -> str:
        return self.model.name if self.model is not None else self.name

    def to_json(self) -> dict[str, Any]:
        """The device as ``GET /v1/fleet`` shows it (without its holder)."""
        model = self.model
        return {
            "node": self.node,
            "index": self.index,
            "name": self.name,
            "model": self.model_name,
            "pool": model.pool.value if model is not None and model.pool is not None else None,
            "vramGb": model.vram_gb if model is not None else round(self.memory_mb / 1024),
            "recognised": model is not None,
            "simulated": self.simulated,
            "coarse": self.coarse,
        }


def fleet_summary(devices: Sequence[Device]) -> str:
    """The fleet in one line, as explanations word it: ``2 x NVIDIA H200 (simulated) on node-a, ...``."""
    if not devices:
        return "no GPUs (set FLASHPOINT_SIMULATED_GPUS=NVIDIA_H200:1 to simulate some)"
    counts: dict[tuple[str, str, bool, bool], int] = {}
    for d in devices:
        key = (d.node, d.model_name, d.simulated, d.coarse)
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(
        f"{n} x {model}{' (simulated)' if simulated else ''}"
        f"{' (coarse: Ray accelerator type, no gpu-model label)' if coarse else ''} on {node}"
        for (node, model, simulated, coarse), n in counts.items()
    )


class Holder(NamedTuple):
    """Who holds a device: a worker of an endpoint. Whether it may give the device up is decided by the caller of
    ``placement.place`` at decision time (its ``yieldable`` predicate), not stored here.

    A named tuple, not a dataclass: placement hashes holders on its reclaim path, and a tuple's hash is C code.
    """

    worker_id: str
    endpoint: str
