"""``@local_entrypoint`` (rc2's ``runpod/apps/entrypoint.py``): registered unwrapped, the last one wins, run sync or
async."""

from __future__ import annotations

import asyncio

from flashpoint.runpodapps import local_entrypoint
from flashpoint.runpodapps.entrypoint import get_entrypoint, run_entrypoint


def test_registration() -> None:
    assert get_entrypoint() is None

    def first() -> str:
        return "first"

    @local_entrypoint
    def main() -> str:
        return "main"

    local_entrypoint(first)
    assert main() == "main"  # returned unwrapped
    assert get_entrypoint() is first


def test_run_a_sync_entrypoint() -> None:
    assert run_entrypoint(lambda: 41 + 1) == 42


def test_run_an_async_entrypoint() -> None:
    async def main() -> str:
        await asyncio.sleep(0)
        return "done"

    assert run_entrypoint(main) == "done"


async def test_run_an_async_entrypoint_from_inside_a_loop() -> None:
    async def main() -> int:
        return 7

    assert run_entrypoint(main) == 7
