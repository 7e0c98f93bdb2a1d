"""Sync-by-default calls (rc2's ``runpod/apps/invoker.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from flashpoint.runpodapps.invoker import Invoker, StreamInvoker


async def double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


async def count(n: int) -> AsyncIterator[int]:
    for i in range(n):
        await asyncio.sleep(0)
        yield i


def test_invoker_blocks() -> None:
    assert Invoker(double)(21) == 42


async def test_invoker_aio() -> None:
    assert await Invoker(double).aio(x=4) == 8


def test_a_sync_factory_is_called_instead() -> None:
    invoker = Invoker(double, sync_factory=lambda x: ("sync", x))
    assert invoker(1) == ("sync", 1)


def test_stream_invoker() -> None:
    stream = StreamInvoker(count)
    assert list(stream(3)) == [0, 1, 2]
    assert list(stream(0)) == []


async def test_stream_invoker_aio() -> None:
    assert [i async for i in StreamInvoker(count).aio(2)] == [0, 1]


def test_errors_pass_through() -> None:
    async def fail() -> None:
        raise ValueError("bad")

    async def fail_later() -> AsyncIterator[int]:
        yield 1
        raise ValueError("later")

    with pytest.raises(ValueError, match="bad"):
        Invoker(fail)()
    iterator = StreamInvoker(fail_later)()
    assert next(iterator) == 1
    with pytest.raises(ValueError, match="later"):
        next(iterator)
