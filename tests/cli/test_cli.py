"""The command line: ``flashpoint gpus`` and ``flashpoint explain`` through typer's CliRunner, plus one subprocess.

Covers ``flashpoint.__main__`` (``python -m flashpoint``) for tests/test_layout.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from flashpoint import ConfigError, Endpoint, GpuGroup, GpuType, NotFoundError
from flashpoint.cli import app, main
from flashpoint.cli.gpus import device_table, summary_table
from flashpoint.cli.output import device_row, model_summary
from flashpoint.config import Settings
from flashpoint.fleet.inventory import Device
from flashpoint.hosting.embedded import EmbeddedServer
from flashpoint.sdk import default_connection

FLEET = "NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2"

runner = CliRunner()


def cli_env(tmp_path: Path, gpus: str = FLEET) -> dict[str, str]:
    return {
        "FLASHPOINT_SIMULATED_GPUS": gpus,
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "FLASHPOINT_NODE": "node-a",
        # the node's facts, declared so that output does not depend on the machine running the tests
        "FLASHPOINT_CPUS": "3",
        "FLASHPOINT_MEMORY_GB": "12",
        "FLASHPOINT_SIMULATED_CUDA": "12.4",
        "FLASHPOINT_DATACENTER": "EU-RO-1",
    }


def invoke(tmp_path: Path, *args: str, gpus: str = FLEET) -> Any:
    return runner.invoke(app, list(args), env=cli_env(tmp_path, gpus))


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A live embedded server announcing itself under tmp_path, as a running script's would; the SDK's connection."""
    started = EmbeddedServer(Settings.load(env={**cli_env(tmp_path), "FLASHPOINT_TAKE_HOLD_S": "5"})).start()
    default_connection.use(started)
    try:
        yield started
    finally:
        default_connection.use(None)
        started.close()


pytestmark = pytest.mark.usefixtures("restore_imports")


# --------------------------------------------------------------------------------------------------------------------
# flashpoint gpus


def test_gpus_shows_the_simulated_local_fleet(tmp_path: Path) -> None:
    result = invoke(tmp_path, "gpus")

    assert result.exit_code == 0, result.output
    assert "simulated via FLASHPOINT_SIMULATED_GPUS" in result.output
    gpu_part, node_part = result.output.split("Nodes (CPU workers reserve vCPUs and memory here)")
    lines = [line for line in gpu_part.splitlines() if "node-a" in line]
    assert len(lines) == 3
    assert all("simulated" in line and "free" in line for line in lines)
    assert "NVIDIA H200" in lines[0] and "HOPPER_141" in lines[0] and "141 GB" in lines[0]
    assert "NVIDIA A100 80GB PCIe" in lines[1] and "AMPERE_80" in lines[1]
    assert "Per model" in result.output
    # the node: this machine's CPUs and memory as declared, the simulated CUDA version, its datacenter label
    (node,) = [line for line in node_part.splitlines() if "node-a" in line]
    assert all(text in node for text in ("3 of 3 free", "12 of 12 GB free", "12.4", "datacenter=EU-RO-1", "simulated"))


def test_gpus_json_is_parseable(tmp_path: Path) -> None:
    result = invoke(tmp_path, "gpus", "--json")

    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["source"] == "local"
    (fleet,) = body["fleets"]
    assert [d["model"] for d in fleet["devices"]] == ["NVIDIA H200", "NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"]
    assert all(d["simulated"] and d["worker"] is None for d in fleet["devices"])
    assert fleet["models"] == [
        {"model": "NVIDIA H200", "recognised": True, "count": 1, "free": 1},
        {"model": "NVIDIA A100 80GB PCIe", "recognised": True, "count": 2, "free": 2},
    ]
    assert fleet["nodes"] == [
        {
            "name": "node-a",
            "cpus": 3,
            "memoryGb": 12.0,
            "cuda": "12.4",
            "labels": {"datacenter": "EU-RO-1"},
            "simulated": True,
            "freeCpus": 3,
            "freeMemoryGb": 12.0,
            "reservations": [],
        }
    ]


def test_gpus_catalog_lists_every_model_and_pool(tmp_path: Path) -> None:
    result = invoke(tmp_path, "gpus", "--catalog")

    assert result.exit_code == 0, result.output
    for text in ("NVIDIA_B200", "180 GB", "BLACKWELL_180", "NVIDIA L40S", "ADA_48_PRO", "Ada Lovelace"):
        assert text in result.output
    assert "NVIDIA A100 80GB PCIe > NVIDIA A100-SXM4-80GB" in result.output  # the pool's fallback order


