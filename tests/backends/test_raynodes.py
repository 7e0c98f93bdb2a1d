"""The Ray backend's pure parts: node labels, the fleet read from ``ray.nodes()``, and the coarse fallback.

No Ray needed: ``flashpoint.backends.ray`` imports Ray only inside the functions that talk to a cluster. The cluster
tests are in ``tests/ray/``.
"""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from flashpoint.backends.ray import devices_from_nodes, node_labels, nodes_from_ray, start_flags
from flashpoint.cli import app
from flashpoint.cli.gpus import device_table
from flashpoint.cli.output import device_row
from flashpoint.errors import ConfigError
from flashpoint.fleet.discovery import parse_simulated
from flashpoint.fleet.inventory import Node, fleet_summary
from flashpoint.gpus import MODELS, GpuType, candidates, gpu_model_label, identify_label, model_of
from flashpoint.scheduler.placement.fit import NoFit, place
from flashpoint.scheduler.placement.index import FleetIndex


def node(node_id: str, gpus: int, labels: dict[str, str] | None = None, alive: bool = True, **resources: float) -> Any:
    """A node as ``ray.nodes()`` reports it."""
    return {
        "NodeID": node_id,
        "NodeName": "10.0.0.5",
        "Alive": alive,
        "Resources": {"CPU": 8.0, **({"GPU": float(gpus)} if gpus else {}), **resources},
        "Labels": {"ray.io/node-id": node_id, **(labels or {})},
    }


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_every_catalog_model_round_trips_through_its_label(model: Any) -> None:
    label = gpu_model_label(model.name)
    assert " " not in label and len(label) <= 63
    assert identify_label(label) is model


