"""``EndpointJob``: a submitted job in Runpod Flash's shape, what the client verbs (``run``, ``runsync``, ``cancel``)
of ``Endpoint(id=...)`` and of a ``worker_command`` endpoint return.

Flash's members behave as Flash's: ``id``, ``output``, ``error`` (a string), ``done``, ``await status()`` (the status
string, refreshing the job), ``await wait(timeout)`` and ``await cancel()`` (both return the job itself). flashpoint's
own view stays beside them: ``view`` (placement, delay and execution time, reason, logs), ``failure`` (the
``JobFailedError`` with the remote type and traceback), ``await result()`` and ``await explain()``.

It wraps a ``JobHandle`` (what decorated functions' ``fn.run()`` returns, unchanged): one job, two shapes, the same
connection underneath.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashpoint.errors import ConfigError, JobFailedError
from flashpoint.jobs import JobStatus, JobView
from flashpoint.sdk.connection import Connection, ServerConnection
from flashpoint.sdk.jobhandle import JobHandle

if TYPE_CHECKING:
    from flashpoint.explain import Explanation

__all__ = ["EndpointJob", "run_job", "runsync_job", "with_webhook"]


class EndpointJob:
    """A submitted job, as Runpod Flash's ``EndpointJob``.

    Flash's members: ``id``; ``output`` (once COMPLETED); ``error``, the failure's message as a string (what Flash's
    workers put in Runpod's ``error`` field: ``str(exception)``); ``done``, whether the status is terminal;
    ``await status()``, ``await wait(timeout=None)`` and ``await cancel()``.

    flashpoint's own: ``view`` (the last ``JobView`` fetched: placement, delay and execution time, worker, reason,
    retries, logs), ``failure`` (the ``JobFailedError`` with the remote type, message, traceback and reason),
    ``await result(timeout)`` (the output, or that error raised) and ``await explain()`` (why it waits).

    Example:
        >>> job = await Endpoint(id="inference").run({"prompt": "a red fox"})
        >>> await job.wait(timeout=60)
        >>> job.output if job.error is None else job.error
    """

    __slots__ = ("_job",)

    def __init__(self, conn: Connection, view: JobView) -> None:
        self._job: JobHandle[Any] = JobHandle(conn, view)

    # -- Flash's members --------------------------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The job's id."""
        return self._job.id

    @property
    def output(self) -> Any:
        """The output once the job COMPLETED (after ``wait()`` or ``status()``), else None."""
        return self._job.output

    @property
    def error(self) -> str | None:
        """The error message once the job ended FAILED, CANCELLED or TIMED_OUT, else None; ``failure`` has the
        remote type, traceback and reason."""
        view = self._job.view
        if not view.status.terminal or view.status is JobStatus.COMPLETED:
            return None
        return view.error.message if view.error is not None else view.status.value

    @property
    def done(self) -> bool:
        """Whether the job has reached a terminal status (as of the last fetch)."""
        return self._job.view.status.terminal

    async def status(self) -> str:
        """Fetch the job and return its status: "IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELLED" or
        "TIMED_OUT"; ``output``, ``error`` and ``done`` then reflect it."""
        return await self._job.status()

    async def wait(self, timeout: float | None = None) -> EndpointJob:
        """Wait until the job ends (it does not raise when it failed: see ``error``) and return the job.

        Raises:
            TimeoutError: ``timeout`` seconds passed first; the job goes on.
        """
        await self._job.wait(timeout)
        return self

    async def cancel(self) -> EndpointJob:
        """Cancel the job (queued or running) and return it; a finished job is left as it is."""
        await self._job.cancel()
        return self

    # -- flashpoint's own -------------------------------------------------------------------------------------------

    @property
    def view(self) -> JobView:
        """The last snapshot fetched: placement, delay and execution time, worker id, reason, retries, logs."""
        return self._job.view

    @property
    def failure(self) -> JobFailedError | None:
        """Once the job ended without output, its error (``JobCancelledError``, ``JobTimeoutError`` for those
        statuses) with the remote type, message, traceback and reason; else None."""
        return self._job.error

    async def result(self, timeout: float | None = None) -> Any:
        """Wait and return the output, or raise ``failure``.

        Raises:
            JobFailedError: the job failed, was cancelled or timed out.
            TimeoutError: ``timeout`` seconds passed first; the job goes on.
        """
        return await self._job.result(timeout)

    async def explain(self) -> Explanation:
        """Why the job waits: its queue position and a reason per GPU candidate."""
        return await self._job.explain()

    def __repr__(self) -> str:
        return f"EndpointJob(id={self.id!r}, status={self._job.view.status.value!r})"


def with_webhook(conn: Connection, extra: dict[str, Any], webhook: str | None) -> dict[str, Any]:
    """``extra`` with Runpod's ``webhook`` beside the input; only a flashpoint server delivers webhooks."""
    if webhook is None:
        return extra
    if not isinstance(conn, ServerConnection):
        raise ConfigError(
            "webhook= is delivered by a flashpoint server (`flashpoint serve app.py`, reached with FLASHPOINT_URL); "
            "the control plane in this process does not deliver webhooks: wait for the job instead "
            "(`await job.wait()`), or serve the app and set FLASHPOINT_URL"
        )
    return {**extra, "webhook": webhook}


async def run_job(conn: Connection, endpoint: str, input_data: Any, extra: dict[str, Any]) -> EndpointJob:
    """Submit a job with ``input_data`` as its input, as it is; the job as soon as it is queued."""
    return EndpointJob(conn, await conn.submit(endpoint, input_data, extra))


async def runsync_job(
    conn: Connection, endpoint: str, input_data: Any, extra: dict[str, Any], timeout: float | None
) -> EndpointJob:
    """Submit a job and wait for it to end; ``TimeoutError`` (naming the job, which goes on) after ``timeout`` s."""
    if timeout is None:
        return EndpointJob(conn, await conn.call(endpoint, input_data, extra))
    job = await run_job(conn, endpoint, input_data, extra)
    return await job.wait(timeout)
