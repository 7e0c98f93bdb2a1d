"""A project's .env is loaded at import as Runpod Flash loads it: found walking up from the working directory, never
overriding what is set. Each case runs a fresh interpreter, so this process's environment is untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flashpoint.sdk import envfile

PROBE = "import json, os, flashpoint; print(json.dumps({k: os.environ.get(k) for k in ('FP_A', 'FP_B')}))"


def probe(cwd: Path, **env: str) -> dict[str, str | None]:
    clean = {k: v for k, v in os.environ.items() if k not in ("FP_A", "FP_B", envfile.SWITCH)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=cwd, env={**clean, **env}, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    values: dict[str, str | None] = json.loads(out.stdout)
    return values


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".env").write_text("FP_A=from-file\nFP_B='quoted value'\n")
    (tmp_path / "src" / "deep").mkdir(parents=True)
    return tmp_path


def test_import_loads_the_env_file_found_walking_up_from_the_working_directory(project: Path) -> None:
    assert probe(project / "src" / "deep") == {"FP_A": "from-file", "FP_B": "quoted value"}


def test_a_variable_already_set_is_never_overridden(project: Path) -> None:
    assert probe(project, FP_A="from-shell") == {"FP_A": "from-shell", "FP_B": "quoted value"}


def test_loading_can_be_switched_off(project: Path) -> None:
    assert probe(project, FLASHPOINT_DOTENV="0") == {"FP_A": None, "FP_B": None}


def test_the_nearest_file_wins_and_none_is_fine(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("FP_A=outer\n")
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / ".env").write_text("FP_A=inner\n")
    assert envfile.find(inner) == inner / ".env"
    assert envfile.find(tmp_path) == tmp_path / ".env"
    empty = tmp_path / "x" / "y"
    empty.mkdir(parents=True)
    assert envfile.find(empty) == tmp_path / ".env"
    (tmp_path / ".env").unlink()
    assert envfile.find(empty) is None
