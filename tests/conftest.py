"""Shared fixtures: a real embedded control plane on loopback with simulated GPUs (the only fake), real workers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from flashpoint import server
from flashpoint.config import Settings
from flashpoint.server import EmbeddedPlane

T = TypeVar("T")


@pytest.fixture
def make_plane(tmp_path: Path) -> Iterator[Callable[..., EmbeddedPlane]]:
    """Start an embedded plane on a simulated fleet and make it the SDK's connection; closed at teardown."""
    planes: list[EmbeddedPlane] = []

    def start(gpus: str = "", **env: str) -> EmbeddedPlane:
        settings = Settings.load(
            env={
                "FLASHPOINT_SIMULATED_GPUS": gpus,
                "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
                "FLASHPOINT_NODE": "node-a",
                "FLASHPOINT_TAKE_HOLD_S": "5",
                **env,
            }
        )
        plane = EmbeddedPlane(settings).start()
        planes.append(plane)
        server.use(plane)
        return plane

    yield start
    server.use(None)
    for plane in planes:
        plane.close()


async def eventually(check: Callable[[], T], timeout: float = 20.0, what: str = "condition") -> T:
    """Wait for a condition on real processes, polling it; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def snapshot(plane: EmbeddedPlane, endpoint: str) -> dict[str, Any]:
    """Workers and queue of one endpoint, read on the plane's own loop."""

    async def read() -> dict[str, Any]:
        ep = plane.plane.endpoints.get(endpoint)
        if ep is None:
            return {"workers": [], "queued": 0}
        return {"workers": [w.to_json() for w in ep.workers.values()], "queued": ep.queued}

    return plane.run_sync(read(), timeout=10)


def held_devices(plane: EmbeddedPlane) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        return [row for row in plane.plane.fleet_view() if row["worker"] is not None]

    return plane.run_sync(read(), timeout=10)
