"""``flashpoint explain --app APP --fleet FLEET``: the what-if through typer's CliRunner, plus one real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashpoint.cli import app

APP = str(Path(__file__).resolve().parents[1] / "apps" / "whatif_app.py")
ROOT = Path(__file__).resolve().parents[2]

FLEET = """
    [[node]]
    name = "rack1-a"
    gpus = { NVIDIA_H200 = 2 }
    labels = { zone = "eu-1" }

    [[node]]
    name = "rack1-b"
    gpus = "NVIDIA_A100_80GB_PCIe:4,NVIDIA L40S:2"
    count = 2
"""

runner = CliRunner()


def fleet_file(tmp_path: Path, text: str = FLEET, name: str = "fleet.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def invoke(tmp_path: Path, *args: str) -> Any:
    # No FLASHPOINT_SIMULATED_GPUS: the what-if reads only --fleet. A state dir of its own: no plane is asked.
    env = {
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "FLASHPOINT_NODE": "here",
        "FLASHPOINT_SIMULATED_GPUS": None,
        # what every node of a --fleet has unless the fleet file says: declared, so no machine's own count shows
        "FLASHPOINT_CPUS": "2",
        "FLASHPOINT_MEMORY_GB": "8",
    }
    return runner.invoke(app, ["explain", "--app", APP, *args], env=env)


pytestmark = pytest.mark.usefixtures("restore_imports")


def test_what_if_names_the_nodes_and_devices_each_worker_would_get(tmp_path: Path) -> None:
    result = invoke(tmp_path, "--fleet", str(fleet_file(tmp_path)))

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "3 nodes, 14 GPUs, all simulated" in out
    lines = out.splitlines()

    def row(worker: str) -> str:
        (line,) = [line for line in lines if f" {worker} " in line]
        return line

    # serve: its minimum on the H200 of rack1-a, then one more when scaling up; train: 4 x A100 per node
    assert all(word in row("serve-1") for word in ("its minimum", "NVIDIA H200", "rack1-a", "simulated", "zone=eu-1"))
    assert "rack1-a" in row("serve-2") and " 1 " in row("serve-2")
    assert all(word in row("train-1") for word in ("its first job", "NVIDIA A100 80GB PCIe", "rack1-b-0", "0, 1, 2, 3"))
    assert "rack1-b-1" in row("train-2")
    assert "serve-3" not in out
    assert "endpoint serve: runs: gets 2 of its 3 workers" in out
    assert "NVIDIA H200: busy (all held by serve)" in out
    assert "NVIDIA A100 80GB PCIe: busy (all held by train)" in out
    assert "endpoint huge: never:" in out
    assert "NVIDIA B200: not_in_fleet (no node has NVIDIA B200)" in out
    # the CPU endpoint takes a vCPU of the first node (this machine's declared 2 vCPUs and 8 GB, as every node here)
    assert "endpoint tidy: runs: gets all 1 of its workers" in out
    assert all(word in row("tidy-1") for word in ("its first job", "cpu3c-1-2", "rack1-a", "cores 0"))
    assert "datacenter is matched by datacenter=" in out


def test_what_if_json(tmp_path: Path) -> None:
    result = invoke(tmp_path, "--fleet", "a=NVIDIA_H200:1;b*2=NVIDIA_A100_80GB_PCIe:4", "--json")

    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["fleet"]["nodes"] == 3 and body["fleet"]["gpus"] == 9 and body["fleet"]["simulated"] is True
    assert body["fleet"]["models"] == [
        {"model": "NVIDIA H200", "gpus": 1, "nodes": 1},
        {"model": "NVIDIA A100 80GB PCIe", "gpus": 8, "nodes": 2},
    ]
    by_name = {row["endpoint"]: row for row in body["endpoints"]}
    assert list(by_name) == ["serve", "train", "huge", "tidy"]
    assert [(w["node"], w["gpuModel"], w["deviceIds"]) for w in by_name["serve"]["workers"]] == [
        ("a", "NVIDIA H200", [0]),
        # the H200 is gone; serve falls back to AMPERE_80 on b-1 (train took b-0 for its first job)
        ("b-1", "NVIDIA A100 80GB PCIe", [0]),
        ("b-1", "NVIDIA A100 80GB PCIe", [1]),
    ]
    assert [(w["node"], w["deviceIds"], w["phase"]) for w in by_name["train"]["workers"]] == [
        ("b-0", [0, 1, 2, 3], "first")
    ]
    assert by_name["train"]["verdict"] == "runs"
    # so train's second worker (4 on one node) finds only 3 free on b-1
    assert [(r["code"], r["detail"]) for r in by_name["train"]["reasons"]][0] == (
        "busy",
        "3 free on one node at most, need 4; held by serve, train",
    )
    assert by_name["train"]["reasons"][1]["code"] == "not_in_fleet"
    assert by_name["huge"]["never"] is True and by_name["huge"]["workers"] == []
    assert by_name["tidy"]["verdict"] == "runs"
    assert [(w["node"], w["cpu"]) for w in by_name["tidy"]["workers"]] == [
        ("a", {"instance": "cpu3c-1-2", "cores": [0], "memoryGb": 2.0})
    ]
    assert body["fleet"]["nodeFacts"][0] == {
        "name": "a",
        "cpus": 2,
        "memoryGb": 8.0,
        "cuda": "12.8",
        "labels": {},
        "simulated": True,
    }


def test_what_if_for_one_endpoint_still_places_the_others(tmp_path: Path) -> None:
    result = invoke(tmp_path, "--fleet", "a=NVIDIA_H200:1", "--json", "huge")
    assert result.exit_code == 0, result.output
    (only,) = json.loads(result.stdout)["endpoints"]
    assert only["endpoint"] == "huge" and only["never"] is True

    # serve's minimum takes the one H200 first, so train (AMPERE_80 only) is never and serve gets nothing more
    result = invoke(tmp_path, "--fleet", "a=NVIDIA_H200:1", "--json", "serve")
    (serve,) = json.loads(result.stdout)["endpoints"]
    assert [w["node"] for w in serve["workers"]] == ["a"]
    assert [(r["candidate"], r["code"]) for r in serve["reasons"]][0] == ("NVIDIA H200", "busy")


def test_a_plain_model_list_is_one_node_named_as_this_machine(tmp_path: Path) -> None:
    result = invoke(tmp_path, "--fleet", "NVIDIA_H200:1", "--json", "serve")

    assert result.exit_code == 0, result.output
    (serve,) = json.loads(result.stdout)["endpoints"]
    assert serve["workers"][0]["node"] == "here"


def test_a_fleet_file_by_any_name_or_by_at(tmp_path: Path) -> None:
    path = fleet_file(tmp_path, name="fleet.cfg")

    for value in (str(path), f"@{path}"):
        result = invoke(tmp_path, "--fleet", value, "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["fleet"]["labels"] == {"rack1-a": {"zone": "eu-1"}}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[[node]]\nname = "a"\ngpus = { H200 = 2 \n', "not valid TOML: Unclosed inline table (at line 3"),
        ('[[node]]\nname = "a"\ngpus = { H20 = 2 }\n', "did you mean 'H200'"),
        ('[[node]]\nname = "a"\ngpus = { H200 = 1 }\n[[node]]\nname = "a"\ngpus = { H200 = 1 }\n', "taken already"),
    ],
)
def test_a_bad_fleet_file_is_a_usage_error(tmp_path: Path, text: str, says: str) -> None:
    path = fleet_file(tmp_path, text)

    result = invoke(tmp_path, "--fleet", str(path))

    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"Error: --fleet: {path}: ")
    assert says in line


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("a=H200:1;a=H200:1", "Error: --fleet: part 'a=H200:1': node name 'a' is taken already"),
        ("H20:1", "Error: --fleet: entry 'H20:1': 'H20' is not one GPU model; did you mean 'H200'?"),
        ("nowhere.toml", "Error: --fleet: no such fleet file: 'nowhere.toml'"),
    ],
)
def test_a_bad_one_line_fleet_or_a_missing_file_is_a_usage_error(tmp_path: Path, value: str, says: str) -> None:
    result = invoke(tmp_path, "--fleet", value)

    assert result.exit_code == 2
    assert result.stderr.startswith(says)


def test_fleet_needs_an_app(tmp_path: Path) -> None:
    result = runner.invoke(app, ["explain", "--fleet", "a=H200:1"], env={"FLASHPOINT_STATE_DIR": str(tmp_path)})

    assert result.exit_code == 2
    assert result.stderr.startswith("Error: --fleet needs --app APP")


FILTERED_APP = """
from flashpoint import Endpoint, GpuType

