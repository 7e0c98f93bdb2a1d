"""Jobs: Runpod's statuses, the allowed moves between them, reason codes and the records the plane keeps."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from flashpoint.errors import InvalidTransitionError

#: beside a result's (or a stream chunk's) ``output``: how it is encoded, when it is not plain JSON
ENCODING_KEY = "outputEncoding"
BINARY_ENCODING = "cloudpickle-base64"


class JobStatus(str, Enum):
    """A job's status; the values are Runpod's strings, on the wire and in storage."""

    #: accepted, waiting for a worker (also after a retry or a lost worker)
    IN_QUEUE = "IN_QUEUE"
    #: a worker has taken it
    IN_PROGRESS = "IN_PROGRESS"
    #: the handler returned; ``output`` holds the result
    COMPLETED = "COMPLETED"
    #: the handler raised or returned an error, or its worker was lost twice
    FAILED = "FAILED"
    #: cancelled by a user before it ended
    CANCELLED = "CANCELLED"
    #: ran past its execution timeout, or waited past its queue TTL
    TIMED_OUT = "TIMED_OUT"

    def __str__(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[JobStatus] = frozenset(
    {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.TIMED_OUT}
)

#: every allowed move; terminal states are final, except FAILED/TIMED_OUT -> IN_QUEUE through an explicit retry
TRANSITIONS: Mapping[JobStatus, frozenset[JobStatus]] = {
    JobStatus.IN_QUEUE: frozenset({JobStatus.IN_PROGRESS, JobStatus.CANCELLED, JobStatus.TIMED_OUT, JobStatus.FAILED}),
    JobStatus.IN_PROGRESS: frozenset(
        {JobStatus.IN_QUEUE, JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.TIMED_OUT}
    ),
    JobStatus.COMPLETED: frozenset(),
    JobStatus.FAILED: frozenset({JobStatus.IN_QUEUE}),
    JobStatus.CANCELLED: frozenset(),
    JobStatus.TIMED_OUT: frozenset({JobStatus.IN_QUEUE}),
}


class Reason(str, Enum):
    """Why a job reached its terminal state (or went back to the queue)."""

    #: the handler returned output
    COMPLETED = "completed"
    #: the handler raised, or returned ``{"error": ...}``
    USER_ERROR = "user_error"
    #: an endpoint dependency is not importable in the worker's environment
    DEPENDENCY_MISSING = "dependency_missing"
    #: the output could not be encoded for the caller
    OUTPUT_NOT_SERIALIZABLE = "output_not_serializable"
    #: the output was larger than the control plane takes from a worker (``max_result_bytes``)
    OUTPUT_TOO_LARGE = "output_too_large"
    #: ran longer than the execution timeout
    EXECUTION_TIMEOUT = "execution_timeout"
    #: waited in the queue longer than its TTL
    QUEUE_TTL_EXPIRED = "queue_ttl_expired"
    #: its worker died, and the one retry was used up (or is the reason for a requeue)
    WORKER_LOST = "worker_lost"
    #: no worker of the endpoint could start
    WORKER_START_FAILED = "worker_start_failed"
    #: the endpoint's environment (its ``dependencies``) could not be built
    ENVIRONMENT_FAILED = "environment_failed"
    #: a user cancelled it
    CANCELLED = "cancelled"
    #: the control plane shut down before the job ended (embedded mode only keeps jobs for its process)
    SHUTDOWN = "shutdown"
    #: still running when its TTL (whole lifetime) ran out
    TTL_EXPIRED = "ttl_expired"
    #: removed from the queue by purge-queue
    PURGED = "purged"
    #: its worker was taken for a higher priority class (the job went back to its queue: not a failure, not a retry)
    PREEMPTED = "preempted"

    def __str__(self) -> str:
        return self.value


#: a job keeps this many log lines: its first ones, the last kept saying the rest were cut (``LOG_CUT``)
MAX_JOB_LOG_LINES = 1000
LOG_CUT = (
    f"[flashpoint] log cut here: a job keeps its first {MAX_JOB_LOG_LINES - 1} lines; the rest went to the output of "
    "the flashpoint process that ran it (logger flashpoint.worker)"
)


#: in a job request's ``flashpoint`` metadata (``extra``), where the HTTP layer puts the name of the key submitting it;
#: ``Job`` takes it out into ``submitted_by`` as it is made, so the worker never sees it
SUBMITTED_BY_KEY = "submitted_by"
#: the metadata key that sends a job at low priority (``/v2/flash``'s ``policy.lowPriority``, the SDK's
#: ``low_priority=``); ``Job`` takes it out into ``low_priority`` as it is made
LOW_PRIORITY_KEY = "low_priority"

#: Runpod's default ``policy.ttl``: 24 hours
DEFAULT_TTL_MS = 24 * 3600 * 1000


def check_transition(current: JobStatus, new: JobStatus) -> None:
    """Raise InvalidTransitionError unless TRANSITIONS allows ``current -> new``."""
    if new not in TRANSITIONS[current]:
        raise InvalidTransitionError(f"a job cannot move from {current.value} to {new.value}")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job ran: which node, which GPU model, which devices, and whether they were simulated; for a CPU
    endpoint, its CPU instance type and the cores its worker was allotted."""

    node: str
    gpu_model: str | None
    device_ids: tuple[int, ...]
    simulated: bool
    cpu_instance: str | None = None
    cores: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "node": self.node,
            "gpuModel": self.gpu_model,
            "deviceIds": list(self.device_ids),
            "simulated": self.simulated,
        }
        if self.cpu_instance is not None:  # a CPU endpoint's job
            data["cpuInstance"] = self.cpu_instance
            data["cores"] = list(self.cores)
        return data


