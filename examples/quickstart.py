"""Quickstart: one GPU endpoint with an ordered fallback, called, submitted, waited on and explained.

Run it with ``python examples/quickstart.py``. On a machine without an NVIDIA GPU it simulates two A100s: the
workers are real processes, only the GPUs are pretend (and labelled so everywhere).
"""

from __future__ import annotations

import asyncio
import os

from flashpoint import Endpoint, GpuGroup, GpuType
from flashpoint.fleet.discovery import nvml_devices

if not nvml_devices():
    os.environ.setdefault("FLASHPOINT_SIMULATED_GPUS", "NVIDIA_A100_80GB_PCIe:2")
if os.environ.get("FLASHPOINT_SIMULATED_GPUS"):
    print(f"GPUs are simulated: FLASHPOINT_SIMULATED_GPUS={os.environ['FLASHPOINT_SIMULATED_GPUS']}")


# An H200 if this machine has one, else any GPU of the AMPERE_80 pool (A100 80GB PCIe, then A100 SXM4).
@Endpoint(name="quickstart", gpu=[GpuType.NVIDIA_H200, GpuGroup.AMPERE_80], workers=(0, 2))
async def infer(data: dict[str, str]) -> dict[str, str]:
    # This body runs in a worker process that sees only its own GPUs.
    return {
        "echo": data["prompt"].upper(),
        "gpu": os.environ["FLASHPOINT_GPU_MODEL"],
        "cuda_visible_devices": os.environ["CUDA_VISIBLE_DEVICES"],
    }


async def main() -> None:
    # Submit, wait, return the output: the first call starts a control plane and a worker.
    print("result:", await infer({"prompt": "hello"}))

    # Submit only, then follow the job.
    job = await infer.run({"prompt": "a red fox"})
    print("submitted:", job.id, await job.status())
    print("final status:", await job.wait(timeout=60))
    print("output:", job.output)
    placement = job.view.placement
    assert placement is not None
    simulated = " (simulated)" if placement.simulated else ""
    print(f"ran on: {placement.gpu_model}{simulated}, device {list(placement.device_ids)} of node {placement.node}")

    # Why jobs would wait (here: they don't), per GPU candidate.
    print(await infer.explain())


if __name__ == "__main__":
    asyncio.run(main())
