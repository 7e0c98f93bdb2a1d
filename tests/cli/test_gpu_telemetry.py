"""GPU telemetry on the command line (decision 0117): ``flashpoint gpus`` says "simulated: no telemetry" for simulated
devices (in its table and its JSON) and draws a real device's telemetry in words; ``flashpoint job`` shows a job's
peak GPU memory and mean utilisation, or why it has none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from flashpoint.cli import app
from flashpoint.cli.gpus import device_table, telemetry_text
from flashpoint.cli.jobs import gpu_use_text, job_view
from flashpoint.cli.live import SERVER, LivePlane
from flashpoint.cli.output import console
from tests.cli.test_cli import cli_env

pytestmark = pytest.mark.usefixtures("restore_imports")

runner = CliRunner()
PLANE = LivePlane(pid=4243, url="http://127.0.0.1:9", key=None, kind=SERVER, app="app.py")
REAL = {"node": "node-a", "gpuModel": "NVIDIA H100 80GB HBM3", "deviceIds": [0], "simulated": False}
SIMULATED = {**REAL, "simulated": True}
SAMPLED = {
    "status": "sampled",
    "detail": "",
    "sampledAt": 1.0,
    "utilizationPct": 37.0,
    "memoryUsedMb": 812,
    "memoryTotalMb": 81559,
    "temperatureC": 41.0,
    "powerW": 72.4,
    "processes": [{"pid": 10, "memoryUsedMb": 800, "worker": "w1"}],
}


def test_gpus_says_simulated_devices_have_no_telemetry(tmp_path: Path) -> None:
    table = runner.invoke(app, ["gpus"], env=cli_env(tmp_path))
    as_json = runner.invoke(app, ["gpus", "--json"], env=cli_env(tmp_path))

    assert table.exit_code == 0, table.output
    # no column repeating it on every row: one line under the table
    assert "telemetry: simulated: no telemetry (every device here is simulated)" in table.output
    assert as_json.exit_code == 0, as_json.output
    (fleet,) = json.loads(as_json.output)["fleets"]
    assert [d["telemetry"] for d in fleet["devices"]] == [
        {"status": "simulated", "detail": "simulated: no telemetry"}
    ] * 3


@pytest.mark.parametrize(
    ("telemetry", "text"),
    [
        (SAMPLED, "37% util, 812 / 81559 MiB, 41 °C, 72 W, 1 process"),
        # a figure the device does not report is left out, never shown as 0
        ({**SAMPLED, "powerW": None, "temperatureC": None, "processes": []}, "37% util, 812 / 81559 MiB"),
        ({"status": "simulated", "detail": "simulated: no telemetry"}, "simulated: no telemetry"),
        ({"status": "unknown", "detail": "unknown: NVML could not start"}, "unknown: NVML could not start"),
        (None, "-"),  # a server older than telemetry
    ],
)
def test_a_devices_telemetry_in_words(telemetry: dict[str, Any] | None, text: str) -> None:
    assert telemetry_text(telemetry) == text


def drawn(table: Any) -> str:
    out = Console(width=250, record=True)
    out.print(table)
    return out.export_text()


def test_the_device_table_has_a_telemetry_column_when_some_device_is_real() -> None:
    row = {
        "node": "node-a",
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "model": "NVIDIA H100 80GB HBM3",
        "pool": "HOPPER_80",
        "vramGb": 80,
        "recognised": True,
        "simulated": False,
        "coarse": False,
        "worker": None,
        "endpoint": None,
        "telemetry": SAMPLED,
    }
    simulated = {
        **row,
        "index": 1,
        "simulated": True,
        "telemetry": {"status": "simulated", "detail": "simulated: no telemetry"},
    }
    first, second = (drawn(device_table("GPUs", rows)) for rows in ([row, simulated], [simulated]))
    assert "telemetry" in first and "37% util, 812 / 81559 MiB, 41 °C, 72 W, 1 process" in first
    assert "simulated: no telemetry" in first
    assert "telemetry" not in second


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"placement": REAL, "gpuMemoryPeakMb": 9000, "gpuUtilizationMeanPct": 60.0}, "peak 9000 MiB, mean 60.0%"),
        ({"placement": REAL, "gpuMemoryPeakMb": 9000, "gpuUtilizationMeanPct": None}, "peak 9000 MiB"),
        ({"placement": REAL, "status": "COMPLETED"}, "not sampled"),
        ({"placement": REAL, "status": "IN_PROGRESS"}, "recorded when it ends"),
        ({"placement": SIMULATED, "gpuMemoryPeakMb": None}, "simulated: no telemetry"),
        ({"placement": {**REAL, "gpuModel": None, "cpuInstance": "cpu3c-2-4"}}, ""),  # a CPU job
        ({"placement": None}, ""),  # never placed
    ],
)
def test_a_jobs_gpu_use_in_words(body: dict[str, Any], text: str) -> None:
    assert gpu_use_text(body).startswith(text) and (text or not gpu_use_text(body))


def test_flashpoint_job_shows_the_gpu_use(capsys: pytest.CaptureFixture[str]) -> None:
    body = {
        "id": "j1-fp",
        "status": "COMPLETED",
        "endpoint": "llm",
        "placement": REAL,
        "gpuMemoryPeakMb": 9000,
        "gpuUtilizationMeanPct": 60.0,
    }
    console().print(job_view(PLANE, body))
    assert "peak 9000 MiB, mean 60.0% utilisation" in capsys.readouterr().out
