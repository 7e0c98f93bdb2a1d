"""Endpoints whose calls carry positional arguments: ``*values``, a positional-only parameter, and a class whose
constructor takes positional arguments (tests/hosting/test_positional_remote.py calls them over FLASHPOINT_URL)."""

from __future__ import annotations

from typing import Any

from flashpoint import Endpoint

GPU = "NVIDIA A100 80GB PCIe"


@Endpoint(name="total", gpu=GPU)
async def total(*values: float, scale: float = 1.0) -> float:
    return sum(values) * scale


@Endpoint(name="label", gpu=GPU)
async def label(text: str, /, suffix: str = "!") -> str:
    return text + suffix


@Endpoint(name="scaler", gpu=GPU)
class Scaler:
    def __init__(self, factor: float, offset: float = 0.0) -> None:
        self.factor, self.offset = factor, offset

    async def apply(self, value: float) -> dict[str, Any]:
        return {"value": value * self.factor + self.offset}
