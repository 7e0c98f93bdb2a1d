"""Sync-by-default calls with an async escape hatch (mirrors ``runpod/apps/invoker.py`` of ``runpod==2.0.0rc2``).

An ``Invoker`` wraps a coroutine factory: calling it blocks and returns the result, ``.aio(...)`` returns the
coroutine for the caller to await::

    handle.remote(x)            # sync, blocks
    await handle.remote.aio(x)  # async

A ``StreamInvoker`` is the same for async generators: calling it returns a sync iterator, ``.aio(...)`` the async
one.

Standard library only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any

from flashpoint.runpodapps.context import block

__all__ = ["AsyncGenFactory", "CoroFactory", "Invoker", "StreamInvoker"]

CoroFactory = Callable[..., Coroutine[Any, Any, Any]]
AsyncGenFactory = Callable[..., AsyncIterator[Any]]


class Invoker:
    __slots__ = ("_factory", "_sync_factory")

    def __init__(self, factory: CoroFactory, *, sync_factory: Callable[..., Any] | None = None):
        self._factory = factory
        self._sync_factory = sync_factory

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._sync_factory is not None:
            return self._sync_factory(*args, **kwargs)
        return block(self._factory(*args, **kwargs))

    def aio(self, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        return self._factory(*args, **kwargs)


class StreamInvoker:
    __slots__ = ("_factory",)

    def __init__(self, factory: AsyncGenFactory):
        self._factory = factory

    def __call__(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        agen = self._factory(*args, **kwargs)
        while True:
            try:
                yield block(_anext(agen))
            except StopAsyncIteration:
                return

    def aio(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        return self._factory(*args, **kwargs)


async def _anext(agen: AsyncIterator[Any]) -> Any:
    return await agen.__anext__()
