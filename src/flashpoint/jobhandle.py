"""Job handles: what ``fn.run(...)`` returns; and turning a finished job into its output or its error."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashpoint import codec
from flashpoint.connection import Connection
from flashpoint.errors import JobCancelledError, JobFailedError, JobTimeoutError
from flashpoint.jobs import JobStatus, JobView

if TYPE_CHECKING:
    from flashpoint.explain import Explanation


def job_result(view: JobView) -> Any:
    if view.status is JobStatus.COMPLETED:
        return codec.decode_output(view.output, binary=view.output_binary)
    raise job_failure(view)


def job_failure(view: JobView) -> JobFailedError:
    error = view.error
    reason = view.reason.value if view.reason else None
    kind: type[JobFailedError] = JobFailedError
    if view.status is JobStatus.CANCELLED:
        kind = JobCancelledError
    elif view.status is JobStatus.TIMED_OUT:
        kind = JobTimeoutError
    head = f"job {view.id} on endpoint {view.endpoint!r} ended {view.status.value}"
    if reason:
        head += f" ({reason})"
    if error is not None:
        head += f": {error.type}: {error.message}"
    return kind(
        head,
        job_id=view.id,
        status=view.status.value,
        reason=reason,
        remote_type=error.type if error else None,
        remote_message=error.message if error else None,
        remote_traceback=error.traceback if error else None,
    )


class JobHandle:
    """A submitted job: ``id``, ``await status()``, ``await wait()``, ``output``, ``error``, ``await cancel()``."""

    def __init__(self, conn: Connection, view: JobView) -> None:
        self._conn = conn
        self._view = view

    @property
    def id(self) -> str:
        return self._view.id

    @property
    def view(self) -> JobView:
        """The last snapshot fetched: delay and execution time, worker id, placement, reason, retries."""
        return self._view

    @property
    def output(self) -> Any:
        """The output once COMPLETED (after ``wait()`` or ``status()``), else None."""
        if self._view.status is JobStatus.COMPLETED:
            return codec.decode_output(self._view.output, binary=self._view.output_binary)
        return None

    @property
    def error(self) -> JobFailedError | None:
        """The failure once the job ended without output, else None."""
        if self._view.status.terminal and self._view.status is not JobStatus.COMPLETED:
            return job_failure(self._view)
        return None

    async def status(self) -> str:
        """The job's status now: "IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELLED" or "TIMED_OUT"."""
        self._view = await self._conn.get(self.id)
        return self._view.status.value

    async def wait(self, timeout: float | None = None) -> str:
        """Wait until the job ends and return its final status; ``TimeoutError`` if ``timeout`` seconds pass first."""
        self._view = await self._conn.wait(self.id, timeout)
        return self._view.status.value

    async def result(self, timeout: float | None = None) -> Any:
        """Wait and return the output, or raise ``JobFailedError`` (with the remote type and traceback)."""
        await self.wait(timeout)
        return job_result(self._view)

    async def cancel(self) -> str:
        """Cancel the job (queued or running) and return its status; finished jobs are left as they are."""
        self._view = await self._conn.cancel(self.id)
        return self._view.status.value

    async def explain(self) -> Explanation:
        """Why the job waits: its queue position and a reason per GPU candidate."""
        return await self._conn.explain_job(self.id)

    def __repr__(self) -> str:
        return f"<Job {self.id} {self._view.status.value}>"
