"""Where a call goes: the contract of an invocation target, and the job payload helpers every target shares (mirrors
``runpod/apps/targets.py`` of ``runpod==2.0.0rc2``).

A target is resolved per call by ``App._resolve`` and reaches one resource. ``InvocationTarget`` is rc2's abstract
class with rc2's method names and signatures; flashpoint's concrete targets live in ``bridge.py`` and call through
flashpoint's own connection (rc2's ``SentinelTarget``, ``LiveTarget``, ``PodTarget`` and its aiohttp client are left
out). The helpers are rc2's sentinel data plane: ``args_to_input`` maps positional arguments onto parameter names
(no arguments is ``{"__empty": True}``), ``build_job_options``/``merge_job_options`` shape ``with_options``'s
per-job fields, and ``unwrap_job_output`` turns a job's record into its output or ``RemoteExecutionError``.

Standard library only.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any

from flashpoint.runpodapps.errors import RemoteExecutionError
from flashpoint.runpodapps.spec import ResourceSpec

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "FINAL_STATUSES",
    "InvocationTarget",
    "args_to_input",
    "build_job_options",
    "merge_job_options",
    "unwrap_job_output",
]

DEFAULT_TIMEOUT_SECONDS = 300.0

#: terminal job statuses on the queue data plane
FINAL_STATUSES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})


def args_to_input(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """map positional args onto parameter names so the job input is a dict."""
    sig = inspect.signature(fn)
    params = [name for name in sig.parameters if name not in ("self", "cls")]
    body: dict[str, Any] = {}
    for i, arg in enumerate(args):
        if i >= len(params):
            raise TypeError(f"{fn.__name__}() got {len(args)} positional args, expected at most {len(params)}")
        if params[i] in kwargs:
            raise TypeError(f"{fn.__name__}() got multiple values for argument '{params[i]}'")
        body[params[i]] = arg
    body.update(kwargs)
    # the platform strips empty input dicts from jobs; keep one field so the worker's job polling never sees a
    # missing input
    if not body:
        body = {"__empty": True}
    return body


def build_job_options(
    webhook: str | None = None,
    execution_timeout: int | None = None,
    ttl: int | None = None,
    low_priority: bool | None = None,
    s3_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """shape per-job queue options into the wire payload: they ride alongside `input` on a queue job request,
    matching the raw data-plane api's job payload (``webhook``, ``policy``, ``s3Config``)."""
    options: dict[str, Any] = {}
    if webhook is not None:
        options["webhook"] = webhook
    policy: dict[str, Any] = {}
    if execution_timeout is not None:
        policy["executionTimeout"] = execution_timeout
    if ttl is not None:
        policy["ttl"] = ttl
    if low_priority is not None:
        policy["lowPriority"] = low_priority
    if policy:
        options["policy"] = policy
    if s3_config is not None:
        options["s3Config"] = s3_config
    return options


def merge_job_options(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """combine two option sets; policy fields accumulate rather than overwrite so chained with_options calls
    compose."""
    merged = dict(base)
    for key, value in new.items():
        if key == "policy" and isinstance(merged.get("policy"), dict):
            merged["policy"] = {**merged["policy"], **value}
        else:
            merged[key] = value
    return merged


def unwrap_job_output(data: dict[str, Any]) -> Any:
    """extract output from a queue response, raising on failure."""
    output = data.get("output", data)
    if data.get("status") == "FAILED" or data.get("error"):
        err = data.get("error")
        if not err:
            if isinstance(output, dict):
                err = output.get("error")
            elif isinstance(output, list):
                err = next(
                    (item["error"] for item in reversed(output) if isinstance(item, dict) and item.get("error")),
                    None,
                )
        raise RemoteExecutionError(f"remote execution failed: {err or 'unknown'}")
    if isinstance(output, dict) and "error" in output:
        raise RemoteExecutionError(f"remote execution failed: {output['error']}")
    return output


class InvocationTarget(ABC):
    """one resolved destination for remote calls.

    each target owns its payload shape; the default is rc2's sentinel payload, ``{"input": kwargs}``. ``invoke`` and
    ``submit`` are required; the job verbs, streaming, waiting and plain HTTP requests are optional and say so when
    a target has none. Handles call ``invoke(payload)``, ``stream_job(job_id)`` and ``request(...)`` without a
    ``timeout``: a concrete target gives it a default, as rc2's do (``DEFAULT_TIMEOUT_SECONDS`` for queue jobs, none
    for tasks).
    """

    def build_payload(
        self, fn: Callable[..., Any], spec: ResourceSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        return {"input": args_to_input(fn, args, kwargs)}

    def unwrap(self, data: dict[str, Any]) -> Any:
        return unwrap_job_output(data)

    @abstractmethod
    async def invoke(self, payload: dict[str, Any], *, timeout: float) -> Any:
        """submit and wait for the result."""

    @abstractmethod
    async def submit(self, payload: dict[str, Any]) -> dict[str, Any]:
        """submit without waiting; returns the raw job data."""

    async def job_status(self, job_id: str) -> dict[str, Any]:
        """fetch the current state of a submitted job."""
        raise NotImplementedError(f"{type(self).__name__} does not support job status")

    async def cancel_job(self, job_id: str) -> dict[str, Any]:
        """cancel a submitted job."""
        raise NotImplementedError(f"{type(self).__name__} does not support job cancellation")

    async def retry_job(self, job_id: str) -> dict[str, Any]:
        """retry a failed or timed-out job."""
        raise NotImplementedError(f"{type(self).__name__} does not support job retries")

    def stream_job(self, job_id: str, *, timeout: float) -> AsyncIterator[Any]:
        """yield partial outputs of a generator job as they arrive."""
        raise NotImplementedError(f"{type(self).__name__} does not support job streaming")

    async def wait(
        self,
        job_data: dict[str, Any],
        *,
        timeout: float,
        on_status: Callable[[dict[str, Any]], None] | None = None,
    ) -> Any:
        """wait for a submitted job to finish and return its output."""
        raise NotImplementedError(f"{type(self).__name__} does not support job polling")

    async def request(self, method: str, path: str, body: Any = None, *, timeout: float) -> Any:
        """plain http call (lb resources only)."""
        raise NotImplementedError(f"{type(self).__name__} does not serve http routes")
