"""An app for the what-if (``flashpoint explain --app ... --fleet ...``): fallback across nodes, a minimum, a
multi-GPU worker, a request no fleet without B200s can hold, and a CPU endpoint. Nothing here is ever called."""

from __future__ import annotations

from flashpoint import Endpoint, GpuGroup, GpuType


@Endpoint(name="serve", gpu=[GpuType.NVIDIA_H200, GpuGroup.AMPERE_80], workers=(1, 3))
async def serve(data: dict) -> dict:
    return data


@Endpoint(name="train", gpu=GpuGroup.AMPERE_80, gpu_count=4, workers=2)
async def train(data: dict) -> dict:
    return data


@Endpoint(name="huge", gpu=GpuType.NVIDIA_B200, gpu_count=2)
async def huge(data: dict) -> dict:
    return data


@Endpoint(name="tidy", cpu="cpu3c-1-2")
async def tidy(data: dict) -> dict:
    return data
