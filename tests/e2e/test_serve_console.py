"""The ``flashpoint serve`` console end to end: a line per finished job (where it ran, why it failed), Runpod handler
workers' DEBUG lines only with ``--log-level debug``, and a port already in use as one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, SERVER_GPUS, start_serve_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def serve_console(tmp_path: Path, *args: str) -> str:
    """Serve the handler app, run one job that completes and one that fails, stop: the console's output."""
    log = tmp_path / "console.log"
    env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS, "FLASHPOINT_STATE_DIR": str(tmp_path / "state")}
    env.pop("FLASHPOINT_API_KEY", None)
    command = [sys.executable, "-m", "flashpoint", "serve", str(ROOT / "tests/apps/handlers_app.py"), "--port", "0",
               "--db", str(tmp_path / "jobs.db"), *args]  # fmt: skip
    with log.open("w") as stderr:
        proc, url = start_serve_process(command, env, stderr=stderr)
        try:
            ok = httpx.post(f"{url}/v2/echo/runsync", json={"input": {"text": "hi"}}, timeout=90).json()
            assert ok["status"] == "COMPLETED", ok
            bad = httpx.post(f"{url}/v2/errors/runsync", json={"input": {"mode": "raise", "why": "x"}}, timeout=90)
            assert bad.json()["status"] == "FAILED"
        finally:
            proc.terminate()
            proc.wait(30)
            assert proc.stdout is not None
            proc.stdout.close()
    return log.read_text()


def test_a_line_per_finished_job_and_no_worker_debug_lines_at_info(tmp_path: Path) -> None:
    text = serve_console(tmp_path)
    assert "COMPLETED in " in text and "on NVIDIA H200 (simulated) [0]" in text
    failed = [line for line in text.splitlines() if " FAILED in " in line]
    assert len(failed) == 1 and "WARNING" in failed[0] and "user_error: ValueError: raised x" in failed[0]
    assert "DEBUG  |" not in text  # Runpod's worker logs at INFO unless asked


def test_log_level_debug_shows_the_workers_own_debug_lines(tmp_path: Path) -> None:
    assert "DEBUG  |" in serve_console(tmp_path, "--log-level", "debug")


def test_log_level_warning_keeps_failures_only_and_a_bad_level_is_refused(tmp_path: Path) -> None:
    text = serve_console(tmp_path, "--log-level", "warning")
    assert " FAILED in " in text and " COMPLETED in " not in text
    done = subprocess.run(
        [sys.executable, "-m", "flashpoint", "serve", str(ROOT / "tests/apps/handlers_app.py"), "--log-level", "loud"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.strip().startswith("Error: --log-level is one of debug, info")


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS, "FLASHPOINT_STATE_DIR": str(tmp_path / "s")}
        done = subprocess.run(
            [sys.executable, "-m", "flashpoint", "serve", str(ROOT / "tests/apps/runpod_app.py"), "--port", str(port),
             "--db", str(tmp_path / "jobs.db")],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"Error: port {port} on 127.0.0.1 is already in use (another flashpoint serve? `flashpoint status` lists this "
        "machine's); pick another with --port, or --port 0 for a free one"
    ]