@dataclass(frozen=True, slots=True)
class JobError:
    """A job's error: the remote exception type, its message and the traceback text."""

    type: str
    message: str
    traceback: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "traceback": self.traceback}


@dataclass(slots=True)
class Job:
    """The record of one job. Only the control plane mutates it, on its own event loop."""

    id: str
    endpoint: str
    input: Any
    #: extra keys handed to the worker with the job (webhook, s3Config, policy, flashpoint's own metadata)
    extra: dict[str, Any] = field(default_factory=dict)
    status: JobStatus = JobStatus.IN_QUEUE
    reason: Reason | None = None
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    worker_id: str | None = None
    placement: Placement | None = None
    output: Any = None
    #: the output is a base64 pickle (``BINARY_ENCODING``): set only from a worker's result, for a job that
    #: accepted binary output; callers unpickle an output only when this says so
    output_binary: bool = False
    error: JobError | None = None
    #: how many times the job went back to the queue because its worker was lost
    retries: int = 0
    execution_timeout_ms: int = 0
    #: lifetime from submit (Runpod's ``policy.ttl``): queued past it -> TIMED_OUT; any job is deleted at it
    ttl_ms: int = DEFAULT_TTL_MS
    logs: list[str] = field(default_factory=list)
    #: bytes of the input's JSON (for the plane's queue cap): an accounting hint, not part of the record's value
    size: int = field(default=0, compare=False)
    #: chunks a generator handler posted (job-stream) not yet read through ``/stream`` (a destructive read):
    #: ``{"output": value}``, with ``ENCODING_KEY`` beside it for a binary chunk
    chunks: list[Any] = field(default_factory=list)
    #: the name of the key that submitted it (``server``: the server's own keys; ``worker:<id>``: a worker's caller
    #: key); None when no key was asked (an embedded plane, a server without keys)
    submitted_by: str | None = None
    #: sent at low priority (Runpod 2.x's ``policy.lowPriority``): it runs after its queue's other jobs
    low_priority: bool = False
    #: every run that ended without ending the job (preempted, worker lost): ``{"workerId", "placement",
    #: "startedAt", "endedAt", "outcome"}``, oldest first; the run that ends it is the job's own fields
    attempts: list[dict[str, Any]] = field(default_factory=list)
    #: the peak GPU memory (MiB) and mean GPU utilisation (%) of its worker while it ran, as the plane's GPU sampler
    #: saw them (decision 0117); None when no sample saw it run (simulated devices, CPU workers, too short a run)
    gpu_memory_peak_mb: int | None = None
    gpu_utilization_mean_pct: float | None = None
    #: the cold start it waited on: its worker's phases, name -> seconds (``wire/coldstart.py``, decision 0118);
    #: None when it ran on a worker that was ready before it came
    cold_start: dict[str, float] | None = None

    def __post_init__(self) -> None:
        policy = self.extra.get("policy")
        if isinstance(policy, dict) and policy.get("lowPriority") is True:  # Runpod's, passed through to the worker
            self.low_priority = True
        # the submitter rides in with the request's metadata (``SUBMITTED_BY_KEY``) and is kept here, not in extra
        meta = self.extra.get("flashpoint")
        if isinstance(meta, dict) and (SUBMITTED_BY_KEY in meta or LOW_PRIORITY_KEY in meta):
            name = meta.get(SUBMITTED_BY_KEY)
            if self.submitted_by is None and isinstance(name, str):
                self.submitted_by = name
            if meta.get(LOW_PRIORITY_KEY) is True:
                self.low_priority = True
            rest = {key: value for key, value in meta.items() if key not in (SUBMITTED_BY_KEY, LOW_PRIORITY_KEY)}
            self.extra = {key: value for key, value in self.extra.items() if key != "flashpoint"}
            if rest:
                self.extra["flashpoint"] = rest

    @property
    def expires_at(self) -> float:
        return self.created_at + self.ttl_ms / 1000

    @property
    def delay_time_ms(self) -> int | None:
        if self.started_at is None:
            return None
        return int((self.started_at - self.created_at) * 1000)

    @property
    def execution_time_ms(self) -> int | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return int((self.finished_at - self.started_at) * 1000)

    def move(self, new: JobStatus) -> None:
        check_transition(self.status, new)
        self.status = new

    def view(self) -> JobView:
        return JobView(
            id=self.id,
            endpoint=self.endpoint,
            status=self.status,
            reason=self.reason,
            output=self.output,
            output_binary=self.output_binary,
            error=self.error,
            delay_time_ms=self.delay_time_ms,
            execution_time_ms=self.execution_time_ms,
            worker_id=self.worker_id,
            placement=self.placement,
            retries=self.retries,
            created_at=self.created_at,
            logs=tuple(self.logs),
            webhook=self.extra.get("webhook") if isinstance(self.extra.get("webhook"), str) else None,
            submitted_by=self.submitted_by,
            low_priority=self.low_priority,
            attempts=tuple(self.attempts),
            gpu_memory_peak_mb=self.gpu_memory_peak_mb,
            gpu_utilization_mean_pct=self.gpu_utilization_mean_pct,
            cold_start=dict(self.cold_start) if self.cold_start else None,
        )


