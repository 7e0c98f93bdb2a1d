"""Several functions and classes declared with one endpoint name: one endpoint (one queue, one set of workers) that
runs, for each call, the code that was called; real worker processes on simulated GPUs."""

from __future__ import annotations

import pytest

from flashpoint import Endpoint, GpuGroup, JobFailedError

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]


async def test_each_function_of_a_shared_name_runs_its_own_code(make_embedded) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="shared-e2e", gpu=GpuGroup.ANY, workers=1)
    async def first(data: dict) -> dict:
        return {"from": "first", "x": data["x"]}

    @Endpoint(name="shared-e2e", gpu=GpuGroup.ANY, workers=1)
    async def second(data: dict) -> dict:
        return {"from": "second", "x": data["x"] * 10}

    assert await second({"x": 2}) == {"from": "second", "x": 20}
    assert await first({"x": 2}) == {"from": "first", "x": 2}
    assert await second({"x": 3}) == {"from": "second", "x": 30}
    # one endpoint, one worker, serving both
    assert list(embedded.plane.endpoints) == ["shared-e2e"]
    assert len(embedded.plane.endpoint("shared-e2e").workers) == 1


async def test_a_function_and_a_class_share_a_name(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="shared-mixed", gpu=GpuGroup.ANY)
    def plain(data: dict) -> str:
        return f"plain {data['x']}"

    @Endpoint(name="shared-mixed", gpu=GpuGroup.ANY)
    class Model:
        def __init__(self, scale: int = 1) -> None:
            self.scale = scale

        def predict(self, data: dict) -> int:
            return data["x"] * self.scale

        def embed(self, data: dict) -> list[int]:
            return [data["x"], self.scale]

    assert await Model(3).predict({"x": 2}) == 6
    assert await plain({"x": 2}) == "plain 2"
    assert await Model(5).embed({"x": 1}) == [1, 5]


async def test_a_job_naming_an_unknown_target_fails_and_runs_nothing(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="shared-unknown", gpu=GpuGroup.ANY)
    async def alpha(data: dict) -> str:
        return "alpha"

    @Endpoint(name="shared-unknown", gpu=GpuGroup.ANY)
    async def beta(data: dict) -> str:
        return "beta"

    assert await beta({}) == "beta"
    handle = await alpha._submit(alpha._payload(({},), {}), {"flashpoint": {"binary_ok": True, "target": "gamma"}})
    with pytest.raises(JobFailedError, match="gamma") as failed:
        await handle.result(30)
    assert failed.value.reason == "user_error"
    # no target named: the endpoint serves two, so the job says which
    untargeted = await alpha._submit(alpha._payload(({},), {}), {"flashpoint": {"binary_ok": True}})
    with pytest.raises(JobFailedError, match="alpha, beta"):
        await untargeted.result(30)
