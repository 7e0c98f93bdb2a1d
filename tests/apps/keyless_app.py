"""The app of the keyless-server tests (tests/hardening/test_keyless.py): a queue endpoint and an HTTP-route
endpoint, both on CPU (flashpoint's own route worker serves the routes)."""

from __future__ import annotations

from typing import Any

from flashpoint import Endpoint


@Endpoint(name="echo", cpu="cpu3c-1-2")
async def echo(**payload: Any) -> dict[str, Any]:
    return {"payload": payload}


api = Endpoint(name="api", cpu="cpu3c-1-2")


@api.post("/compute")
async def compute(numbers: list[int]) -> dict[str, int]:
    return {"total": sum(numbers)}