def test_gpus_catalog_json(tmp_path: Path) -> None:
    result = invoke(tmp_path, "gpus", "--catalog", "--json")

    body = json.loads(result.stdout)
    members = [m["member"] for m in body["models"]]
    assert members[-2:] == [None, None]  # L40S and L40: pooled, no GpuType member
    assert len(members) == len(GpuType) - 1 + 2  # every member but ANY, plus L40S and L40
    groups = {g["group"]: g["models"] for g in body["groups"]}
    assert groups["ADA_48_PRO"] == ["NVIDIA L40S", "NVIDIA L40", "NVIDIA RTX 6000 Ada Generation"]
    assert set(groups) == {g.name for g in GpuGroup}


def test_an_unrecognised_device_is_shown_as_any_only() -> None:
    # Simulated devices are always catalog models, so build the NVML-style row directly.
    device = Device(node="n", index=0, name="NVIDIA Mystery X", model=None, memory_mb=24 * 1024, simulated=False)
    rows = [device_row(device)]
    out = Console(width=200, record=True)

    out.print(device_table("GPUs", rows))
    out.print(summary_table(model_summary(rows)))

    text = out.export_text()
    assert "NVIDIA Mystery X - unrecognised (ANY only)" in text
    assert "real" in text and "24 GB" in text


def test_a_bad_simulated_fleet_is_a_config_error(tmp_path: Path) -> None:
    result = invoke(tmp_path, "gpus", gpus="NVIDIA_H20:1")

    assert result.exit_code == 1
    assert isinstance(result.exception, ConfigError)
    assert "FLASHPOINT_SIMULATED_GPUS" in str(result.exception)


@pytest.mark.slow
async def test_gpus_of_a_live_plane_show_who_holds_each_device(embedded: EmbeddedServer, tmp_path: Path) -> None:
    # Given a worker of "warm" that took an A100 and stays warm (workers=(1, 1))
    @Endpoint(name="warm", gpu=GpuGroup.AMPERE_80, workers=(1, 1))
    def warm(x: int) -> int:
        return x

    assert await warm(7) == 7

    # When the CLI looks at this machine
    result = invoke(tmp_path, "gpus", "--json")

    # Then it shows the plane's fleet, not a fresh discovery, with the holder
    body = json.loads(result.stdout)
    assert body["source"] == "live"
    (fleet,) = body["fleets"]
    assert fleet["pid"] == os.getpid()
    held = [d for d in fleet["devices"] if d["endpoint"] == "warm"]
    assert len(held) == 1 and held[0]["model"] == "NVIDIA A100 80GB PCIe"
    text = invoke(tmp_path, "gpus").output
    assert f"GPUs of flashpoint process {os.getpid()}" in text
    assert "held by warm" in text


# --------------------------------------------------------------------------------------------------------------------
# flashpoint explain --app


def write_app(tmp_path: Path, name: str = "cli_app.py") -> Path:
    path = tmp_path / name
    path.write_text(
        textwrap.dedent(
            """
            from flashpoint import Endpoint, GpuGroup, GpuType

            @Endpoint(name="impossible", gpu=GpuType.NVIDIA_B200)
            async def impossible(data: dict) -> dict:
                return data

            @Endpoint(name="fallback", gpu=[GpuType.NVIDIA_H200, GpuGroup.AMPERE_80], gpu_count=2)
            async def fallback(data: dict) -> dict:
                return data
            """
        )
    )
    return path


def test_explain_app_says_an_impossible_request_can_never_run(tmp_path: Path) -> None:
    path = write_app(tmp_path)

    result = invoke(tmp_path, "explain", "--app", str(path), "impossible", gpus="NVIDIA_H200:1")

    assert result.exit_code == 0, result.output
    assert "endpoint impossible: can never run on this fleet" in result.output
    assert "NVIDIA B200: not_in_fleet (no node has NVIDIA B200)" in result.output
    assert "fleet: 1 x NVIDIA H200 (simulated) on node-a" in result.output


def test_explain_app_shows_the_fallback_a_worker_would_get(tmp_path: Path) -> None:
    path = write_app(tmp_path)

    result = invoke(tmp_path, "explain", "--app", str(path), "--json")

    assert result.exit_code == 0, result.output
    by_name = {e["endpoint"]: e for e in json.loads(result.stdout)["explanations"]}
    assert by_name["impossible"]["never"] is True
    assert [r["code"] for r in by_name["impossible"]["reasons"]] == ["not_in_fleet"]
    fallback = by_name["fallback"]
    assert fallback["never"] is False
    assert "would start now on 2 x NVIDIA A100 80GB PCIe on node-a (devices 1, 2, simulated)" in fallback["summary"]
    # the H200 came first, but the fleet has one and the endpoint wants two per worker
    assert fallback["reasons"][0]["candidate"] == "NVIDIA H200"
    assert fallback["reasons"][0]["code"] == "not_in_fleet"


def test_explain_app_with_an_unknown_endpoint_suggests_names(tmp_path: Path) -> None:
    path = write_app(tmp_path)

    result = invoke(tmp_path, "explain", "--app", str(path), "falback")

    assert result.exit_code == 1
    assert isinstance(result.exception, ConfigError)
    assert "did you mean 'fallback'" in str(result.exception)


