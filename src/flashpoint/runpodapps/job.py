"""A submitted job, for handles and ``Queue`` stubs alike (mirrors ``runpod/apps/job.py`` of ``runpod==2.0.0rc2``).

Its verbs are sync by default, with async forms through ``.aio``::

    job.status()            await job.status.aio()
    job.result()            (job.output is the same)
    job.cancel()            job.retry()
    for chunk in job.stream(): ...       async for chunk in job.stream.aio(): ...

On flashpoint a task's ``.spawn()`` returns a ``Job`` too (rc2's ``TaskJob`` is replaced): its target answers the
same verbs.

Standard library only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from flashpoint.runpodapps.invoker import Invoker, StreamInvoker
from flashpoint.runpodapps.targets import DEFAULT_TIMEOUT_SECONDS, FINAL_STATUSES, InvocationTarget

__all__ = ["Job"]


class Job:
    """a submitted queue job."""

    def __init__(self, data: dict[str, Any], target: InvocationTarget):
        self._data = dict(data)
        self._target = target
        self.status = Invoker(self._status_async)
        self.result = Invoker(self._result_async)
        self.output = self.result
        self.cancel = Invoker(self._cancel_async)
        self.retry = Invoker(self._retry_async)
        self.stream = StreamInvoker(self._stream_async)

    @property
    def id(self) -> str:
        job_id: str = self._data.get("id", "")
        return job_id

    @property
    def done(self) -> bool:
        return self._data.get("status", "UNKNOWN") in FINAL_STATUSES

    def _update(self, data: dict[str, Any]) -> None:
        self._data.update(data)

    async def _status_async(self) -> str:
        # terminal statuses never change; skip the round trip
        if not self.done:
            self._update(await self._target.job_status(self.id))
        status: str = self._data.get("status", "UNKNOWN")
        return status

    async def _result_async(self, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> Any:
        return await self._target.wait(self._data, timeout=timeout, on_status=self._update)

    async def _cancel_async(self) -> Job:
        self._update(await self._target.cancel_job(self.id))
        return self

    async def _retry_async(self) -> Job:
        self._update(await self._target.retry_job(self.id))
        return self

    async def _stream_async(self, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> AsyncIterator[Any]:
        async for chunk in self._target.stream_job(self.id, timeout=timeout):
            yield chunk

    def __repr__(self) -> str:
        status = self._data.get("status", "UNKNOWN")
        return f"Job(id={self.id!r}, status={status!r})"
