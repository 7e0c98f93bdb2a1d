"""Simulated fleets of many nodes (fleet.simulated): the one-line syntax, fleet files, the benchmark's fleet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flashpoint.config import Settings
from flashpoint.errors import ConfigError
from flashpoint.fleet.discovery import discover
from flashpoint.fleet.inventory import Node
from flashpoint.fleet.simulated import (
    NO_HOST,
    SimulatedFleet,
    bench_fleet,
    is_file_reference,
    load_fleet,
    parse_fleet,
    parse_simulated,
    read_fleet,
)
from flashpoint.gpus import MODELS, GpuType, model_of


def shape(fleet: SimulatedFleet) -> list[tuple[str, int, str]]:
    return [(d.node, d.index, d.name) for d in fleet.devices]


H200, PCIE, L40S = "NVIDIA H200", "NVIDIA A100 80GB PCIe", "NVIDIA L40S"


# ----------------------------------------------------------------------------------------------------------------
# the one-line syntax


def test_a_plain_model_count_list_is_still_one_node() -> None:
    fleet = parse_fleet("NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2", node="node-a")

    assert list(fleet.devices) == parse_simulated("NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2", node="node-a")
    assert fleet.nodes == ("node-a",)
    assert fleet.labels == {}


@pytest.mark.parametrize(
    ("text", "devices"),
    [
        ("a=NVIDIA_H200:1", [("a", 0, H200)]),
        (
            "rack1-a=NVIDIA_H200:2;rack1-b=NVIDIA_A100_80GB_PCIe:1,NVIDIA L40S:1",
            [("rack1-a", 0, H200), ("rack1-a", 1, H200), ("rack1-b", 0, PCIE), ("rack1-b", 1, L40S)],
        ),
        # whitespace, empty parts and a trailing ';' are tolerated; short and NVML names work as in the one-node form
        (" a = H200 : 1 ;; b=a100 80gb pcie:1 ; ", [("a", 0, H200), ("b", 0, PCIE)]),
        # NAME*N is N nodes NAME-0 .. NAME-<N-1>, each with the GPUs written, numbered from 0 on each node
        ("b*3=L40S:1", [("b-0", 0, L40S), ("b-1", 0, L40S), ("b-2", 0, L40S)]),
        ("b*1=L40S:1", [("b", 0, L40S)]),
        ("n.1_x=H200:1", [("n.1_x", 0, H200)]),
    ],
)
def test_several_named_nodes_in_one_line(text: str, devices: list[tuple[str, int, str]]) -> None:
    fleet = parse_fleet(text, node="ignored")

    assert shape(fleet) == devices
    assert all(d.simulated for d in fleet.devices)
    assert all(d.uuid == f"SIM-{d.node}-{d.index}" for d in fleet.devices)
    assert "ignored" not in fleet.nodes


def test_repeated_node_names_are_zero_padded_so_they_sort_in_order() -> None:
    fleet = parse_fleet("r*12=H200:1")

    assert fleet.nodes == tuple(f"r-{i:02d}" for i in range(12))
    assert list(fleet.nodes) == sorted(fleet.nodes)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a=H20:1", "node 'a': entry 'H20:1': 'H20' is not one GPU model; did you mean 'H200'?"),
        ("a=H200:1;a=L40S:1", "node name 'a' is taken already"),
        ("b*3=H200:1;b-1=L40S:1", "node name 'b-1' is taken already"),
        ("a=H200:1;L40S:1", "part 'L40S:1' names no node"),
        ("H200:1;L40S:1", "part 'H200:1' names no node; write NODE=MODEL:COUNT, e.g. 'node-b=H200:1'"),
        ("a=;b=H200:1", "node 'a' has no GPUs"),
        ("a*0=H200:1", "repeat count after '*' must be at least 1, got 0"),
        ("a*x=H200:1", "repeat count after '*' 'x' is not an integer"),
        ("a=H200:0", "count must be at least 1, got 0"),
        ("a=H200", "entry 'H200' has no count"),
        ("a=AMPERE_80:1", "AMPERE_80 is a pool"),
        ("a b=H200:1", "node name 'a b' must be letters, digits"),
        ("=H200:1", "node name '' must be"),
    ],
)
def test_bad_one_line_fleets_say_what_to_write(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_fleet(text, where="--fleet")

    message = str(info.value)
    assert message.startswith("--fleet: ")
    assert says in message
    assert "NODE=MODEL:COUNT" in message  # the expected format, every time


def test_errors_name_the_variable_by_default() -> None:
    with pytest.raises(ConfigError, match=r"^FLASHPOINT_SIMULATED_GPUS: .*did you mean 'H200'"):
        parse_fleet("H20:1")


# ----------------------------------------------------------------------------------------------------------------
# fleet files

GOOD_FILE = """
    [[node]]
    name = "rack1-a"
    gpus = { NVIDIA_H200 = 2 }
    labels = { zone = "eu-1", rack = "1" }

    [[node]]
    name = "rack1-b"
    gpus = "NVIDIA_A100_80GB_PCIe:1,NVIDIA L40S:1"
    count = 2

    [[node]]
    name = "solo"
    gpus = { "NVIDIA L40S" = 1, H200 = 1 }
    count = 1
