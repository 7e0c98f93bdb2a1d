"""What a running handler may ask about its job: the job object as its worker received it."""

from __future__ import annotations

import contextvars
from typing import Any

_job: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("flashpoint_current_job", default=None)


def current_job() -> dict[str, Any]:
    """The job this handler runs, as Runpod hands it to workers: ``id``, ``input`` and the passed-through keys
    (``s3Config``, ``webhook``, ``policy``).

    Raises:
        RuntimeError: outside a job (e.g. in ``fn.local(...)`` or at import time).

    Example:
        >>> @Endpoint(name="upload")
        ... async def upload(data: dict) -> str:
        ...     bucket = current_job().get("s3Config", {}).get("bucketName")  # doctest: +SKIP
    """
    job = _job.get()
    if job is None:
        raise RuntimeError("current_job() is only available while a worker runs a job")
    return job


def set_current_job(job: dict[str, Any] | None) -> contextvars.Token[dict[str, Any] | None]:
    return _job.set(job)


def reset_current_job(token: contextvars.Token[dict[str, Any] | None]) -> None:
    _job.reset(token)


def current_job_id() -> str | None:
    """The id of the job running in this context, or None (the worker's output tagging asks this for every line)."""
    job = _job.get()
    return None if job is None else str(job.get("id"))
