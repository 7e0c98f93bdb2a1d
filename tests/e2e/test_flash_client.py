"""Unmodified Runpod Flash code on flashpoint, end to end (issue 11, point 6).

- Flash's own client: runpod-flash 1.21 (installed from the registry into a virtual environment of its own, the
  ``flash_venv`` fixture) runs ``tests/apps/flash_script.py`` as ``python flash_script.py`` against a real
  ``flashpoint serve tests/apps/flash_app.py``, with ``RUNPOD_ENDPOINT_BASE_URL`` pointing at it. Every other Runpod
  URL and any proxied request point at a closed loopback port: nothing leaves this machine.
- ``flashpoint run flash_script.py`` in this environment, where runpod-flash is not installed: the same script, its
  endpoints on the embedded server and real workers.

Simulated GPUs only (``FLASHPOINT_SIMULATED_GPUS``). Without network the Flash install fails: those tests are skipped
locally and fail in CI.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flashpoint.flash import alias
from tests.conftest import ROOT, SERVER_GPUS, Served
from tests.flashvenv import FlashVenv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

APP = "tests/apps/flash_app.py"
SCRIPT = ROOT / "tests" / "apps" / "flash_script.py"
#: a closed port on loopback: Flash's other URLs and any proxied request fail here instead of reaching the internet
NOWHERE = "http://127.0.0.1:9"

#: what every call of the script returns, whichever way it runs
OUTPUTS = {
    "add": 5,  # positional arguments
    "greet": "hello ada!",  # a sync def, with a default
    "clear": None,  # no arguments, no output
    "double": 42,  # a class method
    "shout": "HI!",  # two functions sharing the endpoint name fp-text
    "count_words": 3,
}


def results(stdout: str) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {line["call"]: line for line in lines}


def check_common(got: dict[str, dict[str, Any]]) -> None:
    for call, output in OUTPUTS.items():
        assert got[call] == {"call": call, "output": output}
    # the class ran on a flashpoint worker on a simulated GPU
    assert got["describe"]["output"]["kind"] == "calculator"
    assert got["describe"]["output"]["gpu"] in ("NVIDIA H200", "NVIDIA A100 80GB PCIe")


def test_flashpoint_stands_in_for_every_public_flash_name(flash_venv: FlashVenv, tmp_path: Path) -> None:
    code = "import json, runpod_flash; print(json.dumps(runpod_flash.__all__))"
    listed = subprocess.run(
        [str(flash_venv.python), "-c", code],
        cwd=tmp_path,
        env=flash_venv.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert tuple(json.loads(listed.stdout)) == alias.FLASH_NAMES


def test_flashs_own_client_calls_a_served_flash_app(
    flash_venv: FlashVenv, serve: Callable[..., Served], tmp_path: Path
) -> None:
    # Given `flashpoint serve` on the unmodified Flash app (runpod_flash is flashpoint there)
    served = serve(app=APP, key="flash-client-key")
    env = flash_venv.env(
        RUNPOD_ENDPOINT_BASE_URL=f"{served.url}/v2",
        RUNPOD_API_KEY=served.key,
        FLASH_APP="flashpoint-e2e",
        FLASH_ENV="test",
        RUNPOD_API_BASE_URL=NOWHERE,
        RUNPOD_REST_API_URL=NOWHERE,
        RUNPOD_HAPI_URL=NOWHERE,
        RUNPOD_CONSOLE_URL=NOWHERE,
        HTTP_PROXY=NOWHERE,
        HTTPS_PROXY=NOWHERE,
        ALL_PROXY=NOWHERE,
        NO_PROXY="127.0.0.1,localhost",
    )

    # When Flash's client runs the unmodified script (`python flash_script.py`) against it
    run = subprocess.run(
        [str(flash_venv.python), str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )

    # Then every call returns what it returns on Runpod, and failures raise what Flash raises
    assert run.returncode == 0, run.stderr
    assert "Warning" not in run.stderr, run.stderr  # no sunset notice, no URL-override warning
    got = results(run.stdout)
    check_common(got)
    assert got["explode"] == {
        "call": "explode",
        "error": "RuntimeError",
        "message": "remote execution failed: ValueError: exploded: boom",
    }
    # declared in the script only: not served, which Flash reports as an endpoint not deployed
    assert got["triple"]["error"] == "RuntimeError"
    assert got["triple"]["message"].startswith(
        "endpoint 'fp-script-local' not found in app 'flashpoint-e2e' environment 'test'"
    )


def test_flashpoint_run_runs_the_flash_script_here(tmp_path: Path) -> None:
    # Given this environment, where runpod-flash is not installed
    assert importlib.util.find_spec("runpod_flash") is None
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS,
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "FLASHPOINT_TAKE_HOLD_S": "5",
    }
    env.pop("FLASHPOINT_URL", None)  # the embedded default

    # When `flashpoint run` runs the unmodified script
    run = subprocess.run(
        [sys.executable, "-m", "flashpoint", "run", str(SCRIPT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    # Then its endpoints ran on this machine's (simulated) GPUs, the script's own one too (shipped by cloudpickle,
    # which names the runpod_flash module its code uses: the worker resolves it to flashpoint)
    assert run.returncode == 0, run.stderr
    got = results(run.stdout)
    check_common(got)
    assert got["triple"] == {"call": "triple", "output": {"triple": 9, "group": "any"}}
    # flashpoint raises the remote ValueError as its own type (a JobFailedError too: jobhandle.remote_kind)
    assert got["explode"]["error"] == "ValueError" and "ValueError: exploded: boom" in got["explode"]["message"]
