"""A job sent at low priority on Runpod's run route: ``policy.lowPriority`` (Runpod's) or flashpoint's own
``"flashpoint": {"low_priority": true}``, by table and over HTTP; and the SDK's ``low_priority()`` handle."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.api.app import Dispatch, create_app
from flashpoint.api.runpod import Intake, low_priority
from flashpoint.errors import BadInputError
from flashpoint.jobs import LOW_PRIORITY_KEY
from tests.scheduler.door import BASE_URL, open_door

KEY = "k"


@pytest.mark.parametrize(
    ("data", "meta", "low"),
    [
        ({}, None, False),
        ({"policy": {"lowPriority": True}}, None, True),
        ({"policy": {"lowPriority": False}}, None, False),
        ({"policy": {"ttl": 1000}}, None, False),
        ({}, {"low_priority": True}, True),
        ({}, {"low_priority": False}, False),
        ({"policy": {"lowPriority": False}}, {"low_priority": True}, True),
    ],
)
def test_low_priority_is_read_from_the_policy_or_flashpoints_metadata(
    data: dict[str, Any], meta: dict[str, Any] | None, low: bool
) -> None:
    assert low_priority(data, meta) is low


@pytest.mark.parametrize(
    ("data", "meta", "words"),
    [
        ({"policy": {"lowPriority": "yes"}}, None, "policy.lowPriority must be true or false"),
        ({"policy": {"lowPriority": 1}}, None, "policy.lowPriority must be true or false"),
        ({}, {"low_priority": "true"}, '"flashpoint.low_priority" must be true or false'),
    ],
)
def test_anything_but_a_boolean_is_refused_naming_it(data: dict[str, Any], meta: dict[str, Any], words: str) -> None:
    with pytest.raises(BadInputError, match=words):
        low_priority(data, meta)


async def test_run_with_policy_low_priority_queues_the_job_after_the_others() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    app = Dispatch(create_app(door.plane, api_keys=(KEY,), intake=Intake({})), door.plane)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL, headers={"Authorization": KEY}) as client:
        low = await client.post("/v2/e/run", json={"input": {}, "policy": {"lowPriority": True}})
        normal = await client.post("/v2/e/run", json={"input": {}})
        refused = await client.post("/v2/e/run", json={"input": {}, "policy": {"lowPriority": "soon"}})
        assert low.status_code == 200, low.text
        shown = await client.get(f"/v1/jobs/{low.json()['id']}")
    assert refused.status_code == 400 and "lowPriority" in refused.text
    low_job = door.plane.job(low.json()["id"])
    assert low_job.low_priority and not door.plane.job(normal.json()["id"]).low_priority
    assert LOW_PRIORITY_KEY not in low_job.extra.get("flashpoint", {})  # a field of the record, not the worker's
    assert shown.json()["lowPriority"] is True
    await door.step()
    assert await door.pull(door.worker("e"), 2) == [normal.json()["id"], low.json()["id"]]


def test_the_sdks_low_priority_handle_marks_its_jobs_and_leaves_the_original_alone() -> None:
    @Endpoint(name="sdk-low", gpu=GpuType.NVIDIA_H200)
    async def infer(x: int) -> int:
        return x

    low = infer.low_priority()
    assert low._extra()["flashpoint"][LOW_PRIORITY_KEY] is True
    assert LOW_PRIORITY_KEY not in infer._extra()["flashpoint"]
    assert low.spec is infer.spec and type(low) is type(infer)
