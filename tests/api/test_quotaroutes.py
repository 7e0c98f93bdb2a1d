"""``/v1/quotas`` (api/quotaroutes.py) mounted as ``flashpoint serve`` mounts it, over a door plane that reads the same
store, in-process through the server's ``Dispatch``: set, list with the use, delete; bad bodies are 400 saying what
to send; a spent budget answers a new job 429 with the budget, when it renews and ``Retry-After`` on Runpod's routes,
Flash's sentinel and ``/v1``'s error table. Which keys may reach the routes: ``test_scope_matrix.py``."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from flashpoint import Endpoint, GpuType
from flashpoint.api.app import Dispatch, create_app
from flashpoint.api.errors import STATUS, error_response
from flashpoint.api.quotaroutes import router
from flashpoint.api.runpod import Intake
from flashpoint.errors import BudgetSpentError
from flashpoint.hosting.quotastore import QuotaStore
from tests.scheduler.door import TARGET, Door, open_door
from tests.scheduler.test_quotas import FakeUsage

KEY = "server-admin-key"
EP = "shop.prod.embed"


@dataclasses.dataclass
class Served:
    client: httpx.AsyncClient
    store: QuotaStore
    door: Door


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    store = QuotaStore(tmp_path / "quotas")
    door = await open_door("node-a=NVIDIA_H200:2", quotas=store)
    spec = dataclasses.replace(Endpoint(name="embed", gpu=GpuType.NVIDIA_H200).spec, app="shop", app_env="prod")
    door.plane.register(spec, TARGET)
    app = create_app(door.plane, api_keys=(KEY,), intake=Intake({}), max_body_bytes=64 * 1024)
    app.include_router(router, prefix="/v1")
    app.state.quotas = store
    transport = httpx.ASGITransport(app=Dispatch(app, door.plane))
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://server", headers=headers) as client:
        yield Served(client, store, door)
    await door.plane.close()


async def test_set_list_and_delete_with_the_use_of_each(served: Served) -> None:
    answer = await served.client.put("/v1/quotas", json={"app": "shop", "maxGpus": 1})
    assert answer.status_code == 200, answer.text
    assert answer.json()["maxGpus"] == 1 and answer.json()["use"]["gpus"] == 0
    answer = await served.client.post("/v1/quotas", json={"app": "shop", "gpuHours": 5, "period": "7d"})
    assert answer.status_code == 200, answer.text
    # a job of shop starts a worker: the list shows the GPU it holds
    await served.client.post(f"/v2/{EP}/run", json={"input": {}})
    await served.door.settle()
    listed = (await served.client.get("/v1/quotas")).json()["quotas"]
    assert [(q["app"], q["maxGpus"], q["gpuHours"], q["period"]) for q in listed] == [("shop", 1, 5.0, "7d")]
    assert listed[0]["use"]["gpus"] == 1
    # the explanation of shop's endpoint notes the quota in force and its use
    explained = (await served.client.get(f"/v1/endpoints/{EP}/explain")).json()
    assert any(note.startswith("quota of app shop (--app shop): holds 1 of 1 GPUs") for note in explained["notes"])
    deleted = await served.client.delete("/v1/quotas", params={"app": "shop"})
    assert deleted.status_code == 200, deleted.text
    assert (await served.client.get("/v1/quotas")).json() == {"quotas": []}
    again = await served.client.delete("/v1/quotas", params={"app": "shop"})
    assert again.status_code == 404 and "flashpoint quota list" in again.json()["message"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not json", "as the JSON body"),
        (b"[]", "and nothing else"),
        (b'{"app": "shop", "maxGpus": 1, "extra": 1}', "and nothing else"),
        (b'{"app": 1, "maxGpus": 1}', "are strings"),
        (b'{"app": "shop", "maxGpus": "4"}', "maxGpus a whole number"),
        (b'{"app": "shop", "maxGpus": 1.5}', "maxGpus a whole number"),
        (b'{"app": "shop", "maxGpus": true}', "maxGpus a whole number"),
        (b'{"app": "shop"}', "say what to limit"),
        (b'{"app": "../x", "maxGpus": 1}', "--app is a name"),
        (b'{"app": "shop", "gpuHours": 1, "period": "forever"}', "--period: write a period"),
    ],
)
async def test_bad_bodies_are_400_saying_what_to_send(served: Served, body: bytes, says: str) -> None:
    answer = await served.client.put("/v1/quotas", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert says in answer.json()["message"]
    assert served.store.list() == []


async def test_a_spent_budget_answers_429_with_when_it_renews(served: Served) -> None:
    served.store.set(app="shop", gpu_hours=1.0, period="1h")
    now = served.door.clock.time()
    served.door.plane.quotas.meter = FakeUsage([("shop", "prod", None, now - 3600, now, 1)])
    for path, headers in (
        (f"/v2/{EP}/run", {}),
        ("/v2/flash/run", {"X-Flash-App": "shop", "X-Flash-Environment": "prod", "X-Flash-Endpoint": "embed"}),
    ):
        answer = await served.client.post(path, json={"input": {}}, headers=headers)
        assert answer.status_code == 429, answer.text
        body = answer.json()
        assert body["code"] == "budget_spent"
        assert "the GPU-hour budget of app shop is spent: 1.00 of its 1 GPU-hours in the last 1h" in body["message"]
        assert body["quota"] == "--app shop --gpu-hours 1 --period 1h"
        assert body["renewsAt"] == now + 1 and body["retryAfterS"] == 1
        assert answer.headers["Retry-After"] == "1"
    assert served.door.plane.list_jobs() == []
    listed = (await served.client.get("/v1/quotas")).json()["quotas"]
    assert listed[0]["use"] == {"gpus": 0, "models": {}, "gpuHours": 1.0, "spent": True, "renewsAt": now + 1}


def test_the_error_table_maps_a_spent_budget_to_429() -> None:
    assert STATUS[BudgetSpentError] == 429
    response = error_response(BudgetSpentError("spent", quota="--app a --gpu-hours 1 --period 1h", retry_after_s=60))
    assert response.status_code == 429 and response.headers["Retry-After"] == "60"
