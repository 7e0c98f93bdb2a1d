"""Runpod Flash itself, for the tests that compare with it or drive it: runpod-flash installed from the package
registry into a virtual environment of its own (never into this one), once per test session (the ``flash_venv``
fixture in tests/conftest.py).

Without network the install fails: skipped locally, a failure in CI (``CI`` set), as ``seed_path()`` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

FLASH_VERSION = "1.21.0"

#: keep Flash (and the runpod SDK under it) from phoning home, printing notices or writing logs while it runs
QUIET_ENV = {
    "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
    "RUNPOD_FLASH_SILENCE_DEPRECATION": "1",
    "FLASH_NO_UPDATE_CHECK": "1",
    "FLASH_FILE_LOGGING_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}

#: variables of this environment that would change what Flash does (its key, a worker's identity, our imports)
_DROPPED = ("RUNPOD_API_KEY", "RUNPOD_ENDPOINT_ID", "RUNPOD_POD_ID", "RUNPOD_ENDPOINT_BASE_URL", "PYTHONPATH")


def unavailable(message: str) -> None:
    """Skip the test here; fail it in CI, where the registry must be reachable."""
    if os.environ.get("CI"):
        raise AssertionError(message)
    pytest.skip(message)


@dataclass(frozen=True)
class FlashVenv:
    """A virtual environment holding runpod-flash (and nothing of flashpoint)."""

    root: Path
    python: Path

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for Flash's interpreter: this one's, quiet, with a HOME of its own (no ~/.runpod key, no
        ~/.flash state), without the variables that would change Flash's behaviour; ``extra`` on top."""
        env = {**os.environ, **QUIET_ENV, "HOME": str(self.root / "home")}
        for name in _DROPPED:
            env.pop(name, None)
        return {**env, **extra}


def install_venv(root: Path, requirement: str, *, timeout: float) -> Path:
    """A virtual environment under ``root`` holding ``requirement`` from the package registry, and a HOME of its own
    beside it; its interpreter. Without the registry: skipped here, failed in CI (``unavailable``)."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q", requirement],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if install.returncode != 0:
        unavailable(
            f"cannot install {requirement} from the package registry (no network?): {install.stderr.strip()[-500:]}"
        )
    (root / "home").mkdir(exist_ok=True)
    return python


def build(root: Path) -> FlashVenv:
    """Create the environment under ``root`` and install runpod-flash there (minutes the first time)."""
    return FlashVenv(root, install_venv(root, f"runpod-flash=={FLASH_VERSION}", timeout=600))
