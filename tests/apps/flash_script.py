"""A Runpod Flash script, as Flash users write one (``python flash_script.py``): it imports the app's functions and
awaits them. With runpod-flash and ``RUNPOD_ENDPOINT_BASE_URL`` pointing at ``flashpoint serve flash_app.py``, Flash's
own client calls the served endpoints; with ``flashpoint run flash_script.py`` everything runs on this machine.

Prints one JSON line per call: ``{"call", "output"}`` or ``{"call", "error", "message"}``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any

import runpod_flash
from flash_app import Calculator, add, clear, count_words, explode, greet, shout
from runpod_flash import Endpoint, GpuGroup


@Endpoint(name="fp-script-local", gpu=GpuGroup.ANY)
async def triple(x: int) -> dict[str, Any]:
    """Declared in the script itself: not deployed (nor served), so Flash's client cannot find it; flashpoint run
    ships it to a worker with cloudpickle (which names the runpod_flash module it uses)."""
    return {"triple": 3 * x, "group": runpod_flash.GpuGroup.ANY.value}


async def call(name: str, awaitable: Awaitable[Any]) -> dict[str, Any]:
    try:
        return {"call": name, "output": await awaitable}
    except Exception as exc:
        return {"call": name, "error": type(exc).__name__, "message": str(exc)}


async def main() -> None:
    calculator = Calculator()
    calls = {
        "add": lambda: add(2, 3),
        "greet": lambda: greet("ada"),
        "clear": lambda: clear(),
        "double": lambda: calculator.double(21),
        "describe": lambda: calculator.describe(),
        "explode": lambda: explode("boom"),
        "shout": lambda: shout("hi"),
        "count_words": lambda: count_words(["a", "b", "c"]),
        "triple": lambda: triple(3),
    }
    for name, make in calls.items():
        print(json.dumps(await call(name, make())), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
