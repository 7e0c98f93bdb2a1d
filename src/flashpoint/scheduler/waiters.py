"""Who waits for what: callers waiting for a job to end, listeners of every job's end, readers waiting for a
streamed chunk; and ``settle_after``, the timer that ends a long-poll.

Invariants: a job's end is told to its waiters, then to the listeners, each exactly once and only after the commit
that made it durable (``GroupCommit.after_commit``); one failing callback never keeps the others from the view.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from flashpoint.jobs import JobView

if TYPE_CHECKING:
    from flashpoint.scheduler.records import Worker

T = TypeVar("T")
log = logging.getLogger("flashpoint.plane")


class Waiters:
    def __init__(self) -> None:
        self._ends: dict[str, list[Callable[[JobView], None]]] = {}
        self._chunks: dict[str, list[asyncio.Future[None]]] = {}
        self._listeners: list[Callable[[JobView], None]] = []

    # a job's end

    def on_end(self, job_id: str, callback: Callable[[JobView], None]) -> Callable[[], None]:
        """Call ``callback(view)`` when ``job_id`` ends (the caller checked it has not yet); returns an unsubscribe."""
        callbacks = self._ends.setdefault(job_id, [])
        callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in callbacks:
                callbacks.remove(callback)

        return unsubscribe

    def listen(self, callback: Callable[[JobView], None]) -> Callable[[], None]:
        """Call ``callback(view)`` for every job that ends; returns an unsubscribe."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return unsubscribe

    def waits_for(self, job_id: str) -> bool:
        return bool(self._ends.get(job_id))

    def take_ended(self, job_id: str) -> Callable[[JobView], None] | None:
        """The notification for a job that just ended (None when nobody listens): call it once it is durable."""
        callbacks = self._ends.pop(job_id, None) or []
        if not callbacks and not self._listeners:
            return None
        listeners = list(self._listeners)

        def notify(view: JobView) -> None:
            for callback in [*callbacks, *listeners]:
                try:
                    callback(view)
                except Exception:  # one broken waiter or listener must not keep the others from the result
                    log.exception("job waiter failed")

        return notify

    # streamed chunks

    def chunk_arrived(self, job_id: str) -> None:
        """Wake the readers waiting for ``job_id``'s next chunk (or its end)."""
        for future in self._chunks.pop(job_id, []):
            if not future.done():
                future.set_result(None)

    async def next_chunk(self, job_id: str, wait_s: float) -> None:
        """Return when ``job_id`` gets a chunk or ends, or after ``wait_s``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._chunks.setdefault(job_id, []).append(future)
        timer = settle_after(future, wait_s, lambda: None)
        try:
            await future
        finally:
            timer.cancel()
            waiting = self._chunks.get(job_id)
            if waiting is not None and future in waiting:
                waiting.remove(future)
                if not waiting:
                    del self._chunks[job_id]


def settle_after(future: asyncio.Future[T], seconds: float, outcome: Callable[[], Any]) -> asyncio.TimerHandle:
    """Settle ``future`` after ``seconds`` unless something settles it first: with ``outcome()``, raised to the awaiter
    when it is an exception. ``asyncio.wait_for`` without its extra task and cancellation work: on every job's path."""

    def settle() -> None:
        if not future.done():
            value = outcome()
            if isinstance(value, BaseException):
                future.set_exception(value)
            else:
                future.set_result(value)

    return asyncio.get_running_loop().call_later(seconds, settle)


def wake(worker: Worker) -> None:
    """Answer the worker's job-stop long-poll now."""
    if worker.stop_waiter is not None and not worker.stop_waiter.done():
        worker.stop_waiter.set_result(None)
