"""``flashpoint job`` shows a job sent at low priority and every earlier run that ended without ending it."""

from __future__ import annotations

import pytest

from flashpoint.cli.jobs import job_view
from flashpoint.cli.live import SERVER, LivePlane
from flashpoint.cli.output import console

PLANE = LivePlane(pid=4243, url="http://127.0.0.1:9", key=None, kind=SERVER, app="app.py")
PLACEMENT = {"node": "node-a", "gpuModel": "NVIDIA H200", "deviceIds": [0], "simulated": True}


def shown(capsys: pytest.CaptureFixture[str], body: dict[str, object]) -> str:
    console().print(job_view(PLANE, body))
    return capsys.readouterr().out


def test_a_preempted_jobs_attempts_are_listed_with_their_outcome(capsys: pytest.CaptureFixture[str]) -> None:
    body = {
        "id": "j1-fp",
        "status": "IN_QUEUE",
        "reason": "preempted",
        "endpoint": "train",
        "lowPriority": True,
        "attempts": [
            {
                "workerId": "train-w1",
                "placement": PLACEMENT,
                "startedAt": 100.0,
                "endedAt": 142.5,
                "outcome": "preempted",
            },
            {"workerId": "train-w2", "placement": None, "startedAt": None, "endedAt": 150.0, "outcome": "worker_lost"},
        ],
    }
    text = shown(capsys, body)
    assert "priority" in text and "low (runs after its queue's other jobs)" in text
    assert "attempt 1" in text and "preempted (worker train-w1 on" in text and "ran 42.5s" in text
    assert "attempt 2" in text and "worker_lost (worker train-w2" in text


def test_a_job_without_attempts_shows_none(capsys: pytest.CaptureFixture[str]) -> None:
    text = shown(capsys, {"id": "j2-fp", "status": "COMPLETED", "endpoint": "e", "attempts": [], "lowPriority": False})
    assert "attempt" not in text and "priority" not in text
