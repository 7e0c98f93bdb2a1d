"""``GET /v1/usage`` (decision 0112): a body that fits its schema with the door plane's usage to the second, grouped as
asked and filtered by app and environment; bad questions are 400; the Prometheus counters; and every key sees only
what the access rule lets it see (the scope matrix's server and keys)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.access import endpoint_visible
from flashpoint.api import schemas
from flashpoint.api.guard import app_env_of
from flashpoint.api.metrics import PlaneMetrics
from flashpoint.api.native import create_native_app
from flashpoint.clock import FakeClock
from tests.api.test_native import check, check_error, get
from tests.api.test_scope_matrix import EP, KEYS, NO_KEY, Matrix, matrix  # noqa: F401 (a fixture)
from tests.scheduler.door import TARGET, Door, open_door

pytestmark = pytest.mark.timeout(60)

KEY = "test-key"


async def busy_door() -> Door:
    """Two deployed endpoints: shop/prod's worker busy 30 s with alice's job after 10 s idle; blog/prod's idle 40 s."""
    door = await open_door()
    for app in ("shop", "blog"):
        spec = dataclasses.replace(
            Endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1)).spec, app=app, app_env="prod"
        )
        door.plane.register(spec, TARGET)
    await door.step()
    for key in ("shop.prod.embed", "blog.prod.embed"):
        await door.pull(door.worker(key))
    await door.step(10)
    job = door.submit("shop.prod.embed", extra={"flashpoint": {"submitted_by": "alice"}}).id
    shop = door.worker("shop.prod.embed")
    assert await door.pull(shop) == [job]
    await door.step(30)
    await door.finish(shop, job)
    return door


def rows(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in body["usage"]}


async def test_usage_fits_its_schema_and_is_exact() -> None:
    door = await busy_door()
    app = create_native_app(door.plane, (KEY,))
    answer = await get(app, "/usage?since=1h&by=app")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    check(schemas.Usage, body)
    for row in body["usage"]:
        check(schemas.UsageRow, row)
        check(schemas.UsageAmounts, row["busy"])
    assert body["by"] == "app" and body["resolutionS"] == 60
    assert body["until"] == door.clock.time() and body["since"] == door.clock.time() - 3600
    shop, blog = rows(body)["shop"], rows(body)["blog"]
    assert (shop["busy"]["gpuSeconds"], shop["idle"]["gpuSeconds"], shop["gpuSeconds"]) == (30, 10, 40)
    assert (blog["busy"]["gpuSeconds"], blog["idle"]["gpuSeconds"]) == (0, 40)
    assert [row["name"] for row in body["usage"]] == ["blog", "shop"]  # the same GPU time: by name

    by_key = rows((await get(app, "/usage?since=1h&by=key")).json())
    assert by_key["alice"]["busy"]["gpuSeconds"] == 30 and by_key["alice"]["idle"]["gpuSeconds"] == 0
    assert by_key[""]["idle"]["gpuSeconds"] == 50
    by_endpoint = rows((await get(app, "/usage?by=endpoint&app=shop")).json())  # since: 24h by default
    assert set(by_endpoint) == {"shop.prod.embed"}
    assert rows((await get(app, "/usage?by=model&env=prod")).json())["NVIDIA H200"]["gpuSeconds"] == 80
    assert (await get(app, "/usage?by=env&env=staging")).json()["usage"] == []
    since = door.clock.time() - 20  # the last 20 s: shop busy 20, blog idle 20
    late = rows((await get(app, f"/usage?by=app&since={since}")).json())
    assert late["shop"]["busy"]["gpuSeconds"] == 20 and late["blog"]["idle"]["gpuSeconds"] == 20
    await door.plane.close()


async def test_bad_questions_are_400_and_no_key_is_401() -> None:
    door = await busy_door()
    app = create_native_app(door.plane, (KEY,))
    check_error(await get(app, "/usage?since=yesterday"), 400, "bad_request")
    check_error(await get(app, "/usage?since=-1"), 400, "bad_request")
    check_error(await get(app, "/usage?by=color"), 400, "bad_request")
    check_error(await get(app, "/usage?app=a.b"), 400, "bad_request")
    check_error(await get(app, "/usage", headers={}), 401, "unauthorized")
    await door.plane.close()


async def test_the_prometheus_counters() -> None:
    door = await busy_door()
    metrics = PlaneMetrics(door.plane)
    text = metrics.render().decode()
    shop = 'endpoint="shop.prod.embed",env="prod",kind="busy",model="NVIDIA H200"'
    assert f'flashpoint_gpu_seconds_total{{app="shop",{shop}}} 30.0' in text
    assert 'flashpoint_gpu_seconds_total{app="blog",endpoint="blog.prod.embed",env="prod",kind="idle",' in text
    assert "# TYPE flashpoint_vcpu_seconds_total counter" in text or "# TYPE flashpoint_vcpu_seconds counter" in text
    assert "flashpoint_memory_mb_seconds_total" in text
    await door.step(5)  # blog idles on: its counter grows with the clock
    assert 'kind="idle",model="NVIDIA H200"} 45.0' in metrics.render().decode()
    metrics.close()
    await door.plane.close()


@pytest.mark.parametrize("key", [k for k in KEYS if k not in NO_KEY])
async def test_each_key_sees_only_the_usage_the_rule_lets_it_see(matrix: Matrix, key: str) -> None:  # noqa: F811
    # Given workers of two apps' endpoints starting for 10 s (the server's jobs), and one of no app
    async with matrix.client("server") as server:
        for ep in (EP, "other.prod.embed"):
            assert (await server.post(f"/v2/{ep}/run", json={"input": {}})).status_code == 200
    while len(matrix.plane.workers) < 2:
        await matrix.plane.settled()
    assert isinstance(matrix.plane.clock, FakeClock)
    matrix.plane.clock.advance(10)
    who = matrix.principals[key]
    async with matrix.client(key) as client:
        answer = await client.get("/v1/usage", params={"by": "endpoint"})
    assert answer.status_code == 200, answer.text
    seen = {row["name"]: row for row in answer.json()["usage"]}
    if who.scope == "invoke":  # only the busy time of its own jobs: it ran none
        assert seen == {}
    else:
        expected = {ep for ep in (EP, "other.prod.embed") if endpoint_visible(who, *app_env_of(ep))}
        assert set(seen) == expected
        assert all(row["starting"]["gpuSeconds"] == 10 for row in seen.values())
