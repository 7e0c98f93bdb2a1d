"""Text from jobs is inert on a terminal, end to end (issue 20 point 6): a real ``flashpoint serve`` whose worker
prints, returns and raises text that would steer a terminal (OSC 52, a screen clear, a C1 CSI, a carriage return, a bidi
override); its console, and every CLI command against it, print that text escaped, while ``--json`` keeps it exact. The
same for ``flashpoint dev``'s console and a script's embedded plane.

The renderers alone (lease records, fleets, explanations) are tested quickly in ``tests/cli/test_cli_inert.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from flashpoint.cli import app
from tests.conftest import ROOT, SERVER_GPUS, start_serve_process, stop_process, until
from tests.test_terminal import raw_characters

pytestmark = [pytest.mark.slow, pytest.mark.hardening, pytest.mark.timeout(240)]

#: OSC 52 (writes the clipboard), a screen clear, a C1 CSI, a carriage return that rewrites the line, a bidi override
HOSTILE = "A\x1b]52;c;aGFja2Vk\x07B\x1b[2JC\x9b31mD\rE\u202eF"
#: how inert text shows it
SHOWN = "A\\x1b]52;c;aGFja2Vk\\x07B\\x1b[2JC\\x9b31mD\\x0dE\\u202eF"

runner = CliRunner()


def assert_inert(text: str, *, shows: int = 1) -> None:
    """``text`` holds no raw control character and shows the hostile text, escaped, at least ``shows`` times."""
    assert raw_characters(text) == [], text
    assert text.count(SHOWN) >= shows, text


@dataclass
class Hostile:
    """A served hostile app: its URL, state folder, console file, and a completed and a failed job."""

    url: str
    state: Path
    console: Path
    ok: str
    failed: str

    def cli(self, *args: str) -> Any:
        env = {"FLASHPOINT_STATE_DIR": str(self.state), "FLASHPOINT_URL": None, "FLASHPOINT_API_KEY": None}
        return runner.invoke(app, list(args), env=env)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    tmp = tmp_path_factory.mktemp("inert")
    state = tmp / "state"
    console = tmp / "console.log"
    env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS, "FLASHPOINT_STATE_DIR": str(state)}
    env.pop("FLASHPOINT_API_KEY", None)
    command = [sys.executable, "-m", "flashpoint", "serve", str(ROOT / "tests/apps/hostile_text_app.py"), "--port", "0",
               "--db", str(tmp / "jobs.db")]  # fmt: skip
    with console.open("w") as stderr:
        proc, url = start_serve_process(command, env, stderr=stderr)
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            ok = client.post("/v2/hostile/runsync", json={"input": {"text": HOSTILE}}).json()
            assert ok["status"] == "COMPLETED", ok
            bad = client.post("/v2/hostile/runsync", json={"input": {"text": HOSTILE, "fail": True}}).json()
            assert bad["status"] == "FAILED", bad
        # the console's line for the failed job is written once its end is durable: wait for it
        until(lambda: " FAILED in " in console.read_bytes().decode(), 30, "the console's FAILED line")
        yield Hostile(url, state, console, ok["id"], bad["id"])
    finally:
        stop_process(proc)


def test_the_serve_console_prints_worker_lines_and_job_errors_inert(hostile: Hostile) -> None:
    text = hostile.console.read_bytes().decode()

    assert_inert(text, shows=3)
    assert f"stdout line {SHOWN}" in text and f"stderr line {SHOWN}" in text
    (failed,) = [line for line in text.splitlines() if " FAILED in " in line]
    # the line quotes the message's first line, which a carriage return ends (str.splitlines)
    first_line = SHOWN.partition(r"\x0d")[0]
    assert failed.endswith(f"user_error: ValueError: failed with {first_line}")


def test_job_shows_output_error_and_traceback_inert_and_json_keeps_them_exact(hostile: Hostile) -> None:
    ok = hostile.cli("job", hostile.ok)
    assert ok.exit_code == 0, ok.output
    assert raw_characters(ok.stdout) == [], ok.stdout
    # the output is JSON whose escapes are the exact characters
    assert '"echo": "A\\u001b]52;c;aGFja2Vk\\u0007B\\u001b[2JC\\u009b31mD\\rE\\u202eF"' in ok.stdout

    failed = hostile.cli("job", hostile.failed)
    assert failed.exit_code == 0, failed.output
    assert_inert(failed.stdout, shows=2)
    assert f"error: ValueError: failed with {SHOWN}" in failed.stdout
    assert "Traceback (most recent call last)" in failed.stdout

    exact = json.loads(hostile.cli("job", hostile.failed, "--json").stdout)
    assert exact["error"]["message"] == f"failed with {HOSTILE}"
    assert f"ValueError: failed with {HOSTILE}" in exact["error"]["traceback"]
    assert f"stdout line {HOSTILE}" in exact["logs"]
    assert json.loads(hostile.cli("job", hostile.ok, "--json").stdout)["output"] == {"echo": HOSTILE, HOSTILE: 1}
    listed = {job["id"]: job for job in json.loads(hostile.cli("jobs", "--json").stdout)["jobs"]}
    assert listed[hostile.failed]["error"]["message"] == f"failed with {HOSTILE}"


def test_logs_print_each_line_inert(hostile: Hostile) -> None:
    result = hostile.cli("logs", hostile.ok)

    assert result.exit_code == 0, result.output
    assert_inert(result.stdout, shows=2)
    assert f"stdout line {SHOWN}\n" in result.stdout and f"stderr line {SHOWN}\n" in result.stdout


def test_call_prints_json_that_parses_exactly_and_a_failure_inert(hostile: Hostile) -> None:
    done = hostile.cli("call", "hostile", json.dumps({"text": HOSTILE}))
    assert done.exit_code == 0, done.output
    assert raw_characters(done.stdout) == [], done.stdout
    assert json.loads(done.stdout) == {"echo": HOSTILE, HOSTILE: 1}

    failed = hostile.cli("call", "hostile", json.dumps({"text": HOSTILE, "fail": True}))
    assert failed.exit_code == 1
    assert_inert(failed.stderr, shows=2)  # the error line and the traceback's last line


# ----------------------------------------------------------------------------------------------------------------
# flashpoint dev, and a script's embedded plane

HOSTILE_FILE = """
from runpod_flash import Endpoint


