"""A Runpod Flash app, as Flash users write one: it imports runpod_flash, never flashpoint.

``flashpoint serve tests/apps/flash_app.py`` serves it (flashpoint stands in for runpod_flash while it loads), and
Flash's own client calls it from ``tests/apps/flash_script.py`` (tests/e2e/test_flash_client.py). Keep it free of
anything flashpoint-only: the test is that an unmodified Flash app runs.
"""

from __future__ import annotations

import os

from runpod_flash import Endpoint, GpuGroup, GpuType


@Endpoint(name="fp-add", gpu=GpuGroup.ANY)
async def add(a: int, b: int) -> int:
    """Called with positional arguments, which Flash's client maps to parameter names."""
    return a + b


@Endpoint(name="fp-greet", gpu=[GpuType.NVIDIA_H200, GpuGroup.AMPERE_80])
def greet(name: str, punctuation: str = "!") -> str:
    """A sync ``def`` endpoint with a default."""
    return f"hello {name}{punctuation}"


@Endpoint(name="fp-clear", gpu=GpuGroup.ANY)
async def clear() -> None:
    """No arguments (Flash sends ``{"__empty": true}``) and no output."""
    return None


@Endpoint(name="fp-calculator", gpu=GpuGroup.ANY)
class Calculator:
    """A class endpoint with two methods, built without arguments (Flash's sentinel never sends any)."""

    def __init__(self) -> None:
        self.gpu = os.environ.get("FLASHPOINT_GPU_MODEL", "not on a flashpoint worker")

    def double(self, x: int) -> int:
        return 2 * x

    async def describe(self) -> dict[str, str]:
        return {"kind": "calculator", "gpu": self.gpu}


@Endpoint(name="fp-explode", gpu=GpuGroup.ANY)
async def explode(reason: str) -> None:
    raise ValueError(f"exploded: {reason}")


@Endpoint(name="fp-text", gpu=GpuGroup.ANY)
def shout(text: str) -> str:
    """One of two functions sharing the endpoint name fp-text."""
    return text.upper() + "!"


@Endpoint(name="fp-text", gpu=GpuGroup.ANY)
def count_words(words: list[str]) -> int:
    """The other one: Flash's client sends no function name, so the server picks the one the input fits."""
    return len(words)