"""


def write(tmp_path: Path, text: str, name: str = "fleet.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_fleet_file_describes_nodes_models_counts_and_labels(tmp_path: Path) -> None:
    fleet = load_fleet(write(tmp_path, GOOD_FILE))

    assert shape(fleet) == [
        ("rack1-a", 0, H200),
        ("rack1-a", 1, H200),
        ("rack1-b-0", 0, PCIE),
        ("rack1-b-0", 1, L40S),
        ("rack1-b-1", 0, PCIE),
        ("rack1-b-1", 1, L40S),
        ("solo", 0, L40S),
        ("solo", 1, H200),
    ]
    assert fleet.nodes == ("rack1-a", "rack1-b-0", "rack1-b-1", "solo")
    assert fleet.labels == {"rack1-a": {"zone": "eu-1", "rack": "1"}}
    assert all(d.simulated for d in fleet.devices)
    assert fleet.devices[0].model == model_of(GpuType.NVIDIA_H200)
    assert fleet.devices[0].memory_mb == 141 * 1024


NODES_FILE = """
    [[node]]
    name = "gpu-box"
    gpus = { H200 = 1 }
    cpus = 32
    memory_gb = 256
    cuda = "12.4"
    labels = { datacenter = "EU-RO-1" }

    [[node]]
    name = "cpu-box"
    cpus = 8
    count = 2

    [[node]]
    name = "plain"
    gpus = { L40S = 1 }
