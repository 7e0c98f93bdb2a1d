"""A served app for the server tests: endpoints the official runpod client drives over HTTP."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from flashpoint import Endpoint, GpuGroup, GpuType, current_job


@Endpoint(name="echo", gpu=GpuGroup.ANY, workers=2, scaler_type="REQUEST_COUNT", scaler_value=1)
async def echo(**payload: Any) -> dict[str, Any]:
    return {"payload": payload, "gpu": os.environ["FLASHPOINT_GPU_MODEL"]}


@Endpoint(name="fail", gpu=GpuType.NVIDIA_H200)
async def fail(message: str) -> None:
    raise ValueError(message)


@Endpoint(name="slow", gpu=GpuType.NVIDIA_H200, workers=1)
async def slow(seconds: float, marker: str = "") -> str:
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if marker:
            open(marker, "w").close()
        raise
    return "slept"


@Endpoint(name="sync-slow", cpu="cpu3c-1-2")
def sync_slow(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


@Endpoint(name="count", gpu=GpuType.NVIDIA_H200)
async def count(n: int, delay: float = 0.0) -> AsyncIterator[dict[str, int]]:
    for i in range(n):
        await asyncio.sleep(delay)
        yield {"i": i}


@Endpoint(name="record", cpu="cpu3c-1-2", workers=2, scaler_type="REQUEST_COUNT", scaler_value=1)
def record(n: int, log: str, gate: str = "") -> int:
    """Appends its n to a file once ``gate`` exists: the durability test counts how often each job ran."""
    while gate and not os.path.exists(gate):
        time.sleep(0.01)
    with open(log, "a") as handle:
        handle.write(f"{n}\n")
    return n


@Endpoint(name="weird", cpu="cpu3c-1-2")
async def weird() -> set[int]:
    return {1, 2}  # JSON cannot carry a set: HTTP callers get a clear error, SDK callers the set itself


@Endpoint(name="passthrough", cpu="cpu3c-1-2")
async def passthrough(key: str) -> object:
    return current_job().get(key)
