"""Shared fixtures: a real embedded control plane on loopback with simulated GPUs (the only fake), real workers."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from flashpoint import server
from flashpoint.config import Settings
from flashpoint.server import EmbeddedPlane

T = TypeVar("T")

SEED_NAME = "000_1716fa7ad0ba5e4b.txt"


def seed_path() -> Path:
    """The seed document, beside the repository in ``shared/``: skipped locally when absent, a failure in CI."""
    override = os.environ.get("FLASHPOINT_SEED_PATH")
    path = Path(override) if override else Path(__file__).resolve().parents[2] / "shared" / "seeds" / SEED_NAME
    if not path.is_file():
        if os.environ.get("CI"):
            raise AssertionError(f"seed file not found at {path}; set FLASHPOINT_SEED_PATH")
        pytest.skip(f"seed file not found at {path}; set FLASHPOINT_SEED_PATH")
    return path


@pytest.fixture
def restore_imports(tmp_path: Path) -> Iterator[None]:
    """For tests that import app files: undo their sys.path and sys.modules changes afterwards."""
    path = list(sys.path)
    yield
    sys.path[:] = path
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file is not None and Path(file).is_relative_to(tmp_path):
            del sys.modules[name]


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
