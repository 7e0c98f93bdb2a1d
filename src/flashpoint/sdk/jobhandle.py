"""Job handles: what ``fn.run(...)`` returns; and turning a finished job into its output or its error."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from flashpoint.errors import JobCancelledError, JobFailedError, JobTimeoutError
from flashpoint.jobs import JobStatus, JobView, Reason
from flashpoint.sdk.connection import Connection
from flashpoint.wire import codec

if TYPE_CHECKING:
    from flashpoint.explain import Explanation

#: a job's output: what the decorated function returns (awaited, and a generator's chunks as a list)
R = TypeVar("R")


def job_result(view: JobView) -> Any:
    if view.status is JobStatus.COMPLETED:
        return codec.decode_output(view.output, binary=view.output_binary)
    raise job_failure(view)


def job_failure(view: JobView) -> JobFailedError:
    """The error a failed job raises: a ``JobFailedError`` that is also an instance of the remote exception's type
    when this process has that type already (``except ValueError`` catches a remote ``ValueError``)."""
    error = view.error
    reason = view.reason.value if view.reason else None
    kind: type[JobFailedError] = JobFailedError
    if view.status is JobStatus.CANCELLED:
        kind = JobCancelledError
    elif view.status is JobStatus.TIMED_OUT:
        kind = JobTimeoutError
    elif error is not None and view.reason is Reason.USER_ERROR:
        kind = remote_kind(error.type)
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


class JobHandle(Generic[R]):
    """A submitted job: ``id``, ``await status()``, ``await wait()``, ``output``, ``error``, ``await cancel()``.

    Typed by its output: ``infer.run(...)`` of an ``async def infer(...) -> str`` gives a ``JobHandle[str]``, whose
    ``await result()`` is a ``str`` (a handle built from a job id alone is a ``JobHandle[Any]``)."""

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
    def output(self) -> R | None:
        """The output once COMPLETED (after ``wait()`` or ``status()``), else None."""
        if self._view.status is JobStatus.COMPLETED:
            output: R = codec.decode_output(self._view.output, binary=self._view.output_binary)
            return output
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

    async def result(self, timeout: float | None = None) -> R:
        """Wait and return the output, or raise ``JobFailedError`` (with the remote type and traceback)."""
        await self.wait(timeout)
        output: R = job_result(self._view)
        return output

    async def cancel(self) -> str:
        """Cancel the job (queued or running) and return its status; finished jobs are left as they are."""
        self._view = await self._conn.cancel(self.id)
        return self._view.status.value

    async def explain(self) -> Explanation:
        """Why the job waits: its queue position and a reason per GPU candidate."""
        return await self._conn.explain_job(self.id)

    def __repr__(self) -> str:
        return f"<Job {self.id} {self._view.status.value}>"


#: remote exception types already seen, each with its ``JobFailedError`` twin
_KINDS: dict[str, type[JobFailedError]] = {}


def remote_kind(remote_type: str) -> type[JobFailedError]:
    """``JobFailedError``, or a subclass of it and of the remote exception's type (``"ValueError"``,
    ``"__main__.ParseError"``, ``"json.decoder.JSONDecodeError"``) when that type is a builtin or lives in a module
    this process has imported already. A name the worker sent never makes this process import anything: a module
    that is not loaded here is not looked for."""
    kind = _KINDS.get(remote_type)
    if kind is None:
        kind = _twin(_find(remote_type))
        if kind is not None:  # only found ones are kept: the module may be imported later
            _KINDS[remote_type] = kind
    return kind or JobFailedError


def _find(remote_type: str) -> type[Exception] | None:
    """The exception class ``remote_type`` names, among builtins and modules already loaded (the longest module name
    that is loaded first: ``a.b.C`` is class ``C`` of ``a.b``, or class ``b.C`` of ``a``)."""
    parts = remote_type.split(".")
    for cut in range(len(parts) - 1, -1, -1):
        module = sys.modules.get(".".join(parts[:cut]) or "builtins")
        if module is None:
            continue
        found: Any = module
        for part in parts[cut:]:
            found = getattr(found, part, None)
        if isinstance(found, type) and issubclass(found, Exception) and not issubclass(found, JobFailedError):
            return found
    return None


def _twin(remote: type[Exception] | None) -> type[JobFailedError] | None:
    if remote is None:
        return None

    def __init__(self: JobFailedError, message: str, **details: Any) -> None:
        # the remote type's own __init__ is skipped (its arguments were never sent): the instance is built as a
        # JobFailedError's, with the message as its one argument
        Exception.__init__(self, message)
        for name, value in details.items():
            setattr(self, name, value)

    try:
        return type(remote.__name__, (JobFailedError, remote), {"__init__": __init__, "__module__": remote.__module__})
    except TypeError:  # a layout Python cannot combine with JobFailedError's
        return None
