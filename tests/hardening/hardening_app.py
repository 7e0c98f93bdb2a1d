"""The app `flashpoint serve` runs for the hardening tests (tests/hardening/): real workers on simulated GPUs."""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

from flashpoint import Endpoint, GpuGroup


@Endpoint(name="record", gpu=GpuGroup.ANY, workers=(0, 4), scaler_type="REQUEST_COUNT", scaler_value=1)
def record(n: int, log: str, pause: str = "", low_ms: int = 5, high_ms: int = 40) -> int:
    """Runs for a random-ish few milliseconds, then appends ``n`` and its server's pid to ``log`` with O_APPEND (one
    ``write``, so lines of concurrent workers never interleave). While ``pause`` exists it waits first."""
    while pause and os.path.exists(pause):
        time.sleep(0.01)
    time.sleep(random.uniform(low_ms, high_ms) / 1000)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{n} {os.environ.get('FLASHPOINT_PARENT_PID', '?')}\n".encode())
    finally:
        os.close(fd)
    return n


@Endpoint(name="chaos", gpu=GpuGroup.ANY, workers=(0, 4), idle_timeout=1, scaler_type="REQUEST_COUNT", scaler_value=2)
async def chaos(n: int, low_ms: int = 20, high_ms: int = 80) -> int:
    await asyncio.sleep(random.uniform(low_ms, high_ms) / 1000)
    return n


@Endpoint(name="echo", cpu="cpu3c-1-2", workers=(0, 1), idle_timeout=5)
async def echo(**payload: Any) -> dict[str, Any]:
    return {"payload": payload}


@Endpoint(name="fail", cpu="cpu3c-1-2", workers=(0, 1), idle_timeout=5)
async def fail(message: str) -> None:
    raise ValueError(message)
