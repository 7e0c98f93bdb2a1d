"""A served app for the Ray backend's tests: reports where its worker runs."""

from __future__ import annotations

import os
from typing import Any

from flashpoint import Endpoint, GpuType


@Endpoint(name="where", gpu=[GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe])
async def where(tag: str) -> dict[str, Any]:
    keys = ("FLASHPOINT_GPU_MODEL", "FLASHPOINT_RAY_NODE_ID", "CUDA_VISIBLE_DEVICES", "FLASHPOINT_GPU_SIMULATED")
    return {"tag": tag, **{k: os.environ.get(k) for k in keys}}
