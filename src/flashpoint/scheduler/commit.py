"""Group commit: every job change is written through to the store at once, and one ``flush`` per loop iteration
makes all of them durable together.

Invariant: what must not be heard of before it is durable (a job's end, told to its waiters and listeners) runs
in ``after_commit``, after the flush that covers it. A failed flush keeps those callbacks for the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from flashpoint.jobs import Job
from flashpoint.store.base import JobStore

log = logging.getLogger("flashpoint.plane")


class GroupCommit:
    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._after: list[Callable[[], object]] = []
        self._scheduled = False

    def save(self, job: Job) -> None:
        """Write the job's change through; it becomes durable with this iteration's commit."""
        self.store.update(job)
        self.soon()

    def soon(self) -> None:
        """Commit at the end of this loop iteration (once, however many changes come before it)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.commit)

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once everything written so far is durable."""
        self._after.append(callback)
        self.soon()

    def commit(self) -> None:
        self._scheduled = False
        try:
            self.store.flush()
        except Exception:
            log.exception("committing job changes failed; they will be retried with the next change")
            return
        callbacks, self._after = self._after, []
        for callback in callbacks:
            callback()

    async def committed(self) -> None:
        """Wait until every change made so far is durable."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done() -> None:
            if not future.done():
                future.set_result(None)

        self.after_commit(done)
        await future
