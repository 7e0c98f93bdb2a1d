"""The one exception tree of flashpoint.

    Error                        base: ``except flashpoint.Error`` catches everything we raise
    ├─ ConfigError               bad settings (FLASHPOINT_* variables, simulated fleet spec)
    ├─ InvalidEndpointError      caught at decoration time: bad option, bare @Endpoint, ...
    │  └─ UnknownGPUError        a GPU name that is in no table; carries close matches
    ├─ NotFoundError             unknown job, endpoint or worker id
    ├─ InvalidTransitionError    a job status move that TRANSITIONS forbids
    ├─ BadInputError             an HTTP request the API cannot accept (its ``code`` says which check failed)
    ├─ ConflictError             a name taken, a rollout still running, a bare name several apps serve (409)
    ├─ ForbiddenError            a key whose scope does not allow the operation (403, naming the scope needed)
    ├─ QueueFullError            the plane holds as many queued jobs (or bytes of input) as it may: retry later
    ├─ BudgetSpentError          an app's, environment's or key's GPU-hour budget is spent: no new job until it renews
    ├─ UnsatisfiableError        a waiting call to an endpoint no device of a fleet that cannot change could ever run
    ├─ JobFailedError            raised by ``await fn(...)``/``job.wait()``; remote type, message, traceback
    │  ├─ JobCancelledError      the job was cancelled
    │  └─ JobTimeoutError        the job ended TIMED_OUT
    ├─ BackendError              a worker could not be started or the backend failed
    │  └─ NotReadyError          a worker's home (a Ray actor) was not ready in time: try the next candidate
    ├─ RolloutFailed             a new version never became ready (build, crash loop, timeout): the old one serves on
    └─ StoreError                persistence failure

Every class has a stable ``code`` used on the wire; the HTTP layer maps classes to statuses in one table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar


class Error(Exception):
    """Base class of every error flashpoint raises."""

    code: ClassVar[str] = "error"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class ConfigError(Error):
    """A setting has a value flashpoint cannot use."""

    code = "config_error"


class InvalidEndpointError(Error):
    """An ``Endpoint`` was declared with options that cannot work."""

    code = "invalid_endpoint"


class UnknownGPUError(InvalidEndpointError):
    """A GPU name matches no GpuType, GpuGroup or known model."""

    code = "unknown_gpu"

    def __init__(self, message: str, *, name: str = "", suggestions: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.name = name
        self.suggestions = tuple(suggestions)


class NotFoundError(Error):
    """No job, endpoint or worker has that id."""

    code = "not_found"


class InvalidTransitionError(Error):
    """A job cannot move from its current status to the requested one."""

    code = "invalid_transition"


class UnsatisfiableError(Error):
    """``await fn(...)`` on an embedded plane whose fleet cannot change (this machine's GPUs, or a simulated fleet),
    for an endpoint no device of it could ever run: the call would wait forever, so it fails at once, saying what to
    change. ``fn.run(...)`` still queues the job (``IN_QUEUE``, explained ``never``), as the seed says."""

    code = "unsatisfiable"


class JobFailedError(Error):
    """A job ended without output; carries the remote error type, message and traceback."""

    code = "job_failed"

    def __init__(
        self,
        message: str,
        *,
        job_id: str = "",
        status: str = "FAILED",
        reason: str | None = None,
        remote_type: str | None = None,
        remote_message: str | None = None,
        remote_traceback: str | None = None,
    ) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.status = status
        self.reason = reason
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        text = super().__str__()
        if self.remote_traceback:
            return f"{text}\n\nRemote traceback:\n{self.remote_traceback.rstrip()}"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(job_id={self.job_id!r}, status={self.status!r}, reason={self.reason!r}, "
            f"remote_type={self.remote_type!r}, remote_message={self.remote_message!r})"
        )


class JobCancelledError(JobFailedError):
    """The job was cancelled before it produced output."""

    code = "job_cancelled"


class JobTimeoutError(JobFailedError):
    """The job ended TIMED_OUT (execution timeout or queue TTL)."""

    code = "job_timed_out"


class BadInputError(Error):
    """A request the API cannot accept: malformed JSON, wrong types, input that does not fit the function."""

    code = "bad_input"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code  # type: ignore[misc]


class ConflictError(Error):
    """A request that clashes with what exists: a name taken, a rollout still running, a bare endpoint name that
    several apps serve (the answer names what to use instead)."""

    code = "conflict"


class ForbiddenError(Error):
    """A key whose scope does not allow the operation on a resource it may see; the message names the scope needed."""

    code = "forbidden"


class QueueFullError(Error):
    """The control plane already holds as many queued jobs, or as many bytes of queued input, as it may."""

    code = "queue_full"


class BudgetSpentError(Error):
    """A GPU-hour budget (``flashpoint quota set --gpu-hours``) of the job's app, environment or key is spent: the job
    is refused, not queued (decision 0113). The message names the budget, its use and when it renews; ``quota`` is
    the budget's flags, ``renews_at`` the wall time it renews and ``retry_after_s`` the seconds until then (HTTP's
    ``Retry-After``)."""

    code = "budget_spent"

    def __init__(self, message: str, *, quota: str = "", renews_at: float = 0.0, retry_after_s: int = 0) -> None:
        super().__init__(message)
        self.quota = quota
        self.renews_at = renews_at
        self.retry_after_s = retry_after_s


class BackendError(Error):
    """A backend could not start or reach a worker."""

    code = "backend_error"


class NotReadyError(BackendError):
    """A worker was placed but its process never came up in time (a Ray actor still pending, say).

    The plane does not count it as a failed start: it sets the devices aside for a while and places the worker on
    the next candidate.
    """

    code = "worker_not_ready"


class RolloutFailed(Error):
    """An endpoint's new version never became ready, so the plane abandoned it and the version before serves on
    untouched; the message says why in words a person can act on (the build's error, a crash loop's last lines, how
    many workers were ready when the time ran out)."""

    code = "rollout_failed"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StoreError(Error):
    """The job store failed."""

    code = "store_error"
