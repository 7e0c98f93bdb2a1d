"""A real ``flashpoint serve --data-dir`` process (hosting/server.py, cli/serve.py): a worker gets the secrets its
endpoint names in its environment, and the value is in no HTTP answer, log line or database byte; an endpoint naming
a secret that is not set stops the server at start with the secret's name. A deployed endpoint gets its app's secret,
an app without one is refused at upload with the secret's name, and no other app sees it (decision 0103)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from flashpoint.hosting.artifacts import pack
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


#: a deployed project whose endpoint reads secret ``tok`` both ways and answers with the values' hashes
DEPLOYED = textwrap.dedent(
    """
    import hashlib
    import os

    from flashpoint import Endpoint, GpuGroup, Secret


    @Endpoint(name="reader", gpu=GpuGroup.ANY, workers=(0, 1),
              env={"T": Secret("tok"), "U": "Bearer {{ RUNPOD_SECRET_tok }}"})
    async def reader(x: int = 0) -> dict:
        return {name: hashlib.sha256(os.environ[name].encode()).hexdigest() for name in ("T", "U")}
    """
)
OTHER_VALUE = "sk-other-app-3c2b1a-also-not-for-logs"


def settled_rollout(http: httpx.Client, app: str, number: int) -> dict[str, object]:
    """Poll version ``number`` of ``app``/production until its rollout ends (bounded)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rollout: dict[str, object] = http.get(f"/v1/apps/{app}/envs/production/versions/{number}").json()
        if rollout["state"] != "pending":
            return rollout
        time.sleep(0.1)
    raise AssertionError(f"version {number} of {app}/production still rolling out")


def test_a_deployed_endpoint_gets_its_apps_secret_and_no_other_app_does(tmp_path: Path) -> None:
    data = tmp_path / "data"
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.py").write_text(DEPLOYED)
    packed = pack(folder).data
    stderr_path = tmp_path / "stderr.log"
    command = [sys.executable, "-m", "flashpoint", "serve", "--port", "0", "--data-dir", str(data), "--log-level",
               "debug"]  # fmt: skip
    answers: list[str] = []
    with open(stderr_path, "w") as stderr:
        proc, url = start_serve_process(command, environment(tmp_path), stderr=stderr)
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:

                def deploy(app: str) -> httpx.Response:
                    answer = http.post(f"/v1/apps/{app}/envs/production/versions", content=packed,
                                       headers={"Content-Type": "application/gzip"})  # fmt: skip
                    answers.append(answer.text)
                    return answer

                # shop's own secret over HTTP; "other" has one of the same name in the store; lab has none
                put = http.put("/v1/secrets/tok", params={"app": "shop"}, json={"value": VALUE})
                assert put.status_code == 200, put.text
                SecretStore(data / "secrets").set("tok", OTHER_VALUE, app="other")

                accepted = deploy("shop")
                assert accepted.status_code == 202, accepted.text
                rollout = settled_rollout(http, "shop", accepted.json()["version"])
                answers.append(json.dumps(rollout))
                assert rollout["state"] == "serving", rollout
                done = http.post("/v2/shop.production.reader/runsync", json={"input": {"x": 1}})
                answers.append(done.text)
                assert done.json().get("status") == "COMPLETED", done.text
                assert done.json()["output"] == {"T": sha(VALUE), "U": sha(f"Bearer {VALUE}")}
                job_id = done.json()["id"]

                # the same endpoint in an app with no such secret: refused at upload, naming it, with no version
                refused = deploy("lab")
                assert refused.status_code == 400, refused.text
                assert refused.json()["code"] == "missing_secret"
                message = refused.json()["message"]
                assert "tok" in message and "`flashpoint secret set tok --app lab`" in message, message
                assert "no version was made" in message
                assert http.get("/v1/apps/lab").status_code == 404

                # another app's secret of the same name is its own: shop's value never reaches it
                other = deploy("other")
                assert other.status_code == 202, other.text
                assert settled_rollout(http, "other", other.json()["version"])["state"] == "serving"
                theirs = http.post("/v2/other.production.reader/runsync", json={"input": {"x": 2}})
                answers.append(theirs.text)
                assert theirs.json()["output"] == {"T": sha(OTHER_VALUE), "U": sha(f"Bearer {OTHER_VALUE}")}

                # every view of it: env get, jobs, endpoints, the dashboard's data, the secrets list, metrics
                env, ep = "/v1/apps/shop/envs/production", "shop.production.reader"
                for path in ("/v1/apps/shop", env, f"{env}/versions/1", f"/v2/{ep}/health", f"/v2/{ep}/status/{job_id}",
                             "/v1/endpoints", f"/v1/endpoints/{ep}", "/v1/jobs", f"/v1/jobs/{job_id}",
                             f"/v1/jobs/{job_id}/logs", "/v1/fleet", "/v1/secrets", "/v1/secrets?app=shop",
                             "/metrics"):  # fmt: skip
                    answer = http.get(path)
                    assert answer.status_code == 200, (path, answer.text)
                    answers.append(answer.text)
                assert "shop.production.reader" in http.get("/v1/endpoints").text
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                stop_process(proc, None)
                raise
    logs = out + stderr_path.read_text()
    shown = "".join(answers)
    assert len(answers) == 20 and job_id in shown
    for value in (VALUE, OTHER_VALUE):
        assert value not in shown
        assert value not in logs
    assert "shop.production.reader" in logs
    # no byte of any file in the data directory holds a value, the secrets file apart (jobs.db, deployments.db, ...)
    files = [p for p in data.rglob("*") if p.is_file() and p.parent != data / "secrets"]
    assert {p.name for p in files} >= {"jobs.db", "deployments.db"}
    for path in files:
        held = path.read_bytes()
        assert VALUE.encode() not in held and OTHER_VALUE.encode() not in held, path
