"""Where rc2's code thinks it runs (``runpod/apps/context.py``), and the sync bridge ``block``."""

from __future__ import annotations

import asyncio
import threading

import pytest

from flashpoint.runpodapps import Context, current_context, is_local
from flashpoint.runpodapps.context import block


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, Context.LOCAL),
        ({"RUNPOD_POD_ID": "w-1"}, Context.WORKER),  # flashpoint's workers set it
        ({"RUNPOD_ENDPOINT_ID": "ep"}, Context.WORKER),
        ({"RUNPOD_DEV_SESSION": "1"}, Context.DEV),
        ({"RUNPOD_DEV_SESSION": "1", "RUNPOD_POD_ID": "w-1"}, Context.WORKER),
        ({"RUNPOD_POD_ID": ""}, Context.LOCAL),
    ],
)
def test_current_context(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: Context) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert current_context() is expected
    assert is_local() is (expected is not Context.WORKER)


def test_context_values() -> None:
    assert {context.name: context.value for context in Context} == {"LOCAL": "local", "DEV": "dev", "WORKER": "worker"}


def test_block_from_sync_code() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert block(answer()) == 42


async def test_block_from_inside_a_running_loop() -> None:
    async def where() -> str:
        return threading.current_thread().name

    assert block(where()) == "runpod-apps-loop"


def test_block_reraises() -> None:
    async def fail() -> None:
        raise KeyError("nope")

    with pytest.raises(KeyError):
        block(fail())
