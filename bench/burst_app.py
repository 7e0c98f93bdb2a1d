"""The HTTP-route endpoint ``bench/bench_autoscaling.py``'s burst measures: ``workers=(0, 4)`` (none warm before the
burst), one route that works for ``BENCH_BURST_WORK_S`` (default 0.2 s), so that a burst of 50 needs more than one
worker. Served with ``flashpoint serve bench/burst_app.py`` on simulated GPUs."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from flashpoint import Endpoint, GpuGroup

WORK_S = float(os.environ.get("BENCH_BURST_WORK_S", "0.2"))

api = Endpoint(name="bench-burst", gpu=GpuGroup.ANY, workers=(0, 4), target_concurrency=4)


@api.get("/work")
async def work() -> dict[str, Any]:
    await asyncio.sleep(WORK_S)
    return {"ok": True}
