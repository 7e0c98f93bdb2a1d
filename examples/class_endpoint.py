"""A class endpoint: the model loads once per worker and stays warm; each call runs a method on that instance.

Run it with ``python examples/class_endpoint.py``. Without an NVIDIA GPU it simulates one L40S.
"""

from __future__ import annotations

import asyncio
import os

from flashpoint import Endpoint, GpuGroup
from flashpoint.fleet.discovery import nvml_devices

if not nvml_devices():
    os.environ.setdefault("FLASHPOINT_SIMULATED_GPUS", "NVIDIA L40S:1")
if os.environ.get("FLASHPOINT_SIMULATED_GPUS"):
    print(f"GPUs are simulated: FLASHPOINT_SIMULATED_GPUS={os.environ['FLASHPOINT_SIMULATED_GPUS']}")


@Endpoint(name="greeter", gpu=[GpuGroup.ADA_48_PRO, GpuGroup.ANY])
class Greeter:
    def __init__(self, greeting: str = "hello") -> None:
        # Stands in for loading weights: runs once per worker process, not once per call.
        self.greeting = greeting
        self.calls = 0

    async def greet(self, name: str) -> str:
        self.calls += 1
        return f"{self.greeting}, {name} (call {self.calls} on {os.environ['FLASHPOINT_GPU_MODEL']})"

    async def shout(self, name: str) -> str:
        return (await self.greet(name)).upper()


async def main() -> None:
    greeter = Greeter("hi")  # constructor arguments travel to the worker
    print(await greeter.greet("ada"))
    print(await greeter.greet("grace"))
    print(await greeter.shout("linus"))


if __name__ == "__main__":
    asyncio.run(main())
