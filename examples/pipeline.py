"""A pipeline, as Flash's mixed-worker examples build one: a CPU endpoint that awaits a GPU endpoint from its worker.

The script calls only ``pipeline``. Its code names ``embed``, so the embedded plane registers ``embed`` with it, and the
CPU worker's ``await embed(...)`` reaches the same plane with the narrow key the plane gave that worker.

Run it with ``python examples/pipeline.py``. Without an NVIDIA GPU it simulates one A100.
"""

from __future__ import annotations

import asyncio
import os

from flashpoint import CpuInstanceType, Endpoint, GpuGroup
from flashpoint.fleet.discovery import nvml_devices

if not nvml_devices():
    os.environ.setdefault("FLASHPOINT_SIMULATED_GPUS", "NVIDIA_A100_80GB_PCIe:1")
if os.environ.get("FLASHPOINT_SIMULATED_GPUS"):
    print(f"GPUs are simulated: FLASHPOINT_SIMULATED_GPUS={os.environ['FLASHPOINT_SIMULATED_GPUS']}")


@Endpoint(name="embed", gpu=GpuGroup.AMPERE_80)
async def embed(words: list[str]) -> dict[str, object]:
    # Stands in for a model on the GPU.
    return {"vectors": [[len(word), word.count("a")] for word in words], "gpu": os.environ["FLASHPOINT_GPU_MODEL"]}


@Endpoint(name="pipeline", cpu=CpuInstanceType.CPU3C_1_2)
async def pipeline(text: str) -> dict[str, object]:
    words = text.lower().split()  # CPU work in a CPU worker ...
    embedded = await embed(words)  # ... then a GPU endpoint awaited from that worker
    return {"words": words, **embedded}


async def main() -> None:
    result = await pipeline("A banana and an apple")
    print(f"words: {result['words']}")
    print(f"vectors: {result['vectors']}")
    print(f"embedded on: {result['gpu']}")


if __name__ == "__main__":
    asyncio.run(main())
