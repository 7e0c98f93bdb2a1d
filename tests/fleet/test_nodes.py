"""This machine as a node (flashpoint.fleet.discovery): logical CPUs and memory (what it has, or FLASHPOINT_CPUS and
FLASHPOINT_MEMORY_GB), FLASHPOINT_DATACENTER, the driver's CUDA version; the settings' checks; the fleets discovered."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flashpoint.config import DEFAULT_SIMULATED_CUDA, Settings
from flashpoint.errors import ConfigError
from flashpoint.fleet.discovery import (
    cuda_text,
    discover_fleet,
    host_node,
    machine_cores,
    machine_memory_mb,
    nvml_cuda_version,
    nvml_devices,
)

GB = 1024


def settings(**env: str) -> Settings:
    return Settings.load({"FLASHPOINT_NODE": "here", **env})


# --- settings --------------------------------------------------------------------------------------------------------


def test_node_settings_default_to_what_the_machine_has() -> None:
    loaded = settings()
    assert (loaded.cpus, loaded.memory_gb, loaded.datacenter, loaded.simulated_cuda) == (
        None,
        None,
        None,
        DEFAULT_SIMULATED_CUDA,
    )


def test_node_settings_are_read() -> None:
    loaded = settings(
        FLASHPOINT_CPUS=" 8 ",
        FLASHPOINT_MEMORY_GB="15.5",
        FLASHPOINT_DATACENTER="EU-RO-1",
        FLASHPOINT_SIMULATED_CUDA="12.4",
    )
    assert (loaded.cpus, loaded.memory_gb, loaded.datacenter, loaded.simulated_cuda) == (8, 15.5, "EU-RO-1", "12.4")


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("FLASHPOINT_CPUS", "abc", "FLASHPOINT_CPUS must be a whole number of logical CPUs"),
        ("FLASHPOINT_CPUS", "2.5", "e.g. 8; got '2.5'"),
        ("FLASHPOINT_CPUS", "-1", "got '-1'"),
        ("FLASHPOINT_CPUS", "²", "got '²'"),
        ("FLASHPOINT_MEMORY_GB", "lots", "FLASHPOINT_MEMORY_GB must be the GB of memory"),
        ("FLASHPOINT_MEMORY_GB", "-4", "got '-4'"),
        ("FLASHPOINT_MEMORY_GB", "inf", "got 'inf'"),
        ("FLASHPOINT_MEMORY_GB", "nan", "got 'nan'"),
        ("FLASHPOINT_DATACENTER", "eu ro 1", "FLASHPOINT_DATACENTER must be a label"),
        ("FLASHPOINT_DATACENTER", "-EU", "starting and ending with a letter or digit"),
        ("FLASHPOINT_DATACENTER", "a=b", "got 'a=b'"),
        ("FLASHPOINT_SIMULATED_CUDA", "twelve", "FLASHPOINT_SIMULATED_CUDA must be a CUDA version, e.g. 12.8"),
        ("FLASHPOINT_SIMULATED_CUDA", "12.8.1.4", "got '12.8.1.4'"),
    ],
)
def test_bad_node_settings_say_what_to_write(name: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        settings(**{name: value})


# --- this machine as a node ------------------------------------------------------------------------------------------


def test_by_default_the_node_has_the_cpus_it_may_run_on_and_its_memory() -> None:
    node = host_node(settings(), cuda=None)

    assert node.name == "here"
    assert node.cores == tuple(sorted(os.sched_getaffinity(0)))
    assert node.cpus == len(node.cores) == len(machine_cores())
    assert node.memory_mb == machine_memory_mb() > 0
    assert node.cuda is None and node.labels == {} and not node.simulated


def test_declared_cpus_take_the_first_cores_and_past_those_ids_the_machine_lacks() -> None:
    cores = machine_cores()

    fewer = host_node(settings(FLASHPOINT_CPUS="1"), cuda=None)
    assert (fewer.cpus, fewer.cores) == (1, cores[:1])

    more = host_node(settings(FLASHPOINT_CPUS=str(len(cores) + 2)), cuda=None)
    assert more.cpus == len(cores) + 2
    assert more.cores[: len(cores)] == cores
    assert more.cores[len(cores) :] == (max(cores) + 1, max(cores) + 2)  # a worker given these is not pinned to them

    none = host_node(settings(FLASHPOINT_CPUS="0"), cuda=None)
    assert (none.cpus, none.cores) == (0, ())


def test_declared_memory_and_datacenter() -> None:
    node = host_node(settings(FLASHPOINT_MEMORY_GB="15.5", FLASHPOINT_DATACENTER="EU-RO-1"), cuda="12.8")
    assert (node.memory_mb, node.datacenter, node.cuda) == (round(15.5 * GB), "EU-RO-1", "12.8")


@pytest.mark.parametrize(("version", "text"), [(12080, "12.8"), (11040, "11.4"), (12000, "12.0"), (13010, "13.1")])
def test_nvml_cuda_versions_read_as_major_minor(version: int, text: str) -> None:
    assert cuda_text(version) == text


def _nvidia_smi_cuda() -> str | None:
    """The CUDA version nvidia-smi prints in its header, or None when this machine has no NVIDIA driver."""
    if not Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, check=True, timeout=60).stdout
    found = re.search(r"CUDA Version:\s*([0-9.]+)", out)
    return found.group(1) if found else None


def test_nvml_cuda_version_matches_the_driver() -> None:
    # no driver here (CI, laptops): unknown, not an error
    assert nvml_cuda_version() == _nvidia_smi_cuda()


# --- fleets ----------------------------------------------------------------------------------------------------------


def test_this_machine_is_a_node_even_without_gpus() -> None:
    fleet = discover_fleet(settings(FLASHPOINT_CPUS="2", FLASHPOINT_MEMORY_GB="4", FLASHPOINT_DATACENTER="dc-1"))

    assert list(fleet.devices) == nvml_devices(node="here")
    (node,) = fleet.nodes
    assert (node.name, node.cpus, node.memory_mb, node.datacenter, node.cuda, node.simulated) == (
        "here",
        2,
        4 * GB,
        "dc-1",
        nvml_cuda_version(),
        False,
    )


def test_simulated_nodes_take_this_machines_facts_and_the_simulated_cuda_version() -> None:
    fleet = discover_fleet(
        settings(FLASHPOINT_CPUS="2", FLASHPOINT_MEMORY_GB="4", FLASHPOINT_SIMULATED_CUDA="12.4"),
        "a=NVIDIA_H200:1;b*2=NVIDIA_L40S:1",
    )

    assert [(n.name, n.cpus, n.memory_mb, n.cuda, n.simulated) for n in fleet.nodes] == [
        ("a", 2, 4 * GB, "12.4", True),
        ("b-0", 2, 4 * GB, "12.4", True),
        ("b-1", 2, 4 * GB, "12.4", True),
    ]
    single = discover_fleet(settings(FLASHPOINT_DATACENTER="EU-RO-1"), "NVIDIA_H200:1")
    assert [(n.name, n.datacenter, n.cuda) for n in single.nodes] == [("here", "EU-RO-1", DEFAULT_SIMULATED_CUDA)]
