"""``GET /v1/schedules`` and ``GET /v1/schedules/{endpoint}`` (decision 0109): bodies that fit their documented
schemas, in the OpenAPI schema; every key answered as the access rule says (the scope matrix's ``check_rows``); a list
that shows only the schedules of the endpoints a key sees."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import textwrap
from importlib import resources
from pathlib import Path

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.access import Operation, endpoint_visible
from flashpoint.api import schemas
from flashpoint.api.guard import app_env_of
from flashpoint.api.native import create_native_app
from flashpoint.scheduler.loop import ControlPlane
from tests.api.test_native import AUTH, KEY, check, check_error, get
from tests.api.test_scope_matrix import KEYS, NO_KEY, Matrix, Row, check_rows, matrix  # noqa: F401 (a fixture)
from tests.scheduler.door import TARGET, Door, open_door

pytestmark = pytest.mark.timeout(60)

EVERY_5 = "*/5 * * * *"
#: scheduled endpoints beside the matrix's: one of app shop's production, one of another app, one of no app
SCHEDULED = ("shop.prod.nightly", "other.prod.nightly", "hourly")


def scheduled(plane: ControlPlane, key: str) -> None:
    parts = key.split(".")
    app, env, name = (parts[0], parts[1], parts[2]) if len(parts) == 3 else (None, None, key)
    spec = dataclasses.replace(
        Endpoint(name=name, gpu=GpuType.NVIDIA_H200).spec, app=app, app_env=env, schedule=EVERY_5
    )
    plane.register(spec, TARGET)


async def scheduling_door() -> Door:
    door = await open_door(run_schedules=True)
    scheduled(door.plane, "hourly")
    await door.step(5 * 60)  # 08:05: one run
    return door


async def test_the_list_and_a_history_fit_their_schemas() -> None:
    door = await scheduling_door()
    door.endpoint(name="plain", gpu=GpuType.NVIDIA_H200)
    app = create_native_app(door.plane, (KEY,))

    listed = await get(app, "/schedules")
    assert listed.status_code == 200
    (row,) = listed.json()["schedules"]  # the endpoint without a schedule is not listed
    check(schemas.Schedule, row)
    assert row["endpoint"] == "hourly" and row["cron"] == EVERY_5 and row["next"] == "2027-01-15T08:10:00Z"
    assert row["last"]["outcome"] == "submitted" and row["last"]["jobStatus"] == "IN_QUEUE"
    check(schemas.ScheduleRun, row["last"])

    history = await get(app, "/schedules/hourly?limit=10")
    assert history.status_code == 200
    body = history.json()
    check(schemas.ScheduleHistory, body)
    (run,) = body["runs"]
    assert run["dueIso"] == "2027-01-15T08:05:00Z" and run["jobId"] == door.plane.store.list()[0].id

    (endpoint,) = [e for e in (await get(app, "/endpoints")).json()["endpoints"] if e["name"] == "hourly"]
    check(schemas.Endpoint, endpoint)
    assert endpoint["schedule"]["next"] == "2027-01-15T08:10:00Z"

    check_error(await get(app, "/schedules/nothing"), 404, "not_found")
    check_error(await get(app, "/schedules/hourly?limit=0"), 400, "bad_request")
    check_error(await get(app, "/schedules", headers={}), 401, "unauthorized")
    assert (await get(app, "/schedules/plain", headers=AUTH)).json()["cron"] is None


async def test_the_routes_are_in_the_openapi_schema() -> None:
    door = await open_door()
    paths = create_native_app(door.plane, (KEY,)).openapi()["paths"]
    assert "/schedules" in paths and "/schedules/{endpoint}" in paths
    assert paths["/schedules"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Schedules"
    }


@pytest.mark.parametrize("key", list(KEYS))
async def test_a_history_is_read_of_its_endpoint(matrix: Matrix, key: str) -> None:  # noqa: F811
    rows = [
        Row("schedule history", "GET", "/v1/schedules/shop.prod.embed", Operation.READ, "shop", "prod", endpoint=True),
        Row("schedule history of no app", "GET", "/v1/schedules/plain", Operation.READ, endpoint=True),
    ]
    problems = await check_rows(matrix, key, rows)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("key", [k for k in KEYS if k not in NO_KEY])
async def test_the_list_shows_only_what_the_key_sees(matrix: Matrix, key: str) -> None:  # noqa: F811
    for endpoint in SCHEDULED:
        scheduled(matrix.plane, endpoint)
    who = matrix.principals[key]
    async with matrix.client(key) as client:
        listed = await client.get("/v1/schedules")
        only_shop = await client.get("/v1/schedules?app=shop")
    assert listed.status_code == 200, listed.text
    shown = {row["endpoint"] for row in listed.json()["schedules"]}
    assert shown == {ep for ep in SCHEDULED if endpoint_visible(who, *app_env_of(ep))}
    assert {row["endpoint"] for row in only_shop.json()["schedules"]} == shown & {"shop.prod.nightly"}


def test_the_dashboard_shows_an_endpoint_s_cron_and_next_run(tmp_path: Path) -> None:
    fleet = (resources.files("flashpoint") / "dashboard" / "fleet.js").read_text()
    assert 'fact("schedule", scheduleText(ep.schedule))' in fleet  # a fact: text, never markup
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    for name in ("fleet.js", "dom.js", "state.js", "api.js"):
        (tmp_path / name).write_text((resources.files("flashpoint") / "dashboard" / name).read_text())
    (tmp_path / "check.mjs").write_text(
        textwrap.dedent(
            """
            globalThis.sessionStorage = { getItem: () => null };
            const { scheduleText } = await import("./fleet.js");
            const on = { cron: "0 * * * *", active: true, next: "2027-01-15T09:00:00Z" };
            console.log(JSON.stringify([scheduleText(on), scheduleText({ ...on, active: false, next: null })]));
            """
        )
    )
    done = subprocess.run([node, "check.mjs"], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        "0 * * * * (UTC) · next 2027-01-15 09:00 UTC",
        "0 * * * * (UTC) · not run by this plane (flashpoint serve runs schedules)",
    ]