"""

HOST = Node("", cpus=2, memory_mb=4 * 1024, cuda="12.8", labels={"datacenter": "US-KS-2", "rack": "7"}, cores=(3, 5))


def test_fleet_file_nodes_declare_cpus_memory_cuda_and_labels_and_take_the_rest_from_the_host(tmp_path: Path) -> None:
    fleet = load_fleet(write(tmp_path, NODES_FILE), host=HOST)

    facts = [(n.name, n.cpus, n.memory_mb, n.cuda, dict(n.labels), n.cores, n.simulated) for n in fleet.node_facts]
    assert facts == [
        ("gpu-box", 32, 256 * 1024, "12.4", {"datacenter": "EU-RO-1", "rack": "7"}, (), True),
        ("cpu-box-0", 8, 4 * 1024, "12.8", {"datacenter": "US-KS-2", "rack": "7"}, (), True),
        ("cpu-box-1", 8, 4 * 1024, "12.8", {"datacenter": "US-KS-2", "rack": "7"}, (), True),
        # declares nothing: this machine's CPUs, with its own core ids
        ("plain", 2, 4 * 1024, "12.8", {"datacenter": "US-KS-2", "rack": "7"}, (3, 5), True),
    ]
    # CPU-only nodes are nodes of the fleet, without devices
    assert fleet.nodes == ("gpu-box", "cpu-box-0", "cpu-box-1", "plain")
    assert [d.node for d in fleet.devices] == ["gpu-box", "plain"]
    assert [n.name for n in fleet.fleet.nodes] == list(fleet.nodes)
    # the labels the file declares are what the what-if shows
    assert fleet.labels == {"gpu-box": {"datacenter": "EU-RO-1"}}


def test_one_line_nodes_are_all_like_the_host() -> None:
    fleet = parse_fleet("a=H200:1;b*2=L40S:1", host=HOST)
    assert [(n.name, n.cpus, n.cuda, n.datacenter) for n in fleet.node_facts] == [
        ("a", 2, "12.8", "US-KS-2"),
        ("b-0", 2, "12.8", "US-KS-2"),
        ("b-1", 2, "12.8", "US-KS-2"),
    ]
    (single,) = parse_fleet("H200:1", node="here", host=HOST).node_facts
    assert single.name == "here" and single.simulated


def test_without_a_host_nodes_have_no_cpu_capacity_and_the_default_cuda_version() -> None:
    (node,) = parse_fleet("a=H200:1").node_facts
    assert (node.cpus, node.memory_mb, node.cuda) == (0, 0, NO_HOST.cuda)


def test_labels_of_a_counted_node_go_to_every_node_it_makes(tmp_path: Path) -> None:
    fleet = load_fleet(write(tmp_path, '[[node]]\nname = "r"\ngpus = { H200 = 1 }\ncount = 2\nlabels = { z = "a" }\n'))

    assert fleet.labels == {"r-0": {"z": "a"}, "r-1": {"z": "a"}}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[[node]]\nname = "a"\ngpus = { H200 = 2 \n', "not valid TOML: Unclosed inline table (at line 3"),
        ('[[node]]\nname = "a"\ngpu = { H200 = 2 }\n', "node 1 ('a'): unknown key 'gpu'; did you mean 'gpus'?"),
        ('[[node]]\nname = "a"\n', "node 1 ('a') has no gpus"),
        ("[[node]]\ngpus = { H200 = 2 }\n", "node 1 has no name"),
        (
            '[[node]]\nname = "a"\ngpus = { H20 = 2 }\n',
            "gpus: 'H20' = 2: 'H20' is not one GPU model; did you mean 'H200'",
        ),
        ('[[node]]\nname = "a"\ngpus = { H200 = 0 }\n', "count must be at least 1, got 0"),
        ('[[node]]\nname = "a"\ngpus = { H200 = "2" }\n', "count '2' is not an integer"),
        ('[[node]]\nname = "a"\ngpus = { H200 = true }\n', "count True is not an integer"),
        ('[[node]]\nname = "a"\ngpus = {}\n', "gpus is empty"),
        ('[[node]]\nname = "a"\ngpus = 3\n', "gpus must be a table"),
        ('[[node]]\nname = "a"\ngpus = "H200"\n', "entry 'H200' has no count"),
        ('[[node]]\nname = "a"\ngpus = { H200 = 1 }\ncount = 0\n', "node 1 ('a'): count must be at least 1, got 0"),
        ('[[node]]\nname = "a"\ngpus = { H200 = 1 }\nlabels = { z = 1 }\n', "label 'z' must be a string"),
        ('[[node]]\nname = "a"\ngpus = { H200 = 1 }\nlabels = "z"\n', "labels must be a table of strings"),
        ('[[node]]\nname = "a"\n', "has no gpus and no cpus; add gpus = { NVIDIA_H200 = 8 }, or cpus = N"),
        ('[[node]]\nname = "a"\ncpus = -1\n', "node 1 ('a'): cpus must be a whole number of logical CPUs"),
        ('[[node]]\nname = "a"\ncpus = "4"\n', "cpus must be a whole number of logical CPUs, e.g. cpus = 32; got '4'"),
        ('[[node]]\nname = "a"\ncpus = 2.5\n', "got 2.5"),
        ('[[node]]\nname = "a"\ncpus = true\n', "got True"),
        ('[[node]]\nname = "a"\ncpus = 2\nmemory_gb = "lots"\n', "memory_gb must be a number of GB"),
        ('[[node]]\nname = "a"\ncpus = 2\nmemory_gb = -1\n', "memory_gb must be a number of GB"),
        ('[[node]]\nname = "a"\ncpus = 2\nmemory_gb = nan\n', "memory_gb must be a number of GB"),
        (
            '[[node]]\nname = "a"\ngpus = { H200 = 1 }\ncuda = 12.8\n',
            'cuda must be a quoted version, e.g. cuda = "12.8"',
        ),
        ('[[node]]\nname = "a"\ngpus = { H200 = 1 }\ncuda = "new"\n', "cuda must be a CUDA version"),
        ('[[node]]\nname = "a"\ngpus = { H200 = 1 }\ncpu = 2\n', "unknown key 'cpu'; did you mean 'cpus'?"),
        (
            '[[node]]\nname = "a"\ngpus = { H200 = 1 }\n[[node]]\nname = "a"\ngpus = { L40S = 1 }\n',
            "node 2 ('a'): node name 'a' is taken already (node 1 ('a'))",
        ),
        (
            '[[node]]\nname = "r"\ngpus = { H200 = 1 }\ncount = 2\n[[node]]\nname = "r-1"\ngpus = { L40S = 1 }\n',
            "node name 'r-1' is taken already",
        ),
        ('[[node]]\nname = "a/b"\ngpus = { H200 = 1 }\n', "node name 'a/b' must be letters"),
        ("", "declares no node"),
        ('name = "a"\n', "unknown top-level key 'name'"),
        ("node = 3\n", "declares no node"),
    ],
)
def test_bad_fleet_files_say_what_to_write(tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path, text)

    with pytest.raises(ConfigError) as info:
        load_fleet(path)

    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert says in message
    assert "[[node]]" in message  # the expected shape, every time


def test_a_missing_fleet_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such fleet file: .*nowhere.toml"):
        load_fleet(tmp_path / "nowhere.toml")


# ----------------------------------------------------------------------------------------------------------------
# which form a value is, and discover()


@pytest.mark.parametrize(
    ("value", "is_file"),
    [
        ("@fleet.toml", True),
        ("@fleets/any-name", True),
        ("a/b/fleet.TOML", True),
        ("H200:1", False),
        ("a=H200:1", False),
    ],
)
def test_file_references(value: str, is_file: bool) -> None:
    assert is_file_reference(value) is is_file


def test_read_fleet_reads_files_by_at_or_by_suffix(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD_FILE, name="fleet.cfg")
    toml = write(tmp_path, GOOD_FILE)

    assert read_fleet(f"@{path}") == load_fleet(path)
    assert read_fleet(f" {toml} ") == load_fleet(toml)
    assert shape(read_fleet("a=H200:1")) == [("a", 0, H200)]
    assert shape(read_fleet("H200:1", node="here")) == [("here", 0, H200)]


def test_discover_takes_a_multi_node_fleet_from_the_variable_or_a_file(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD_FILE)
    settings = Settings.load(env={"FLASHPOINT_SIMULATED_GPUS": f"@{path}", "FLASHPOINT_NODE": "node-a"})

    from_file = discover(settings.simulated_gpus, node=settings.node)
    from_line = discover("x=H200:1;y*2=L40S:2", node="node-a")

    assert from_file == list(load_fleet(path).devices)
    assert [(d.node, d.index) for d in from_line] == [("x", 0), ("y-0", 0), ("y-0", 1), ("y-1", 0), ("y-1", 1)]
    assert all(d.simulated for d in from_file + from_line)
    with pytest.raises(ConfigError, match="^FLASHPOINT_SIMULATED_GPUS: part 'H200:1' names no node"):
        discover("x=H200:1;H200:1")


MULTI_NODE_SCRIPT = """
import asyncio, json, os
from flashpoint import Endpoint, GpuGroup