@dataclass(frozen=True, slots=True)
class JobView:
    """An immutable snapshot of a job, safe to hand across threads and to serialise."""

    id: str
    endpoint: str
    status: JobStatus
    reason: Reason | None
    output: Any
    error: JobError | None
    delay_time_ms: int | None
    execution_time_ms: int | None
    worker_id: str | None
    placement: Placement | None
    retries: int
    created_at: float
    logs: tuple[str, ...] = ()
    #: where to POST the final state (Runpod's ``webhook``); not part of the state object itself
    webhook: str | None = None
    #: the output is a base64 pickle (see ``Job.output_binary``)
    output_binary: bool = False
    #: the name of the key that submitted it (``Job.submitted_by``)
    submitted_by: str | None = None
    #: sent at low priority (``Job.low_priority``)
    low_priority: bool = False
    #: runs that ended without ending the job (``Job.attempts``)
    attempts: tuple[dict[str, Any], ...] = ()
    #: its GPU figures while it ran (``Job.gpu_memory_peak_mb``, ``Job.gpu_utilization_mean_pct``)
    gpu_memory_peak_mb: int | None = None
    gpu_utilization_mean_pct: float | None = None
    #: the cold start it waited on (``Job.cold_start``)
    cold_start: dict[str, float] | None = None

    @classmethod
    def queued(cls, job_id: str, endpoint: str, created_at: float = 0.0) -> JobView:
        """The view of a job known only by its id (just submitted, or named by a caller): IN_QUEUE, nothing else."""
        return cls(
            id=job_id,
            endpoint=endpoint,
            status=JobStatus.IN_QUEUE,
            reason=None,
            output=None,
            error=None,
            delay_time_ms=None,
            execution_time_ms=None,
            worker_id=None,
            placement=None,
            retries=0,
            created_at=created_at,
        )

    def to_native(self) -> dict[str, Any]:
        """Every field, for flashpoint's own API and client (the inverse of ``from_native``)."""
        return {
            "id": self.id,
            "endpoint": self.endpoint,
            "status": self.status.value,
            "reason": self.reason.value if self.reason else None,
            "output": self.output,
            ENCODING_KEY: BINARY_ENCODING if self.output_binary else None,
            "error": self.error.to_json() if self.error else None,
            "delayTime": self.delay_time_ms,
            "executionTime": self.execution_time_ms,
            "workerId": self.worker_id,
            "placement": self.placement.to_json() if self.placement else None,
            "retries": self.retries,
            "createdAt": self.created_at,
            "logs": list(self.logs),
            "submittedBy": self.submitted_by,
            "lowPriority": self.low_priority,
            "attempts": list(self.attempts),
            "gpuMemoryPeakMb": self.gpu_memory_peak_mb,
            "gpuUtilizationMeanPct": self.gpu_utilization_mean_pct,
            "coldStart": self.cold_start,
        }

    @classmethod
    def from_native(cls, data: dict[str, Any]) -> JobView:
        error, placement = data.get("error"), data.get("placement")
        return cls(
            id=data["id"],
            endpoint=data["endpoint"],
            status=JobStatus(data["status"]),
            reason=Reason(data["reason"]) if data.get("reason") else None,
            output=data.get("output"),
            output_binary=data.get(ENCODING_KEY) == BINARY_ENCODING,
            error=JobError(error["type"], error["message"], error.get("traceback", "")) if error else None,
            delay_time_ms=data.get("delayTime"),
            execution_time_ms=data.get("executionTime"),
            worker_id=data.get("workerId"),
            placement=Placement(
                placement["node"],
                placement["gpuModel"],
                tuple(placement["deviceIds"]),
                placement["simulated"],
                placement.get("cpuInstance"),
                tuple(placement.get("cores", ())),
            )
            if placement
            else None,
            retries=data.get("retries", 0),
            created_at=data.get("createdAt", 0.0),
            logs=tuple(data.get("logs", ())),
            submitted_by=data.get("submittedBy"),
            low_priority=bool(data.get("lowPriority", False)),
            attempts=tuple(data.get("attempts", ())),
            gpu_memory_peak_mb=data.get("gpuMemoryPeakMb"),
            gpu_utilization_mean_pct=data.get("gpuUtilizationMeanPct"),
            cold_start=data.get("coldStart"),
        )

    def to_json(self) -> dict[str, Any]:
        """Runpod's job state object, plus flashpoint's fields (reason, placement, retries)."""
        body: dict[str, Any] = {"id": self.id, "status": self.status.value}
        if self.delay_time_ms is not None:
            body["delayTime"] = self.delay_time_ms
        if self.execution_time_ms is not None:
            body["executionTime"] = self.execution_time_ms
        if self.worker_id is not None:
            body["workerId"] = self.worker_id
        if self.output is not None:
            body["output"] = self.output
            if self.output_binary:
                body[ENCODING_KEY] = BINARY_ENCODING
        if self.error is not None:
            body["error"] = self.error.message if not self.error.traceback else _runpod_error(self.error)
        if self.reason is not None:
            body["reason"] = self.reason.value
        if self.placement is not None:
            body["placement"] = self.placement.to_json()
        body["retries"] = self.retries
        return body


def _runpod_error(error: JobError) -> str:
    return f"{error.type}: {error.message}\n{error.traceback}"
