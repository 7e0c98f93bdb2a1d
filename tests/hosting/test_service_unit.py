"""The systemd unit of a team server (deploy/flashpoint.service, issue 22 point 9): checked by deploy/check-unit.sh
(``systemd-analyze verify`` where installed, its own structural check where not, or forced), which fails on a broken
unit; and the unit's settings read back with configparser: drains on SIGTERM within TimeoutStopSec, hardened without
hiding the GPUs."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

UNIT = ROOT / "deploy" / "flashpoint.service"
CHECK = ROOT / "deploy" / "check-unit.sh"
#: the drain's grace period by default (issue 22, point 1): the unit must give the server longer than this to stop
GRACE_S = 30
MODES = ["verify", "structural"]


def check(unit: Path | None = None, *, mode: str = "verify") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "FLASHPOINT_BIN": sys.executable,
        "CHECK_UNIT_STRUCTURAL": "1" if mode == "structural" else "0",
    }
    return subprocess.run(
        ["sh", str(CHECK), *([str(unit)] if unit else [])], env=env, capture_output=True, text=True, timeout=60
    )


def read_unit(path: Path = UNIT) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    parser.read(path, encoding="utf-8")
    return parser


@pytest.mark.parametrize("mode", MODES)
def test_the_unit_passes_its_check(mode: str) -> None:
    done = check(mode=mode)

    assert done.returncode == 0, done.stderr
    if mode == "structural" or shutil.which("systemd-analyze") is None:
        assert "passes the structural check" in done.stdout
    else:
        assert "passes systemd-analyze verify" in done.stdout


#: (mode, what changes, what the failure names): a typo'd key, a typo'd section (no ExecStart left); no [Install]
#: (nothing enables it) systemd accepts, the structural check does not
BROKEN = [
    *[(mode, ("KillSignal=SIGTERM", "KillSignal=SIGTERM\nTimeoutStopSecs=45"), "TimeoutStopSecs") for mode in MODES],
    *[(mode, ("[Service]", "[Servce]"), "Servce") for mode in MODES],
    ("structural", ("[Install]\nWantedBy=multi-user.target", ""), "no [Install] section"),
]


@pytest.mark.parametrize(("mode", "change", "said"), BROKEN)
def test_a_broken_unit_fails_the_check_loudly(tmp_path: Path, mode: str, change: tuple[str, str], said: str) -> None:
    old, new = change
    text = UNIT.read_text(encoding="utf-8")
    assert old in text
    broken = tmp_path / "flashpoint.service"
    broken.write_text(text.replace(old, new), encoding="utf-8")

    done = check(broken, mode=mode)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED" in done.stderr and said in done.stderr


def test_the_check_names_a_missing_unit() -> None:
    done = check(ROOT / "deploy" / "no-such.service")
    assert done.returncode == 2 and "no unit file at" in done.stderr


def test_the_unit_runs_an_empty_team_server_that_drains_on_sigterm() -> None:
    unit = read_unit()
    service = unit["Service"]

    assert set(unit.sections()) == {"Unit", "Service", "Install"}
    assert service["ExecStart"] == (
        "/opt/flashpoint/.venv/bin/flashpoint serve --host 0.0.0.0 --port 8000 --data-dir /var/lib/flashpoint"
    )
    assert (service["User"], service["Group"]) == ("flashpoint", "flashpoint")
    assert service["EnvironmentFile"] == "/etc/flashpoint/env"
    assert service["StateDirectory"] == "flashpoint" and service["WorkingDirectory"] == "/var/lib/flashpoint"
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] == "mixed"  # SIGTERM to the server only: it drains, then stops its workers
    assert int(service["TimeoutStopSec"]) == 45 > GRACE_S
    assert service["Restart"] == "on-failure"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_the_unit_is_hardened_without_hiding_the_gpus() -> None:
    service = read_unit()["Service"]

    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict" and service["ReadWritePaths"] == "/var/lib/flashpoint"
    assert service["PrivateTmp"] == "yes"
    # a private /dev has no /dev/nvidia*: the workers would see no GPU
    assert "PrivateDevices" not in service and service.get("DevicePolicy", "auto") == "auto"
    assert "PrivateDevices=yes" in UNIT.read_text(encoding="utf-8")  # the comment that says why not
