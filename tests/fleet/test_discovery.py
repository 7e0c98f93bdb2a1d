"""Tests for flashpoint.fleet.discovery: simulated device specs and NVML discovery."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from flashpoint.errors import ConfigError
from flashpoint.fleet.discovery import discover, nvml_devices, parse_simulated
from flashpoint.fleet.inventory import Device
from flashpoint.gpus import GpuType, model_of


def test_parse_simulated_designs_example() -> None:
    devices = parse_simulated("NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2,NVIDIA L40S:1")

    assert [d.index for d in devices] == [0, 1, 2, 3]
    assert [d.name for d in devices] == ["NVIDIA H200", "NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe", "NVIDIA L40S"]
    assert [d.model.name if d.model else None for d in devices] == [d.name for d in devices]
    assert devices[0].model == model_of(GpuType.NVIDIA_H200)
    assert devices[3].model is not None and devices[3].model.member is None
    assert all(d.simulated for d in devices)
    assert all(d.node == "local" for d in devices)
    assert [d.memory_mb for d in devices] == [141 * 1024, 80 * 1024, 80 * 1024, 48 * 1024]
    assert [d.uuid for d in devices] == ["SIM-local-0", "SIM-local-1", "SIM-local-2", "SIM-local-3"]


def test_parse_simulated_devices_are_recognised_by_identify() -> None:
    from flashpoint.gpus import identify

    for device in parse_simulated("H200:1,a100 80gb pcie:1,L40:1,RTX 6000 Ada:1,NVIDIA_B200:1"):
        assert identify(device.name, device.memory_mb) == device.model


def test_parse_simulated_tolerates_whitespace_and_empty_entries() -> None:
    devices = parse_simulated("  H200 : 2 ,, NVIDIA A100-SXM4-80GB:1 ,", node="node-a")
    assert [(d.name, d.index, d.uuid) for d in devices] == [
        ("NVIDIA H200", 0, "SIM-node-a-0"),
        ("NVIDIA H200", 1, "SIM-node-a-1"),
        ("NVIDIA A100-SXM4-80GB", 2, "SIM-node-a-2"),
    ]
    assert all(d.node == "node-a" for d in devices)


@pytest.mark.parametrize("spec", ["", "   ", "\n"])
def test_parse_simulated_empty_spec_is_no_devices(spec: str) -> None:
    assert parse_simulated(spec) == []


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("NVIDIA_H200", "no count"),
        ("NVIDIA_H200:1,NVIDIA_A40", "no count"),
        ("NVIDIA_H200:", "not an integer"),
        ("NVIDIA_H200:0", "at least 1"),
        ("NVIDIA_H200:-1", "at least 1"),
        ("NVIDIA_H200:two", "not an integer"),
        ("NVIDIA_H200:1.5", "not an integer"),
        (":2", "no model"),
        ("AMPERE_80:1", "pool"),
        ("GpuGroup.HOPPER_141:1", "pool"),
        ("any:1", "not a device"),
        ("H20:1", "did you mean 'H200'"),
        ("A100:1", "NVIDIA_A100_SXM4_80GB"),
        ("Tesla K80:1", "not one GPU model"),
    ],
)
def test_parse_simulated_rejects_bad_values(spec: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_simulated(spec)
    message = str(info.value)
    assert message.startswith("FLASHPOINT_SIMULATED_GPUS: ")
    assert says in message
    assert "MODEL:COUNT" in message  # every message shows the expected format


def _nvidia_smi_devices() -> list[tuple[int, str]] | None:
    """What nvidia-smi reports, or None when this machine has no NVIDIA driver."""
    if not Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    rows = [line.split(",", 1) for line in out.splitlines() if line.strip()]
    return [(int(index), name.strip()) for index, name in rows]


def test_nvml_devices_matches_the_machine() -> None:
    devices = nvml_devices(node="here")
    expected = _nvidia_smi_devices()
    if expected is None:
        # No driver here (CI, laptops): discovery is empty, not an error.
        assert devices == []
        return
    assert [(d.index, d.name) for d in devices] == expected
    for device in devices:
        assert not device.simulated
        assert device.node == "here"
        assert device.memory_mb > 0
        assert device.uuid.startswith(("GPU-", "MIG-"))


def test_discover_prefers_simulated_devices() -> None:
    devices = discover("NVIDIA_H200:2")
    assert [d.name for d in devices] == ["NVIDIA H200", "NVIDIA H200"]
    assert all(isinstance(d, Device) and d.simulated for d in devices)


@pytest.mark.parametrize("simulated", [None, "", "  "])
def test_discover_without_a_spec_asks_nvml(simulated: str | None) -> None:
    assert discover(simulated) == nvml_devices()


def test_discover_raises_for_a_bad_spec() -> None:
    with pytest.raises(ConfigError, match="FLASHPOINT_SIMULATED_GPUS"):
        discover("H200")
