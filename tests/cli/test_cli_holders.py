"""``flashpoint gpus`` and ``flashpoint explain`` name the holders of this machine's devices from the lease directory
(cli/holders.py) when no plane of this user is announced: a real process holding a lease, which announces nothing
to this user (as another user's server would not; the two-user case is tests/hardening/test_other_user.py).

Covers ``flashpoint.cli.holders`` (the lease holders' rows) for tests/test_layout.py."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from subprocess import Popen

import pytest

from tests.cli.test_cli import invoke
from tests.scheduler.ownership.test_leases_holder import end_holder, start_holder


@pytest.fixture
def holder() -> Iterator[Popen[str]]:
    """A process holding the lease of the simulated H200 of ``tests.cli.test_cli.FLEET`` (device 0 of node-a) for its
    endpoint "theirs", in this test's lease directory."""
    child = start_holder(Path(os.environ["FLASHPOINT_LEASE_DIR"]), "node-a=NVIDIA_H200:1", "theirs")
    yield child
    end_holder(child)


def test_gpus_names_the_holder_of_a_device_no_announced_plane_holds(holder: Popen[str], tmp_path: Path) -> None:
    result = invoke(tmp_path, "gpus", "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    (fleet,) = body["fleets"]
    assert body["source"] == "local" and fleet["leaseDir"] == os.environ["FLASHPOINT_LEASE_DIR"]
    h200, *a100s = fleet["devices"]
    assert h200["process"]["pid"] == holder.pid and h200["process"]["endpoint"] == "theirs"
    assert f"pid {holder.pid}" in h200["endpoint"] and all("process" not in row for row in a100s)
    assert {m["model"]: m["free"] for m in fleet["models"]} == {"NVIDIA H200": 0, "NVIDIA A100 80GB PCIe": 2}
    text = invoke(tmp_path, "gpus").output
    assert "all are free" not in text and "holders of every user from the lease directory" in text
    assert f"held by another flashpoint process: pid {holder.pid}" in " ".join(text.split())


def test_gpus_says_all_are_free_when_nobody_holds_one(tmp_path: Path) -> None:
    result = invoke(tmp_path, "gpus", "--json")
    (fleet,) = json.loads(result.stdout)["fleets"]
    assert fleet["leaseDir"] is None and all("process" not in row for row in fleet["devices"])
    assert "so all are free" in invoke(tmp_path, "gpus").output
    assert not Path(os.environ["FLASHPOINT_LEASE_DIR"]).exists()  # a reader makes no lease directory


def test_explain_app_waits_for_a_device_another_process_holds(holder: Popen[str], tmp_path: Path) -> None:
    path = tmp_path / "h200_app.py"
    path.write_text(
        textwrap.dedent(
            """
            from flashpoint import Endpoint, GpuType

            @Endpoint(name="h200", gpu=GpuType.NVIDIA_H200)
            async def h200(data: dict) -> dict:
                return data
            """
        )
    )
    result = invoke(tmp_path, "explain", "--app", str(path), "--json")
    assert result.exit_code == 0, result.output
    (explanation,) = json.loads(result.stdout)["explanations"]
    assert explanation["never"] is False and "would wait now" in explanation["summary"]
    (reason,) = explanation["reasons"]
    assert reason["code"] == "busy" and [p["pid"] for p in reason["processes"]] == [holder.pid]


def test_explain_without_a_plane_names_who_holds_the_devices(holder: Popen[str], tmp_path: Path) -> None:
    result = invoke(tmp_path, "explain")
    assert result.exit_code == 0, result.output
    assert "no running flashpoint process found" in result.stderr
    assert f"device 0 (NVIDIA H200) of node-a: another flashpoint process: pid {holder.pid}" in result.stderr
