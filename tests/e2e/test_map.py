"""``fn.map`` and ``fn.starmap`` against an embedded server with real workers on two simulated GPUs: many jobs, in
order or as they finish, and a failure among them. The rules (windows, cancellation, the bar's counts) are exact in
tests/sdk/test_mapping.py over a scripted connection."""

from __future__ import annotations

import asyncio

import pytest

from flashpoint import Endpoint, JobFailedError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

GPU = "NVIDIA A100 80GB PCIe"


async def test_map_runs_one_job_per_item_and_returns_outputs_in_order(make_embedded) -> None:
    make_embedded("NVIDIA_A100_80GB_PCIe:2")

    @Endpoint(name="square", gpu=GPU, workers=(0, 2), scaler_type="REQUEST_COUNT", scaler_value=1)
    async def square(x: int) -> int:
        import asyncio

        await asyncio.sleep((7 - x % 7) / 100)  # later items often finish first
        return x * x

    assert await asyncio.wait_for(square.map(range(12)), 90) == [x * x for x in range(12)]
    unordered = [out async for out in square.map(range(6), ordered=False, progress=False)]
    assert sorted(unordered) == [x * x for x in range(6)]


async def test_starmap_and_a_failure_among_many(make_embedded) -> None:
    make_embedded("NVIDIA_A100_80GB_PCIe:1")

    @Endpoint(name="divide", gpu=GPU)
    async def divide(a: int, b: int) -> float:
        return a / b

    assert await asyncio.wait_for(divide.starmap([(6, 3), (1, 4), {"a": 9, "b": 3}]), 60) == [2.0, 0.25, 3.0]

    outcomes = await asyncio.wait_for(divide.starmap([(1, 1), (1, 0), (2, 1)], return_exceptions=True), 60)
    assert outcomes[0] == 1.0 and outcomes[2] == 2.0
    assert isinstance(outcomes[1], JobFailedError) and outcomes[1].remote_type == "ZeroDivisionError"

    with pytest.raises(JobFailedError, match="ZeroDivisionError"):
        await asyncio.wait_for(divide.starmap([(1, 0), (2, 1)]), 60)
