"""Read models: what the plane shows of itself (explanations, Runpod's health body, fleet rows, endpoint rows,
metrics). Pure functions of the records and a plan: reading them starts, stops and changes nothing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from flashpoint.explain import Explanation, WaitReason
from flashpoint.gpus import describe
from flashpoint.jobs import Job, JobStatus
from flashpoint.scheduler.index import FleetIndex
from flashpoint.scheduler.records import EndpointState, WorkerState


def explain(
    ep: EndpointState,
    job: Job | None,
    waiting: Sequence[WaitReason],
    *,
    position: int | None,
    fleet: str,
) -> Explanation:
    """Why ``ep`` (or its ``job``) waits: ``waiting`` are the planner's reasons for the endpoint now."""
    workers = {s.value.lower(): 0 for s in WorkerState}
    for worker in ep.workers.values():
        workers[worker.state.value.lower()] += 1
    reasons: Sequence[WaitReason] = waiting
    if job is not None and job.status is not JobStatus.IN_QUEUE:
        summary = {
            JobStatus.IN_PROGRESS: f"running on worker {job.worker_id}",
            JobStatus.COMPLETED: "completed",
        }.get(job.status, f"ended {job.status.value} ({job.reason.value if job.reason else '?'})")
        reasons = ()
        position = None
    elif ep.never is not None:
        reasons = ep.never.reasons
        summary = "can never run on this fleet: no candidate exists in it with enough devices on one node"
    elif not ep.queued and job is None:
        summary = f"nothing queued; {len(ep.workers)} worker(s)"
    elif reasons:
        summary = "waiting: " + "; ".join(sorted({r.code.value for r in reasons}))
    else:
        summary = "about to be taken by a worker"
    return Explanation(
        endpoint=ep.spec.name,
        summary=summary,
        reasons=tuple(reasons),
        never=ep.never is not None,
        job_id=job.id if job else None,
        status=job.status.value if job else None,
        position=position,
        queue_depth=ep.queued,
        workers=workers,
        fleet=fleet,
    )


def health(ep: EndpointState) -> dict[str, Any]:
    """Runpod's ``/health`` body: job counters (completed/failed/retried monotonic) and workers by state."""
    states = [w.state for w in ep.workers.values()]
    return {
        "jobs": {
            "completed": ep.counters["completed"],
            "failed": ep.counters["failed"],
            "inProgress": sum(len(w.jobs) for w in ep.workers.values()),
            "inQueue": ep.queued,
            "retried": ep.counters["retried"],
        },
        "workers": {
            "idle": states.count(WorkerState.IDLE),
            "initializing": states.count(WorkerState.STARTING),
            "ready": states.count(WorkerState.IDLE) + states.count(WorkerState.RUNNING),
            "running": states.count(WorkerState.RUNNING),
            "throttled": 0,
            "unhealthy": sum(1 for w in ep.workers.values() if w.state is WorkerState.STOPPING and w.retiring),
        },
    }


def fleet_rows(index: FleetIndex) -> list[dict[str, Any]]:
    """``GET /v1/fleet``'s devices, in fleet order, each with the worker and endpoint holding it."""
    rows = []
    for device in index.devices:
        holder = index.holder(device)
        rows.append(
            {
                **device.to_json(),
                "worker": holder.worker_id if holder else None,
                "endpoint": holder.endpoint if holder else None,
            }
        )
    return rows


def endpoint_row(ep: EndpointState, explanation: Explanation) -> dict[str, Any]:
    """``GET /v1/endpoints/{name}``: the endpoint's options, queue, workers, counters and explanation."""
    spec = ep.spec
    return {
        "name": spec.name,
        "gpu": spec.describe_gpu(),
        "candidates": [describe(c) for c in spec.candidates],
        "cpu": list(spec.cpu) or None,
        "gpuCount": spec.gpu_count,
        "workersMin": spec.workers_min,
        "workersMax": spec.workers_max,
        "idleTimeout": spec.idle_timeout_s,
        "executionTimeoutMs": spec.execution_timeout_ms,
        "maxConcurrency": spec.max_concurrency,
        "scalerType": spec.scaler_type.value,
        "scalerValue": spec.scaler_value,
        "queueDepth": ep.queued,
        "workers": [w.to_json() for w in ep.workers.values()],
        "counters": dict(ep.counters),
        "explanation": explanation.to_json(),
    }


@dataclass(frozen=True, slots=True)
class EndpointGauges:
    """What the metrics scrape reads of one endpoint."""

    name: str
    queued: int
    running: int
    workers: dict[str, int]


def gauges(endpoints: Iterable[EndpointState]) -> list[EndpointGauges]:
    rows = []
    for ep in endpoints:
        states = {state.value: 0 for state in WorkerState}
        for worker in ep.workers.values():
            states[worker.state.value] += 1
        rows.append(EndpointGauges(ep.spec.name, ep.queued, sum(len(w.jobs) for w in ep.workers.values()), states))
    return rows