@Endpoint(name="eu", gpu=GpuType.NVIDIA_H200, datacenter="EU-RO-1")
async def eu(data: dict) -> dict:
    return data

@Endpoint(name="recent", gpu=GpuType.NVIDIA_H200, min_cuda_version="12.8")
async def recent(data: dict) -> dict:
    return data

@Endpoint(name="cpu-eu", cpu="cpu3c-2-4", datacenter="EU-RO-1")
async def cpu_eu(data: dict) -> dict:
    return data
"""

FILTERED_FLEET = """
    [[node]]
    name = "us"
    gpus = { NVIDIA_H200 = 1 }
    labels = { datacenter = "US-KS-2" }

    [[node]]
    name = "eu"
    gpus = { NVIDIA_H200 = 1 }
    cuda = "12.4"
    labels = { datacenter = "EU-RO-1" }
    cpus = 4
"""


def test_what_if_applies_datacenters_and_cuda_floors(tmp_path: Path) -> None:
    app_file = tmp_path / "filtered_app.py"
    app_file.write_text(textwrap.dedent(FILTERED_APP))
    env = {"FLASHPOINT_STATE_DIR": str(tmp_path / "state"), "FLASHPOINT_CPUS": "2", "FLASHPOINT_MEMORY_GB": "8"}

    result = runner.invoke(
        app,
        ["explain", "--app", str(app_file), "--fleet", str(fleet_file(tmp_path, FILTERED_FLEET)), "--json"],
        env=env,
    )

    assert result.exit_code == 0, result.output
    by_name = {row["endpoint"]: row for row in json.loads(result.stdout)["endpoints"]}
    # eu: the H200 of the EU node (old driver: no floor asked); recent: the US node's (12.8, the simulated default)
    assert [w["node"] for w in by_name["eu"]["workers"]] == ["eu"]
    assert [w["node"] for w in by_name["recent"]["workers"]] == ["us"]
    assert [w["node"] for w in by_name["cpu-eu"]["workers"]] == ["eu"]  # its declared 4 vCPUs

    text = runner.invoke(
        app,
        ["explain", "--app", str(app_file), "--fleet", "a=NVIDIA_H200:1"],
        env={**env, "FLASHPOINT_SIMULATED_CUDA": "12.4"},
    ).stdout
    assert "endpoint recent: never: no node has a CUDA driver as new as its min_cuda_version" in text
    assert "note: datacenter=EU-RO-1 is not applied" in text


@pytest.mark.slow
def test_python_m_flashpoint_explain_what_if(tmp_path: Path) -> None:
    path = fleet_file(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "FLASHPOINT_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}

    result = subprocess.run(
        [sys.executable, "-m", "flashpoint", "explain", "--app", "tests/apps/whatif_app.py", "--fleet", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env=env,
    )

    assert result.returncode == 0, result.stderr
    assert "serve-1" in result.stdout and "rack1-a" in result.stdout
    assert "train-2" in result.stdout and "rack1-b-1" in result.stdout and "0, 1, 2, 3" in result.stdout
    assert "endpoint huge: never:" in result.stdout
