"""A job answered with an id survives kill -9 of the server: after a restart every job completes exactly once."""

from __future__ import annotations

import collections
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_kill_9_with_500_queued_jobs_then_restart_completes_each_once(serve: Any, tmp_path: Path) -> None:
    db, log, gate = tmp_path / "jobs.db", tmp_path / "ran.log", tmp_path / "gate"
    first = serve(db=db)
    with httpx.Client(base_url=first.url, headers=first.headers, timeout=30) as client:
        done = client.post("/v2/echo/runsync", json={"input": {"kept": "until its TTL"}}).json()
        assert done["status"] == "COMPLETED"
        ids = []
        for n in range(500):
            answer = client.post("/v2/record/run", json={"input": {"n": n, "log": str(log), "gate": str(gate)}})
            assert answer.status_code == 200, answer.text
            ids.append(answer.json()["id"])
        queued = client.get("/v2/record/health").json()["jobs"]
        assert queued["inQueue"] + queued["inProgress"] == 500
    first.stop(signal.SIGKILL)

    second = serve(db=db)
    gate.touch()
    with httpx.Client(base_url=second.url, headers=second.headers, timeout=30) as client:
        deadline = time.monotonic() + 180
        while True:
            finished = client.get("/v1/jobs", params={"endpoint": "record", "status": "COMPLETED", "limit": 1000})
            count = len(finished.json()["jobs"])
            if count == 500:
                break
            assert time.monotonic() < deadline, f"only {count} of 500 jobs completed after the restart"
            time.sleep(0.2)
        statuses = {client.get(f"/v2/record/status/{job_id}").json()["status"] for job_id in ids}
        assert statuses == {"COMPLETED"}
        assert client.get("/v2/record/health").json()["jobs"]["completed"] == 500  # none completed twice
        kept = client.get(f"/v2/echo/status/{done['id']}").json()
        assert kept["status"] == "COMPLETED" and kept["output"]["payload"] == {"kept": "until its TTL"}
    runs = collections.Counter(int(line) for line in log.read_text().split())
    assert sorted(runs) == list(range(500))
    assert set(runs.values()) == {1}  # the gate held every handler until after the kill: each ran once
