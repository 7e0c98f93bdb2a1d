"""``@local_entrypoint``: the function a script's run starts from (mirrors ``runpod/apps/entrypoint.py`` of
``runpod==2.0.0rc2``).

    @runpod.local_entrypoint
    async def main():
        result = transcribe.remote("https://...")

The decorated function is registered, not run, and returned unwrapped; whoever runs the file (rc2's ``rp flash
dev``, flashpoint's ``flashpoint run``) finds it with ``get_entrypoint()`` and runs it with ``run_entrypoint``
(sync or async).

Standard library only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from flashpoint.runpodapps.context import block

__all__ = ["get_entrypoint", "local_entrypoint", "run_entrypoint"]

F = TypeVar("F", bound=Callable[..., Any])

_ENTRYPOINTS: list[Callable[..., Any]] = []


def local_entrypoint(fn: F) -> F:
    """register a function as the dev-session entrypoint; the function is returned unwrapped so it stays directly
    callable."""
    _ENTRYPOINTS.append(fn)
    return fn


def get_entrypoint() -> Callable[..., Any] | None:
    """the most recently registered entrypoint, if any."""
    return _ENTRYPOINTS[-1] if _ENTRYPOINTS else None


def run_entrypoint(fn: Callable[..., Any]) -> Any:
    """execute an entrypoint, driving the loop for async functions."""
    result = fn()
    if inspect.isawaitable(result):
        return block(_awaited(result))
    return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _clear_entrypoints() -> None:
    """testing only."""
    _ENTRYPOINTS.clear()
