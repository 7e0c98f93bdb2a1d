"""``GET /v1/endpoints`` and ``GET /v1/jobs`` by app and environment (decision 0102): every row says its ``app`` and
``env``, and ``?app=``/``?env=`` filter before the limit. In-process (ASGI) over a door plane, as tests/api/test_native.

Covers ``flashpoint.api.native``'s filters; tests/api/test_native.py covers the rest of the module."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from flashpoint import Endpoint
from flashpoint.access import Principal
from flashpoint.api import native, schemas
from flashpoint.api.guard import SCOPED_PREFIX
from flashpoint.api.native import create_native_app
from flashpoint.jobs import Job
from tests.api.test_native import AUTH, KEY, check, check_error, get
from tests.scheduler.door import TARGET, Door, open_door

pytestmark = pytest.mark.timeout(30)

#: endpoint ids (or bare names, outside any app) the tests register: a GPU the fleet lacks, so jobs stay queued
KEYS = ("shop.production.embed", "shop.staging.embed", "blog.production.embed", "local")


async def plane_of_apps() -> Door:
    door = await open_door("node-a=NVIDIA_H200:1")
    for key in KEYS:
        parts = key.split(".")
        spec = Endpoint(name=parts[-1], gpu="NVIDIA B200").spec
        if len(parts) == 3:
            spec = dataclasses.replace(spec, app=parts[0], app_env=parts[1])
        door.plane.register(spec, TARGET)
    return door


def submit(door: Door, key: str, n: int = 0) -> Job:
    job = door.submit(key, n)
    door.clock.advance(0.01)  # distinct creation times
    return job


def names(body: dict[str, Any], field: str = "name") -> list[str]:
    return [row[field] for row in body["endpoints" if "endpoints" in body else "jobs"]]


async def test_endpoint_rows_say_their_app_and_env_and_filter_by_them() -> None:
    app = create_native_app((await plane_of_apps()).plane, (KEY,))

    every = (await get(app, "/endpoints")).json()
    shop = (await get(app, "/endpoints?app=shop")).json()
    production = (await get(app, "/endpoints?env=production")).json()
    one = (await get(app, "/endpoints?app=shop&env=staging")).json()
    none = (await get(app, "/endpoints?app=nobody")).json()
    single = (await get(app, "/endpoints/shop.staging.embed")).json()
    bare = (await get(app, "/endpoints/local")).json()

    check(schemas.Endpoints, every)
    for row in every["endpoints"]:
        check(schemas.Endpoint, row)
    rows = {row["name"]: (row["app"], row["env"]) for row in every["endpoints"]}
    assert rows == {
        "shop.production.embed": ("shop", "production"),
        "shop.staging.embed": ("shop", "staging"),
        "blog.production.embed": ("blog", "production"),
        "local": (None, None),
    }
    assert sorted(names(shop)) == ["shop.production.embed", "shop.staging.embed"]
    assert sorted(names(production)) == ["blog.production.embed", "shop.production.embed"]  # not `local`
    assert names(one) == ["shop.staging.embed"]
    assert none == {"endpoints": []}
    check(schemas.Endpoint, single)
    assert (single["app"], single["env"], bare["app"], bare["env"]) == ("shop", "staging", None, None)


async def test_job_rows_say_their_app_and_env_and_the_filter_comes_before_the_limit() -> None:
    door = await plane_of_apps()
    old_shop = [submit(door, "shop.production.embed", n) for n in range(3)]
    staging = submit(door, "shop.staging.embed")
    newer = [submit(door, "blog.production.embed", n) for n in range(10)] + [submit(door, "local")]
    app = create_native_app(door.plane, (KEY,))

    shop = (await get(app, "/jobs?app=shop&limit=2")).json()
    production = (await get(app, "/jobs?app=shop&env=production")).json()
    blog = (await get(app, "/jobs?env=production&limit=3")).json()
    by_name = (await get(app, "/jobs?endpoint=embed&app=shop&env=staging")).json()
    detail = (await get(app, f"/jobs/{staging.id}")).json()
    local = (await get(app, "/jobs?limit=1")).json()

    check(schemas.Jobs, shop)
    for job in shop["jobs"]:
        check(schemas.JobSummary, job)
    # the two newest of shop's, though eleven jobs of other endpoints are newer (the store was read past them)
    assert names(shop, "id") == [staging.id, old_shop[2].id]
    assert [(j["app"], j["env"]) for j in shop["jobs"]] == [("shop", "staging"), ("shop", "production")]
    assert names(production, "id") == [j.id for j in reversed(old_shop)]
    assert names(blog, "id") == [j.id for j in reversed(newer[-4:-1])]
    assert names(by_name, "id") == [staging.id]  # a bare name with app and env is their endpoint
    check(schemas.Job, detail)
    assert (detail["app"], detail["env"]) == ("shop", "staging")
    assert [(j["endpoint"], j["app"], j["env"]) for j in local["jobs"]] == [("local", None, None)]


async def test_a_filtered_list_reads_the_store_until_it_has_enough_or_the_store_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    door = await plane_of_apps()
    submit(door, "shop.production.embed")
    for n in range(20):
        submit(door, "local", n)
    reads: list[int] = []
    plane_list = door.plane.list_jobs

    def counting(**options: Any) -> Any:
        reads.append(options["limit"])
        return plane_list(**options)

    monkeypatch.setattr(door.plane, "list_jobs", counting)
    app = create_native_app(door.plane, (KEY,))

    found = (await get(app, "/jobs?app=shop&limit=2")).json()
    missing = (await get(app, "/jobs?app=nobody&limit=2")).json()

    assert len(found["jobs"]) == 1 and missing == {"jobs": []}
    growth = [2, 2 * native.GROWTH, 2 * native.GROWTH**2]  # 2, 8, 32: the third read holds all 21 jobs
    assert reads == growth + growth


async def test_a_scoped_key_sees_only_its_own_app_however_it_filters() -> None:
    door = await plane_of_apps()
    for key in KEYS:
        submit(door, key)
    app = create_native_app(door.plane, (KEY,))
    reader = Principal("reader", "deploy", "shop", None)
    app.state.key_lookup = lambda token: reader if token == SCOPED_PREFIX + "reader" else None
    headers = {"Authorization": f"Bearer {SCOPED_PREFIX}reader"}

    endpoints = (await get(app, "/endpoints?env=production", headers)).json()
    jobs = (await get(app, "/jobs?env=production", headers)).json()
    other = (await get(app, "/jobs?app=blog", headers)).json()

    assert names(endpoints) == ["shop.production.embed"]
    assert [j["endpoint"] for j in jobs["jobs"]] == ["shop.production.embed"]
    assert other == {"jobs": []}


@pytest.mark.parametrize("query", ["app=shop.production", "env=a/b", "app=", "env=-x"])
async def test_a_filter_that_is_no_app_or_env_name_is_400(query: str) -> None:
    app = create_native_app((await plane_of_apps()).plane, (KEY,))

    for path in ("/endpoints", "/jobs"):
        body = check_error(await get(app, f"{path}?{query}", AUTH), 400, "bad_request")
        assert query.partition("=")[0] in body["message"]