@Endpoint(name="where", gpu=GpuGroup.AMPERE_80, gpu_count=2)
async def where() -> dict:
    return {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "FLASHPOINT_GPU_MODEL", "FLASHPOINT_GPU_SIMULATED")}

async def main() -> None:
    job = await where.run()
    assert await job.wait(timeout=60) == "COMPLETED", job.view
    placement = job.view.placement
    print(json.dumps({"env": job.output, "node": placement.node, "devices": list(placement.device_ids),
                      "simulated": placement.simulated}))

asyncio.run(main())
"""


@pytest.mark.slow
def test_an_embedded_plane_runs_on_a_multi_node_simulated_fleet(tmp_path: Path) -> None:
    # A script as users write it, with the variable naming two nodes: the worker runs here, recorded on node b.
    (tmp_path / "multi_node.py").write_text(MULTI_NODE_SCRIPT)
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": "a=NVIDIA_H200:1;b=NVIDIA_A100_80GB_PCIe:2",
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
    }
    env.pop("FLASHPOINT_URL", None)

    result = subprocess.run(
        [sys.executable, "multi_node.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out == {
        "env": {
            "CUDA_VISIBLE_DEVICES": "0,1",
            "FLASHPOINT_GPU_MODEL": "NVIDIA A100 80GB PCIe",
            "FLASHPOINT_GPU_SIMULATED": "1",
        },
        "node": "b",
        "devices": [0, 1],
        "simulated": True,
    }


# ----------------------------------------------------------------------------------------------------------------
# the benchmark's fleet


def test_the_benchmark_fleet_is_1250_nodes_of_8_with_every_catalog_model() -> None:
    devices = bench_fleet()

    assert len(devices) == 10_000
    nodes: dict[str, list[int]] = {}
    models: dict[str, set[str]] = {}
    for device in devices:
        nodes.setdefault(device.node, []).append(device.index)
        models.setdefault(device.node, set()).add(device.model_name)
    assert len(nodes) == 1_250
    assert all(indices == list(range(8)) for indices in nodes.values())
    assert all(len(names) == 1 for names in models.values())  # each node holds 8 of one model
    names = list(nodes)
    assert names[0] == "bench-0000" and names[-1] == "bench-1249" and names == sorted(names)
    # round-robin over the catalog, in its order
    assert [next(iter(models[n])) for n in names[: len(MODELS) + 1]] == [m.name for m in MODELS] + [MODELS[0].name]
    present = {d.model for d in devices}
    assert present == set(MODELS)
    assert {m.member for m in present if m.member is not None} == set(GpuType) - {GpuType.ANY}
    assert all(d.simulated and d.uuid == f"SIM-{d.node}-{d.index}" for d in devices)
    assert len({d.key for d in devices}) == 10_000


def test_a_benchmark_fleet_of_other_sizes() -> None:
    devices = bench_fleet(gpus=10, per_node=4)

    assert [(d.node, d.index) for d in devices] == [
        *[("bench-0", i) for i in range(4)],
        *[("bench-1", i) for i in range(4)],
        *[("bench-2", i) for i in range(2)],  # the last node holds the rest
    ]
    assert [d.model for d in devices[::4]] == list(MODELS[:3])
    with pytest.raises(ConfigError, match="at least one GPU"):
        bench_fleet(gpus=0)
    with pytest.raises(ConfigError, match="at least one GPU"):
        bench_fleet(per_node=0)