def test_labels_keep_similar_cards_apart() -> None:
    assert gpu_model_label("NVIDIA A100 80GB PCIe") == "NVIDIA-A100-80GB-PCIe"
    assert gpu_model_label("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert identify_label("NVIDIA-H200-NVL") is None
    assert identify_label("NVIDIA-A100-SXM4-40GB") is None
    assert identify_label("nvidia-h200") is model_of(GpuType.NVIDIA_H200)


def test_start_flags_describe_a_node_from_its_devices() -> None:
    devices = parse_simulated("NVIDIA_A100_80GB_PCIe:2")
    assert start_flags(devices) == ["--num-gpus=2", "--labels=gpu-model=NVIDIA-A100-80GB-PCIe,flashpoint-simulated=1"]
    real = [d.__class__(**{**_fields(d), "simulated": False}) for d in devices]
    assert node_labels(real) == {"gpu-model": "NVIDIA-A100-80GB-PCIe"}


def _fields(device: Any) -> dict[str, Any]:
    return {name: getattr(device, name) for name in device.__slots__}


def test_start_flags_refuse_a_node_of_two_models_or_none() -> None:
    with pytest.raises(ConfigError, match="one Ray node per model"):
        start_flags(parse_simulated("NVIDIA_A100_80GB_PCIe:1,NVIDIA_H200:1"))
    with pytest.raises(ConfigError, match="no GPUs"):
        start_flags([])


def test_ray_flags_command_prints_the_flags() -> None:
    result = CliRunner().invoke(app, ["ray-flags", "--simulated-gpus", "NVIDIA_H200:1"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        "--num-gpus=1 --labels=gpu-model=NVIDIA-H200,flashpoint-simulated=1,cuda-version=12.8"
    )


def test_fleet_from_nodes_reads_count_model_and_simulation_from_labels() -> None:
    devices = devices_from_nodes(
        [
            node("a" * 56, 2, {"gpu-model": "NVIDIA-A100-80GB-PCIe", "flashpoint-simulated": "1"}),
            node("b" * 56, 0),  # the head: no GPUs
            node("c" * 56, 1, {"gpu-model": "NVIDIA-H200"}, alive=False),  # gone
            node("d" * 56, 1, {"gpu-model": "NVIDIA-H200"}),
        ]
    )
    assert [(d.node, d.index, d.name, d.simulated, d.coarse) for d in devices] == [
        ("10.0.0.5/aaaaaaaa", 0, "NVIDIA A100 80GB PCIe", True, False),
        ("10.0.0.5/aaaaaaaa", 1, "NVIDIA A100 80GB PCIe", True, False),
        ("10.0.0.5/dddddddd", 0, "NVIDIA H200", False, False),
    ]
    assert devices[0].model == model_of(GpuType.NVIDIA_A100_80GB_PCIe)
    assert devices[2].model == model_of(GpuType.NVIDIA_H200)


def test_an_unknown_label_is_an_unrecognised_gpu() -> None:
    (device,) = devices_from_nodes([node("e" * 56, 1, {"gpu-model": "NVIDIA-H200-NVL"})])
    assert device.model is None and device.name == "NVIDIA-H200-NVL" and not device.coarse


def test_without_a_label_the_coarse_type_stands_in_and_says_so() -> None:
    unique, ambiguous, bare = (
        devices_from_nodes([n])[0]
        for n in (
            node("f" * 56, 1, **{"accelerator_type:H200": 1.0}),
            node("g" * 56, 1, {"ray.io/accelerator-type": "A100"}),
            node("h" * 56, 1),
        )
    )
    assert unique.coarse and unique.model == model_of(GpuType.NVIDIA_H200)
    assert ambiguous.coarse and ambiguous.model is None and ambiguous.name == "A100"
    assert bare.coarse and bare.model is None and bare.name == "unlabelled GPU"
    assert "coarse: Ray accelerator type, no gpu-model label" in fleet_summary([unique])

    # `flashpoint gpus` says so
    out = Console(width=250, record=True)
    out.print(device_table("GPUs", [device_row(ambiguous)]))
    text = out.export_text()
    assert "A100 - unrecognised (ANY only) (coarse: Ray accelerator type" in text


def test_an_explanation_points_at_a_coarse_node_that_may_have_the_model() -> None:
    devices = devices_from_nodes([node("g" * 56, 2, **{"accelerator_type:A100": 1.0})])
    result = place(candidates(GpuType.NVIDIA_A100_80GB_PCIe), 1, FleetIndex(devices))
    assert isinstance(result, NoFit) and result.never
    (reason,) = result.reasons
    assert reason.code.value == "not_in_fleet"
    assert "10.0.0.5/gggggggg has GPUs Ray only calls by a coarse type" in reason.detail
    assert "flashpoint ray-flags" in reason.detail
    # a model the coarse name cannot be gets no such hint
    other = place(candidates(GpuType.NVIDIA_H200), 1, FleetIndex(devices))
    assert isinstance(other, NoFit) and "coarse" not in other.reasons[0].detail


def test_every_live_node_is_a_node_of_the_fleet_with_its_cpus_memory_cuda_and_labels() -> None:
    nodes = nodes_from_ray(
        [
            node(
                "a" * 56,
                2,
                {
                    "gpu-model": "NVIDIA-H200",
                    "cuda-version": "12.8",
                    "datacenter": "EU-RO-1",
                    "flashpoint-simulated": "1",
                },
                memory=16 * 1024**3 + 5,
            ),
            node("b" * 56, 0, memory=4 * 1024**3),  # the head: no GPUs, no labels of ours
            node("c" * 56, 1, alive=False),
        ]
    )
    assert nodes == [
        Node(
            "10.0.0.5/aaaaaaaa",
            cpus=8,
            memory_mb=16 * 1024,
            cuda="12.8",
            labels={"datacenter": "EU-RO-1"},
            simulated=True,
        ),
        Node("10.0.0.5/bbbbbbbb", cpus=8, memory_mb=4 * 1024, cuda=None, labels={}, simulated=False),
    ]


def test_flags_carry_the_cuda_version_datacenter_and_declared_capacity() -> None:
    devices = parse_simulated("NVIDIA_H200:1")
    here = Node("n", cpus=4, memory_mb=8 * 1024, cuda="12.4", labels={"datacenter": "EU-RO-1"})

    assert start_flags(devices, here) == [
        "--num-gpus=1",
        "--labels=gpu-model=NVIDIA-H200,flashpoint-simulated=1,cuda-version=12.4,datacenter=EU-RO-1",
    ]
    assert start_flags(devices, here, declared=True)[:3] == ["--num-gpus=1", "--num-cpus=4", f"--memory={8 * 1024**3}"]
    # a CPU-only node in a datacenter still has something to say; its CUDA version matters to no endpoint
    assert node_labels([], here) == {"datacenter": "EU-RO-1"}


def test_ray_flags_command_reads_the_declared_node() -> None:
    env = {"FLASHPOINT_CPUS": "2", "FLASHPOINT_MEMORY_GB": "1", "FLASHPOINT_DATACENTER": "dc-1"}
    result = CliRunner().invoke(app, ["ray-flags", "--simulated-gpus", "NVIDIA_H200:1"], env=env)
    assert result.exit_code == 0, result.output
    assert result.output.split() == [
        "--num-gpus=1",
        "--num-cpus=2",
        f"--memory={1024**3}",
        "--labels=gpu-model=NVIDIA-H200,flashpoint-simulated=1,cuda-version=12.8,datacenter=dc-1",
    ]
