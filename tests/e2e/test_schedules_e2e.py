"""A cron schedule on a real `flashpoint serve` with the real clock (decision 0109): an endpoint scheduled for the next
whole minute runs a real worker's job then, which ``GET /v1/schedules/{endpoint}`` and ``flashpoint status`` show.
Waits up to about a minute for the fire time: polled, bounded, no sleep as synchronisation."""

from __future__ import annotations

import json
import math
import textwrap
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashpoint.cli import app as cli_app
from tests.conftest import Served, native, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

APP = textwrap.dedent(
    """
    import dataclasses, os
    from flashpoint import Endpoint, GpuType

    # what Runpod SDK 2.x's @schedule(cron=...) sets on a resource's spec, written here on a flashpoint endpoint
    tick = Endpoint(name="tick", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    tick.spec = dataclasses.replace(tick.spec, schedule=os.environ["TICK_CRON"])

    @tick
    async def ticked() -> dict:
        return {"ticked": True}
    """
)


def next_minute_cron() -> tuple[str, float]:
    """A cron expression for the next whole minute (UTC) at least 10 s away, and that minute's epoch seconds."""
    due = math.ceil(time.time() / 60) * 60
    if due - time.time() < 10:
        due += 60
    at = datetime.fromtimestamp(due, tz=timezone.utc)
    return f"{at.minute} {at.hour} {at.day} {at.month} *", float(due)


def test_a_schedule_runs_a_real_job_at_its_fire_time(serve: Callable[..., Served], tmp_path: Path) -> None:
    # Given a server with an endpoint scheduled for the next minute
    (tmp_path / "scheduled_app.py").write_text(APP)
    cron, due = next_minute_cron()
    served = serve(app=str(tmp_path / "scheduled_app.py"), env={"TICK_CRON": cron})
    (listed,) = native(served, "/schedules")["schedules"]
    assert listed["cron"] == cron and listed["active"] and listed["nextAt"] == due

    # When the minute comes, then one job runs on a real worker and the history says so
    def finished() -> dict[str, Any] | None:
        runs = native(served, "/schedules/tick")["runs"]
        return runs[0] if runs and runs[0]["jobStatus"] == "COMPLETED" else None

    run = until(finished, timeout=due - time.time() + 60, what="the scheduled run to complete", interval=0.5)
    assert run["outcome"] == "submitted" and run["due"] == due
    job = native(served, f"/jobs/{run['jobId']}")
    assert job["output"] == {"ticked": True} and job["submittedBy"] == f"schedule:{cron}"
    assert job["createdAt"] >= due

    # And flashpoint status shows the cron and the next run (a year on: the expression names a day and month)
    env = {"FLASHPOINT_STATE_DIR": str(tmp_path / "state"), "FLASHPOINT_URL": None, "FLASHPOINT_API_KEY": None}
    shown = CliRunner().invoke(cli_app, ["status", "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    (plane,) = json.loads(shown.stdout)["planes"]
    (endpoint,) = plane["endpoints"]
    assert endpoint["schedule"]["cron"] == cron and endpoint["schedule"]["active"]
    drawn = CliRunner().invoke(cli_app, ["status"], env=env)
    assert f"{cron} UTC, next" in drawn.stdout
