"""Devices, nodes and their holders: the pure values the fleet index and placement read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from flashpoint.gpus import GPUModel

#: the node label an endpoint's ``datacenter=`` is matched against (Ray node labels; fleet files; FLASHPOINT_DATACENTER)
DATACENTER_LABEL = "datacenter"


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


@dataclass(frozen=True, slots=True, eq=True)
class Node:
    """One machine of the fleet: what CPU workers may reserve on it, its driver's CUDA version and its labels.

    Capacity is logical, as in Ray: by default what the machine has, or what was declared (``FLASHPOINT_CPUS``,
    ``FLASHPOINT_MEMORY_GB``, a fleet file's ``cpus``/``memory_gb``, a Ray node's resources). A node nobody
    described (a device list without node facts) has no CPU capacity and an unknown CUDA version.
    """

    name: str
    #: logical CPUs that CPU workers may reserve
    cpus: int = 0
    #: memory that CPU workers may reserve, in MiB
    memory_mb: int = 0
    #: the driver's CUDA version ("12.8"); None when unknown (no NVML, a node without a cuda-version label)
    cuda: str | None = None
    #: node labels, e.g. {"datacenter": "EU-RO-1"}; never hashed (a node is compared, not used as a key)
    labels: Mapping[str, str] = field(default_factory=dict)
    #: the core ids CPU workers on it are pinned to, in the order they are handed out; empty means 0 .. cpus-1
    cores: tuple[int, ...] = ()
    #: True when the node comes from a simulated fleet (its GPUs and CUDA version are declared, not read)
    simulated: bool = False

    __hash__ = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.cpus < 0 or self.memory_mb < 0:
            raise ValueError(f"node {self.name}: CPUs and memory cannot be negative")
        if self.cores and len(self.cores) != self.cpus:
            raise ValueError(f"node {self.name} has {self.cpus} CPUs but {len(self.cores)} core ids")

    @property
    def datacenter(self) -> str | None:
        """The node's ``datacenter`` label, or None."""
        return self.labels.get(DATACENTER_LABEL) or None

    @property
    def core_ids(self) -> tuple[int, ...]:
        """Its ``cpus`` core ids, in the order workers get them."""
        return self.cores if self.cores else tuple(range(self.cpus))

    def to_json(self) -> dict[str, Any]:
        """The node as ``GET /v1/fleet`` shows it (without its reservations)."""
        return {
            "name": self.name,
            "cpus": self.cpus,
            "memoryGb": gigabytes(self.memory_mb),
            "cuda": self.cuda,
            "labels": dict(self.labels),
            "simulated": self.simulated,
        }


def gigabytes(memory_mb: int) -> float:
    """MiB as GB for people: one decimal at most (23.5, 16.0)."""
    return round(memory_mb / 1024, 1)


def show_gb(memory_mb: int) -> str:
    """``16 GB``, ``23.5 GB``."""
    return f"{gigabytes(memory_mb):g} GB"


@dataclass(frozen=True, slots=True)
class Fleet:
    """The fleet a backend places workers on: its GPUs in fleet order, and its nodes (GPU nodes and CPU-only ones)
    in fleet order. Build it with ``Fleet.of``, which describes every node a device names.

    ``away`` says, in words, why nodes that are not in it are not (``(name, why)``: a Ray node whose raylet stopped
    answering, one Ray declared dead); a node that left without a word is simply absent."""

    devices: tuple[Device, ...] = ()
    nodes: tuple[Node, ...] = ()
    away: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(
        cls, devices: Iterable[Device] = (), nodes: Iterable[Node] = (), away: Iterable[tuple[str, str]] = ()
    ) -> Fleet:
        """``devices`` and ``nodes``, plus a bare ``Node`` (no CPU capacity, unknown CUDA) for each node a device
        names that ``nodes`` does not describe, after the described ones, in device order; ``away``, why absent
        nodes are absent.

        Raises:
            ValueError: a node is described twice.
        """
        described = tuple(nodes)
        names = {n.name for n in described}
        if len(names) != len(described):
            raise ValueError("the fleet describes a node twice")
        devices = tuple(devices)
        bare: dict[str, Node] = {}
        for device in devices:
            if device.node not in names and device.node not in bare:
                bare[device.node] = Node(device.node, simulated=device.simulated)
        return cls(devices, described + tuple(bare.values()), tuple(away))


def nodes_summary(nodes: Sequence[Node]) -> str:
    """The nodes' CPU capacity and labels in one line: ``node-a: 2 vCPUs, 23.5 GB, CUDA 12.8, datacenter=EU-RO-1``."""
    if not nodes:
        return "no nodes"
    parts = []
    for node in nodes:
        facts = [f"{node.cpus} vCPUs", show_gb(node.memory_mb), f"CUDA {node.cuda}" if node.cuda else "CUDA unknown"]
        facts.extend(f"{k}={v}" for k, v in node.labels.items())
        parts.append(f"{node.name}: {', '.join(facts)}{' (simulated)' if node.simulated else ''}")
    return "; ".join(parts)


class Holder(NamedTuple):
    """Who holds a device: a worker of an endpoint. Whether it may give the device up is decided by the caller of
    ``placement.place`` at decision time (its ``yieldable`` predicate), not stored here.

    A named tuple, not a dataclass: placement hashes holders on its reclaim path, and a tuple's hash is C code.
    """

    worker_id: str
    endpoint: str
