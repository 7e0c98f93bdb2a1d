"""Runpod SDK 2.x's release candidate, for the tests that compare flashpoint's App surface with it: ``runpod==2.0.0rc2``
installed from the package registry into a virtual environment of its own (never into this one, which holds the 1.x
client), once per test session (the ``rc2_venv`` fixture in tests/conftest.py).

Without network the install fails: skipped locally, a failure in CI (``CI`` set), as tests/flashvenv.py does.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.flashvenv import install_venv

RC2_VERSION = "2.0.0rc2"

#: keep the SDK from checking the system, phoning home or finding a key while it runs
QUIET_ENV = {"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true", "DO_NOT_TRACK": "1"}

#: variables of this environment that would change what rc2 does (its key, a worker's identity, our imports)
_DROPPED = (
    "RUNPOD_API_KEY",
    "RUNPOD_ENDPOINT_ID",
    "RUNPOD_POD_ID",
    "RUNPOD_DEV_SESSION",
    "RUNPOD_DEV_APP",
    "RUNPOD_DISCOVERY_SCAN",
    "RUNPOD_ENDPOINT_BASE_URL",
    "FLASH_ENVIRONMENT",
    "PYTHONPATH",
)


@dataclass(frozen=True)
class Rc2Venv:
    """A virtual environment holding ``runpod==2.0.0rc2`` (and nothing of flashpoint)."""

    root: Path
    python: Path

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for rc2's interpreter: this one's, quiet, with a HOME of its own (no ~/.runpod key), without
        the variables that would change rc2's behaviour; ``extra`` on top."""
        env = {**os.environ, **QUIET_ENV, "HOME": str(self.root / "home")}
        for name in _DROPPED:
            env.pop(name, None)
        return {**env, **extra}

    def run(self, code: str, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``code`` with rc2's python (``-c``), ``stdin`` on its standard input."""
        return subprocess.run(
            [str(self.python), "-c", code],
            input=stdin,
            env=self.env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def build(root: Path) -> Rc2Venv:
    """Create the environment under ``root`` and install rc2 there (about a minute the first time)."""
    return Rc2Venv(root, install_venv(root, f"runpod=={RC2_VERSION}", timeout=900))