def test_explain_app_sees_settings_the_app_makes_and_keeps_json_clean(tmp_path: Path) -> None:
    # Given an app that prints and picks its simulated fleet while it is imported, as the examples do
    path = tmp_path / "self_configuring.py"
    path.write_text(
        textwrap.dedent(
            """
            import os
            from flashpoint import Endpoint, GpuType

            os.environ["FLASHPOINT_SIMULATED_GPUS"] = "NVIDIA_B200:2"
            print("configured at import")

            @Endpoint(name="b200", gpu=GpuType.NVIDIA_B200)
            async def b200(data: dict) -> dict:
                return data
            """
        )
    )
    env: dict[str, str | None] = {**cli_env(tmp_path), "FLASHPOINT_SIMULATED_GPUS": None}

    result = runner.invoke(app, ["explain", "--app", str(path), "--json"], env=env)

    assert result.exit_code == 0, result.output
    assert "configured at import" in result.stderr
    (explanation,) = json.loads(result.stdout)["explanations"]
    assert "would start now on 1 x NVIDIA B200 on node-a (device 0, simulated)" in explanation["summary"]


# --------------------------------------------------------------------------------------------------------------------
# flashpoint explain against a live embedded plane


async def test_explain_a_waiting_job_of_a_live_plane(embedded: EmbeddedServer, tmp_path: Path) -> None:
    # Given a job for a GPU the fleet does not have
    @Endpoint(name="needs-b200", gpu=GpuType.NVIDIA_B200)
    async def needs_b200(data: dict[str, Any]) -> dict[str, Any]:
        return data

    job = await needs_b200.run({"x": 1})

    # When the CLI explains it
    text = invoke(tmp_path, "explain", job.id)
    as_json = invoke(tmp_path, "explain", job.id, "--json")

    # Then it is first in its queue and can never run
    assert text.exit_code == 0, text.output
    assert f"job {job.id} (IN_QUEUE): can never run on this fleet" in text.output
    assert "position 1 of 1 in the queue of needs-b200" in text.output
    assert "NVIDIA B200: not_in_fleet" in text.output
    (explanation,) = json.loads(as_json.stdout)["explanations"]
    assert explanation["jobId"] == job.id
    assert explanation["position"] == 1
    assert explanation["never"] is True
    assert [r["code"] for r in explanation["reasons"]] == ["not_in_fleet"]
    assert explanation["pid"] == os.getpid()


async def test_explain_an_endpoint_and_every_endpoint_of_a_live_plane(embedded: EmbeddedServer, tmp_path: Path) -> None:
    @Endpoint(name="needs-b200", gpu=GpuType.NVIDIA_B200)
    async def needs_b200(data: dict[str, Any]) -> dict[str, Any]:
        return data

    await needs_b200.run({"x": 1})

    one = invoke(tmp_path, "explain", "needs-b200")
    every = invoke(tmp_path, "explain", "--json")

    assert one.exit_code == 0, one.output
    assert "endpoint needs-b200: can never run on this fleet" in one.output
    (explanation,) = json.loads(every.stdout)["explanations"]
    assert explanation["endpoint"] == "needs-b200"
    assert explanation["queueDepth"] == 1
    assert explanation["gpu"] == "NVIDIA B200"


def test_explain_an_unknown_job_is_an_error(embedded: EmbeddedServer, tmp_path: Path) -> None:
    result = invoke(tmp_path, "explain", "no-such-job")

    assert result.exit_code == 1
    assert isinstance(result.exception, NotFoundError)
    assert "no job or endpoint 'no-such-job'" in str(result.exception)


def test_explain_without_a_running_process(tmp_path: Path) -> None:
    everything = invoke(tmp_path, "explain")
    one = invoke(tmp_path, "explain", "some-job")

    assert everything.exit_code == 0
    assert "no running flashpoint process found" in everything.stderr
    assert one.exit_code == 1
    assert isinstance(one.exception, NotFoundError)


def test_announcements_of_dead_processes_are_removed(tmp_path: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(finished.stdout)
    run = tmp_path / "state" / "run"
    run.mkdir(parents=True)
    (run / f"{dead}-1.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "key": "k", "pid": dead}))
    (run / f"{dead}-2.json").write_text("{half-written")

    result = invoke(tmp_path, "explain")

    assert result.exit_code == 0
    assert list(run.iterdir()) == []


# --------------------------------------------------------------------------------------------------------------------
# main() and python -m flashpoint


def test_main_turns_errors_into_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    monkeypatch.setenv("FLASHPOINT_STATE_DIR", str(tmp_path / "state"))  # main() reads the real environment

    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "some-job"])

    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: no running flashpoint process found on this machine")
    assert "Traceback" not in err


def test_python_m_flashpoint_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flashpoint", "--help"], capture_output=True, text=True, timeout=60, check=False
    )

    assert result.returncode == 0, result.stderr
    assert "gpus" in result.stdout and "explain" in result.stdout
