"""Ray backend: the fleet as Ray's nodes describe it. The labels ``ray start`` gives a node (``flashpoint ray-flags``),
and the devices and nodes read back from ``ray.nodes()``. Pure: Ray itself is not imported here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flashpoint.errors import ConfigError
from flashpoint.fleet.inventory import DATACENTER_LABEL, Device, Node
from flashpoint.gpus import gpu_model_label, identify, identify_label

__all__ = [
    "CUDA_LABEL",
    "GPU_MODEL_LABEL",
    "NODE_ID_LABEL",
    "SIMULATED_LABEL",
    "devices_from_nodes",
    "node_labels",
    "node_name",
    "nodes_from_ray",
    "start_flags",
]

#: the node label holding the exact GPU model, e.g. "NVIDIA-H200"
GPU_MODEL_LABEL = "gpu-model"
#: "1" on a node whose GPUs are simulated (declared with ``ray start --num-gpus``, no real device behind them)
SIMULATED_LABEL = "flashpoint-simulated"
#: the node label holding the driver's CUDA version, e.g. "12.8" (NVML's, or FLASHPOINT_SIMULATED_CUDA)
CUDA_LABEL = "cuda-version"
#: labels flashpoint reads for itself, not shown among a node's labels
_OWN_LABELS = frozenset({GPU_MODEL_LABEL, SIMULATED_LABEL, CUDA_LABEL})
_MIB = 1024 * 1024
#: Ray's own label holding a node's id, which pins an actor to the node placement chose
NODE_ID_LABEL = "ray.io/node-id"
_ACCELERATOR_LABEL = "ray.io/accelerator-type"
_ACCELERATOR_RESOURCE = "accelerator_type:"


def node_labels(devices: Sequence[Device], node: Node | None = None) -> dict[str, str]:
    """The labels that describe a node with these devices (and, given ``node``, its CUDA version and datacenter) to
    flashpoint's Ray backend.

    Raises:
        ConfigError: no devices and nothing else to say, or devices of more than one model (a Ray label names one
            model per node).
    """
    extra: dict[str, str] = {}
    if node is not None:
        if node.cuda and devices:  # CUDA matters to GPU endpoints only
            extra[CUDA_LABEL] = node.cuda
        if node.datacenter:
            extra[DATACENTER_LABEL] = node.datacenter
    if not devices:
        if extra:
            return extra
        raise ConfigError(
            "this node has no GPUs to label (no NVIDIA driver, and FLASHPOINT_SIMULATED_GPUS is not set); "
            "start it without GPU flags, or simulate some with FLASHPOINT_SIMULATED_GPUS=NVIDIA_H200:1"
        )
    names = sorted({d.name for d in devices})
    if len(names) > 1:
        raise ConfigError(
            f"this node has GPUs of {len(names)} models ({', '.join(names)}), and a Ray node carries one gpu-model "
            "label: start one Ray node per model, each with CUDA_VISIBLE_DEVICES set to that model's devices"
        )
    labels = {GPU_MODEL_LABEL: gpu_model_label(names[0])}
    if any(d.simulated for d in devices):
        labels[SIMULATED_LABEL] = "1"
    return {**labels, **extra}


def start_flags(devices: Sequence[Device], node: Node | None = None, *, declared: bool = False) -> list[str]:
    """The ``ray start`` flags for a node with these devices, e.g. ``--num-gpus=2 --labels=gpu-model=NVIDIA-H200``;
    with ``node``, its CUDA version and datacenter labels too, and (``declared``: FLASHPOINT_CPUS or
    FLASHPOINT_MEMORY_GB set) its logical CPUs and memory, so Ray's accounting is flashpoint's."""
    labels = node_labels(devices, node)
    flags = [f"--num-gpus={len(devices)}"]
    if node is not None and declared:
        flags += [f"--num-cpus={node.cpus}", f"--memory={node.memory_mb * _MIB}"]
    return [*flags, "--labels=" + ",".join(f"{k}={v}" for k, v in labels.items())]


def node_name(node: Mapping[str, Any]) -> str:
    """How placements name a Ray node: its address and the start of its node id, e.g. ``10.0.0.5/67f885db``."""
    return f"{node.get('NodeName') or node.get('NodeManagerAddress') or 'ray'}/{str(node['NodeID'])[:8]}"


def _coarse_type(node: Mapping[str, Any]) -> str | None:
    labels = node.get("Labels") or {}
    if labels.get(_ACCELERATOR_LABEL):
        return str(labels[_ACCELERATOR_LABEL])
    for resource in node.get("Resources") or {}:
        if str(resource).startswith(_ACCELERATOR_RESOURCE):
            return str(resource)[len(_ACCELERATOR_RESOURCE) :]
    return None


def devices_from_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[Device]:
    """The GPUs of the live nodes among ``nodes`` (as ``ray.nodes()`` gives them), in the order given.

    A node's ``GPU`` resource says how many devices it has; its ``gpu-model`` label says which model. A node without
    that label falls back to Ray's coarse accelerator type: the device is marked ``coarse``, and gets a catalog model
    only when the coarse name identifies one ("H200"); an ambiguous one ("A100") stays unrecognised, for ``ANY`` only.
    """
    devices: list[Device] = []
    for node in nodes:
        if not node.get("Alive"):
            continue
        count = int((node.get("Resources") or {}).get("GPU", 0))
        if count < 1:
            continue
        labels = node.get("Labels") or {}
        label = labels.get(GPU_MODEL_LABEL)
        if label:
            model = identify_label(str(label))
            name, coarse = (model.name if model is not None else str(label)), False
        else:
            name = _coarse_type(node) or "unlabelled GPU"
            model, coarse = identify(name), True
        simulated = str(labels.get(SIMULATED_LABEL, "")).lower() in ("1", "true", "yes")
        where = node_name(node)
        for index in range(count):
            devices.append(
                Device(
                    node=where,
                    index=index,
                    name=name,
                    model=model,
                    memory_mb=model.vram_gb * 1024 if model is not None else 0,
                    simulated=simulated,
                    uuid=f"{node['NodeID']}:{index}",
                    coarse=coarse,
                )
            )
    return devices


def nodes_from_ray(nodes: Sequence[Mapping[str, Any]]) -> list[Node]:
    """The live nodes among ``nodes`` (as ``ray.nodes()`` gives them), with or without GPUs, in the order given: their
    ``CPU`` and ``memory`` resources (what CPU workers may reserve), their ``cuda-version`` label (None without one:
    GPU endpoints with ``min_cuda_version`` pass such a node by), and their other labels (``datacenter`` among them;
    Ray's own ``ray.io/`` labels and flashpoint's are left out)."""
    found: list[Node] = []
    for node in nodes:
        if not node.get("Alive"):
            continue
        resources = node.get("Resources") or {}
        labels = {str(k): str(v) for k, v in (node.get("Labels") or {}).items()}
        found.append(
            Node(
                node_name(node),
                cpus=int(resources.get("CPU", 0)),
                memory_mb=int(resources.get("memory", 0)) // _MIB,
                cuda=labels.get(CUDA_LABEL) or None,
                labels={k: v for k, v in labels.items() if not k.startswith("ray.io/") and k not in _OWN_LABELS},
                simulated=labels.get(SIMULATED_LABEL, "").lower() in ("1", "true", "yes"),
            )
        )
    return found
