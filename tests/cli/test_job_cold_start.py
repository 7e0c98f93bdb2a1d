"""``flashpoint job`` and ``flashpoint explain JOB`` say what a job's cold start took, by phase (decision 0118)."""

from __future__ import annotations

import pytest

from flashpoint.cli.explain import Item
from flashpoint.cli.jobs import job_view
from flashpoint.cli.live import SERVER, LivePlane
from flashpoint.cli.output import console
from flashpoint.explain import Explanation

PLANE = LivePlane(pid=4243, url="http://127.0.0.1:9", key=None, kind=SERVER, app="app.py")
COLD = {"devices": 3.0, "process": 0.4, "imports": 2.0, "init": 35.0, "first_job": 0.6}
SENTENCE = "this job waited 41 s on a cold start: 3.0 s for devices, 0.4 s process, 2.0 s imports, 35 s init, 0.6 s"


def shown(capsys: pytest.CaptureFixture[str], body: dict[str, object]) -> str:
    console().print(job_view(PLANE, body))
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("cold", "expected"),
    [
        (COLD, SENTENCE),
        (None, None),  # a job that waited on no start: no row
        ({"devices": "3", "evil": 1, "init": -2}, None),  # what is not a known phase's number is not printed
    ],
)
def test_flashpoint_job_prints_the_cold_start_a_job_waited_on(
    capsys: pytest.CaptureFixture[str], cold: dict[str, object] | None, expected: str | None
) -> None:
    body = {"id": "j1-fp", "status": "COMPLETED", "endpoint": "llm", "coldStart": cold}
    text = " ".join(shown(capsys, body).split())
    if expected is None:
        assert "cold start" not in text
    else:
        assert f"cold start {expected}" in text


def test_explain_of_a_job_prints_the_sentence() -> None:
    item = Item(Explanation("llm", "done", job_id="j1-fp", status="COMPLETED"), "server", cold_start=SENTENCE)
    assert f"  {SENTENCE}" in str(item).split("\n")
