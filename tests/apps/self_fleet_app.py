"""A served app that declares its own simulated fleet when it is imported, as the examples do."""

from __future__ import annotations

import os

from flashpoint import Endpoint, GpuGroup

if not os.environ.get("FLASHPOINT_SIMULATED_GPUS"):
    os.environ["FLASHPOINT_SIMULATED_GPUS"] = "NVIDIA_L40S:1"


@Endpoint(name="where", gpu=GpuGroup.ANY)
async def where() -> str:
    return os.environ["FLASHPOINT_GPU_MODEL"]