@Endpoint(name="hostile", cpu="cpu3c-1-2")
def hostile(text: str) -> dict:
    print("worker says " + text)
    raise ValueError("failed with " + text)
"""
BROKEN_FILE = f"""
raise RuntimeError({HOSTILE!r})
"""


def start_dev(tmp_path: Path, root: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """``flashpoint dev ROOT`` on any free port, its stdout and stderr into files."""
    env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1", "FLASHPOINT_CPUS": "4",
           "FLASHPOINT_MEMORY_GB": "16", "FLASHPOINT_STATE_DIR": str(tmp_path / "state")}  # fmt: skip
    env.pop("FLASHPOINT_API_KEY", None)
    env.pop("FLASHPOINT_URL", None)
    out, err = tmp_path / "dev.out", tmp_path / "dev.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flashpoint", "dev", str(root), "--host", "127.0.0.1", "--port", "0"],
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=stderr,
        )
    return proc, out, err


def test_the_dev_console_prints_worker_lines_tracebacks_and_load_errors_inert(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "hostile.py").write_text(textwrap.dedent(HOSTILE_FILE))
    proc, out, err = start_dev(tmp_path, root)
    try:
        line = until(
            lambda: re.search(r"flashpoint dev serving (http://\S+)", out.read_bytes().decode()),
            90,
            "flashpoint dev to say where it serves",
        )
        assert line is not None
        answer = httpx.post(f"{line.group(1)}/hostile/runsync", json={"input": {"text": HOSTILE}}, timeout=120)
        assert answer.status_code == 500 and HOSTILE in answer.json()["error"]  # the HTTP answer is exact JSON
        until(lambda: "Traceback" in err.read_bytes().decode(), 30, "the console's traceback")
        # a file that fails to load on a reload: the console says so, with its error
        (root / "broken.py").write_text(textwrap.dedent(BROKEN_FILE))
        until(lambda: "broken.py failed to load" in out.read_bytes().decode(), 60, "the load error")
    finally:
        stop_process(proc, signal.SIGINT)
    said, logged = out.read_bytes().decode(), err.read_bytes().decode()
    assert_inert(said)
    assert_inert(logged, shows=2)
    assert f"worker says {SHOWN}" in logged and f"ValueError: failed with {SHOWN}" in logged


def test_a_file_that_fails_to_load_at_the_start_is_one_inert_error_line(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "broken.py").write_text(textwrap.dedent(BROKEN_FILE))
    proc, out, err = start_dev(tmp_path, root)
    try:
        proc.wait(90)
    finally:
        stop_process(proc, signal.SIGINT)

    assert proc.returncode == 1
    text = err.read_bytes().decode()
    assert text.startswith("Error: ") and "broken.py" in text
    assert_inert(text)


SCRIPT = f"""
import asyncio

from flashpoint import Endpoint


@Endpoint(name="hostile", cpu="cpu3c-1-2")
def hostile(text: str) -> str:
    print("worker says " + text)
    return "done"


print(asyncio.run(hostile({HOSTILE!r})))
"""


def test_a_scripts_worker_lines_reach_its_terminal_inert(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "FLASHPOINT_CPUS": "4", "FLASHPOINT_MEMORY_GB": "16", "FLASHPOINT_STATE_DIR": str(tmp_path)}
    env.pop("FLASHPOINT_URL", None)

    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, timeout=180, check=False
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "done\n"
    assert_inert(done.stderr.decode())
    assert f"worker says {SHOWN}" in done.stderr.decode()
