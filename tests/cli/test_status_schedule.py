"""``flashpoint status`` shows a scheduled endpoint's cron (UTC) and next run (decision 0109): the column appears when
some endpoint has a schedule, says when a plane runs none, and ``--json`` carries the row's ``schedule``."""

from __future__ import annotations

import io
from typing import Any

from flashpoint.cli.output import InertConsole
from flashpoint.cli.status import endpoint_status, render, schedule_text

SCHEDULE = {"cron": "0 * * * *", "timezone": "UTC", "active": True, "next": "2027-01-15T09:00:00Z", "nextAt": 0.0}


def row(name: str, schedule: dict[str, Any] | None) -> dict[str, Any]:
    return {"name": name, "kind": "function", "gpu": "NVIDIA H200", "cpu": None, "workers": [], "workersMin": 0,
            "workersMax": 1, "queueDepth": 0, "inFlight": 0, "counters": {}, "explanation": {"summary": "idle"},
            "schedule": schedule}  # fmt: skip


def drawn(rows: list[dict[str, Any]]) -> str:
    devices: list[dict[str, Any]] = []
    body = {"source": "flashpoint serve app.py", "kind": "server", "pid": 1, "url": "http://127.0.0.1:1",
            "app": "app.py", "command": None, "endpoints": [endpoint_status(r, devices, []) for r in rows],
            "gpus": {"total": 0, "held": 0, "free": 0}, "models": []}  # fmt: skip
    out = io.StringIO()
    InertConsole(file=out, width=250).print(render([body], []))
    return out.getvalue()


def test_the_schedule_text() -> None:
    assert schedule_text(SCHEDULE) == "0 * * * * UTC, next 2027-01-15 09:00"
    assert schedule_text(None) == "-"
    idle = {**SCHEDULE, "active": False, "next": None}
    assert schedule_text(idle) == "0 * * * * UTC (not run here: flashpoint serve runs schedules)"


def test_status_shows_the_cron_and_the_next_run_of_scheduled_endpoints() -> None:
    assert endpoint_status(row("hourly", SCHEDULE), [], [])["schedule"] == SCHEDULE  # what --json prints
    text = drawn([row("hourly", SCHEDULE), row("plain", None)])
    assert "schedule" in text and "0 * * * * UTC, next 2027-01-15 09:00" in text
    assert "schedule" not in drawn([row("plain", None)])  # no column where nothing is scheduled
