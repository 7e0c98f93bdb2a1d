"""A real ``flashpoint serve --data-dir`` process (hosting/server.py, cli/serve.py): a worker gets the secrets its
endpoint names in its environment, and the value is in no HTTP answer, log line or database byte; an endpoint naming
a secret that is not set stops the server at start with the secret's name."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from flashpoint.hosting.secretstore import SecretStore
from tests.conftest import ROOT, SERVER_GPUS, start_serve_process, stop_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

VALUE = "sk-live-9f8e7d6c5b4a-not-for-logs"
KEY = "test-key"

APP = textwrap.dedent(
    """
    import hashlib
    import os

    from flashpoint import Endpoint, GpuGroup, Secret


    @Endpoint(
        name="tok",
        gpu=GpuGroup.ANY,
        env={"T": Secret("api-token"), "U": "Bearer {{ RUNPOD_SECRET_api-token }}", "PLAIN": "p"},
    )
    async def tok(data: dict) -> dict:
        return {
            name: hashlib.sha256(os.environ[name].encode()).hexdigest() for name in ("T", "U")
        } | {"plain": os.environ["PLAIN"]}
    """
)


def environment(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": SERVER_GPUS,
        "FLASHPOINT_API_KEY": KEY,
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "FLASHPOINT_TAKE_HOLD_S": "5",
    }


def command(tmp_path: Path, app: Path) -> list[str]:
    db, data = tmp_path / "jobs.db", tmp_path / "data"
    return [sys.executable, "-m", "flashpoint", "serve", str(app), "--port", "0", "--db", str(db), "--data-dir",
            str(data), "--log-level", "debug"]  # fmt: skip


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_workers_get_the_value_and_nothing_shows_it(tmp_path: Path) -> None:
    SecretStore(tmp_path / "data" / "secrets").set("api-token", VALUE)
    app = tmp_path / "secret_app.py"
    app.write_text(APP)
    stderr_path = tmp_path / "stderr.log"
    with open(stderr_path, "w") as stderr:
        proc, url = start_serve_process(command(tmp_path, app), environment(tmp_path), stderr=stderr)
        try:
            answers = []
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as client:
                done = client.post("/v2/tok/runsync", json={"input": {"data": {"x": 1}}})
                answers.append(done.text)
                assert done.json().get("status") == "COMPLETED", done.text
                assert done.json()["output"] == {"T": sha(VALUE), "U": sha(f"Bearer {VALUE}"), "plain": "p"}
                job_id = done.json()["id"]
                for path in ("/v2/tok/health", f"/v2/tok/status/{job_id}", "/v1/endpoints", "/v1/endpoints/tok",
                             "/v1/jobs", f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/logs", "/metrics"):  # fmt: skip
                    answer = client.get(path)
                    assert answer.status_code == 200, (path, answer.text)
                    answers.append(answer.text)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=60)  # every line it printed, until it exits
            except subprocess.TimeoutExpired:
                stop_process(proc, None)
                raise
    logs = out + stderr_path.read_text()
    assert len(answers) == 9 and job_id in answers[0]
    assert VALUE not in "".join(answers)
    assert "tok" in logs and VALUE not in logs
    database = b"".join(p.read_bytes() for p in tmp_path.glob("jobs.db*"))
    assert database and VALUE.encode() not in database


def test_an_endpoint_naming_a_missing_secret_stops_serve_with_its_name(tmp_path: Path) -> None:
    app = tmp_path / "secret_app.py"
    app.write_text(APP)
    ran = subprocess.run(
        command(tmp_path, app), cwd=ROOT, env=environment(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert ran.returncode != 0
    said = ran.stdout + ran.stderr
    assert "api-token" in said and "flashpoint secret set" in said and "--data-dir" in said, said
    # what the message says to do, with no server running, lets the server start
    data = str(tmp_path / "data")
    set_it = subprocess.run(
        [sys.executable, "-m", "flashpoint", "secret", "set", "api-token", "--data-dir", data],
        input=VALUE, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert set_it.returncode == 0, set_it.stderr
    proc, _ = start_serve_process(command(tmp_path, app), environment(tmp_path))
    stop_process(proc)
