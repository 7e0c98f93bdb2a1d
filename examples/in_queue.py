"""IN_QUEUE and explain: a job for a GPU this machine lacks waits, says why, and is cancelled; a fallback runs.

Run it with ``python examples/in_queue.py``. Without an NVIDIA GPU it simulates an H200 and two A100s.
"""

from __future__ import annotations

import asyncio
import os

from flashpoint import Endpoint, GpuGroup, GpuType
from flashpoint.fleet.discovery import nvml_devices

if not nvml_devices():
    os.environ.setdefault("FLASHPOINT_SIMULATED_GPUS", "NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2")
if os.environ.get("FLASHPOINT_SIMULATED_GPUS"):
    print(f"GPUs are simulated: FLASHPOINT_SIMULATED_GPUS={os.environ['FLASHPOINT_SIMULATED_GPUS']}")


# Only a B200 will do. If the fleet has none, flashpoint warns at once and the jobs wait IN_QUEUE.
@Endpoint(name="b200-only", gpu=GpuType.NVIDIA_B200)
async def b200_only(data: dict[str, int]) -> dict[str, int]:
    return data


# The same request with an ordered fallback: a B200, else the H200 pool, else any GPU.
@Endpoint(name="b200-or-else", gpu=[GpuType.NVIDIA_B200, GpuGroup.HOPPER_141, GpuGroup.ANY])
async def b200_or_else(data: dict[str, int]) -> str:
    return os.environ["FLASHPOINT_GPU_MODEL"]


async def main() -> None:
    job = await b200_only.run({"x": 1})
    print("status:", await job.status())
    print(await job.explain())
    print("cancelled:", await job.cancel())

    print("the fallback ran on:", await b200_or_else({"x": 1}))


if __name__ == "__main__":
    asyncio.run(main())
