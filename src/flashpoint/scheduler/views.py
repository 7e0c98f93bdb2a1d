"""Read models: what the plane shows of itself (explanations, Runpod's health body, fleet rows, endpoint rows,
metrics). Pure functions of the records and a plan: reading them starts, stops and changes nothing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from flashpoint.explain import Code, Explanation, WaitReason
from flashpoint.fleet.inventory import fleet_summary, nodes_summary
from flashpoint.gpus import describe
from flashpoint.jobs import Job, JobStatus
from flashpoint.scheduler.placement.fit import NoFit
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.placement.nodes import NodeLedger
from flashpoint.scheduler.records import EndpointState, WorkerState
from flashpoint.spec import EndpointSpec

#: why an endpoint can never run, per code of its reasons, as the explanation's summary says it
_NEVER = {
    Code.NOT_IN_FLEET: "no candidate exists in it with enough devices on one node",
    Code.CPU_TOO_LARGE: "no node has the vCPUs and memory of its CPU instance",
    Code.DATACENTER: "no node is in its datacenter",
    Code.CUDA_VERSION: "no node has a CUDA driver as new as its min_cuda_version",
}


def explain(
    ep: EndpointState,
    job: Job | None,
    waiting: Sequence[WaitReason],
    *,
    position: int | None,
    fleet: str,
    notes: tuple[str, ...] = (),
) -> Explanation:
    """Why ``ep`` (or its ``job``) waits: ``waiting`` are the planner's reasons for the endpoint now; ``notes`` what
    its options do not do on this fleet."""
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
        summary = never_summary(ep.never)
    elif not ep.queued and job is None:
        summary = f"nothing queued; {len(ep.workers)} worker(s)"
        if ep.spec.serves_routes:  # held requests stand where queued jobs do
            summary = f"no request waiting; {len(ep.workers)} worker(s), {ep.in_flight} request(s) in flight"
    elif reasons and all(r.code is Code.NODE_AWAY for r in reasons):  # not "never": it ran there, and may again
        summary = "waiting for its node to return: " + "; ".join(dict.fromkeys(r.detail for r in reasons))
    elif reasons:
        summary = "waiting: " + "; ".join(sorted({r.code.value for r in reasons}))
    else:
        summary = "about to be taken by a worker"
    return Explanation(
        endpoint=ep.spec.key,
        summary=summary,
        reasons=tuple(reasons),
        never=ep.never is not None,
        job_id=job.id if job else None,
        status=job.status.value if job else None,
        position=position,
        queue_depth=ep.queued,
        workers=workers,
        fleet=fleet,
        notes=notes,
    )


def never_summary(nofit: NoFit) -> str:
    """``can never run on this fleet: ...``, worded by the codes of its reasons (the GPU wording first)."""
    codes = [c for c in _NEVER if any(r.code is c for r in nofit.reasons)]
    if Code.NOT_IN_FLEET in codes and len(codes) > 1:  # filters left the devices out: say that, not "no candidate"
        codes.remove(Code.NOT_IN_FLEET)
    return "can never run on this fleet: " + ("; ".join(_NEVER[c] for c in codes) or _NEVER[Code.NOT_IN_FLEET])


def never_message(spec: EndpointSpec, nofit: NoFit, index: FleetIndex) -> str:
    """The warning logged when an endpoint that can never run registers (or the fleet changes so)."""
    count = f"{spec.gpu_count} x " if spec.gpu_count > 1 else ""
    head = (
        f"endpoint {spec.key!r} asks for {count}{spec.describe_gpu()}, which no node of this fleet can ever "
        f"provide ({'; '.join(r.detail for r in nofit.reasons)}). "
        + (
            "Its requests are answered 503 no_worker until "
            if spec.serves_routes
            else "Its jobs will wait IN_QUEUE until "
        )
    )
    if not spec.uses_gpu:
        return f"{head}such a node joins. The nodes: {nodes_summary(index.nodes.nodes)}."
    fleet = fleet_summary(index.devices)
    if any(r.code is not Code.NOT_IN_FLEET for r in nofit.reasons):  # node filters left the models out
        return f"{head}such a node joins. The fleet has: {fleet}."
    most = max(((index.largest(c) or 0, describe(c)) for c in spec.candidates), default=(0, ""))
    if 0 < most[0] < spec.gpu_count:  # the model is here, on too few devices per node: ask for fewer, not another
        return (
            f"{head}such a node joins. The fleet has: {fleet}. To run now, lower gpu_count to {most[0]} "
            f"(the most {most[1]} devices one node has)."
        )
    models = sorted({d.model_name for d in index.devices})
    hint = (
        f"add a fallback the fleet has, e.g. gpu=[{', '.join(repr(describe(c)) for c in spec.candidates)}, "
        f"{models[0]!r}] or gpu=GpuGroup.ANY"
        if models
        else "run on a machine with GPUs, or simulate some with FLASHPOINT_SIMULATED_GPUS"
    )
    return f"{head}such a device joins. The fleet has: {fleet}. To run now, {hint}."


def health(ep: EndpointState) -> dict[str, Any]:
    """Runpod's ``/health`` body: job counters (completed/failed/retried monotonic) and workers by state."""
    states = [w.state for w in ep.workers.values()]
    return {
        "jobs": {
            "completed": ep.counters["completed"],
            "failed": ep.counters["failed"],
            "inProgress": sum(len(w.jobs) for w in ep.workers.values()) + ep.in_flight,
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
    """``GET /v1/fleet``'s devices, in fleet order, each with the worker and endpoint holding it. A device another
    flashpoint process of this machine holds names that process (``process``; ``endpoint`` says who it is in words,
    ``worker`` is its worker)."""
    rows = []
    for device in index.devices:
        holder = index.holder(device)
        other = index.process(holder.endpoint) if holder is not None else None
        row = {
            **device.to_json(),
            "worker": holder.worker_id if holder else None,
            "endpoint": holder.endpoint if holder else None,
        }
        if other is not None:
            row["worker"] = other.worker
            row["process"] = other.to_json()
        rows.append(row)
    return rows


def node_rows(ledger: NodeLedger) -> list[dict[str, Any]]:
    """``GET /v1/fleet``'s nodes, in fleet order: each node's facts, what is free, and the CPU workers' slots."""
    slots = ledger.slots()
    rows = []
    for node in ledger.nodes:
        cores, memory = ledger.free(node.name)
        rows.append(
            {
                **node.to_json(),
                "freeCpus": cores,
                "freeMemoryGb": round(memory / 1024, 1),
                "reservations": [
                    {
                        "worker": holder.worker_id,
                        "endpoint": holder.endpoint,
                        "cores": list(slot.cores),
                        "memoryGb": round(slot.memory_mb / 1024, 1),
                    }
                    for holder, slot in slots.items()
                    if slot.node == node.name
                ],
            }
        )
    return rows


def endpoint_row(ep: EndpointState, explanation: Explanation) -> dict[str, Any]:
    """``GET /v1/endpoints/{name}``: the endpoint's options, queue, workers, counters and explanation."""
    spec = ep.spec
    return {
        "name": spec.key,
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
        "kind": spec.kind,
        "routes": [{"method": r.method, "path": r.path} for r in spec.routes],
        "inFlight": ep.in_flight,
    }


@dataclass(frozen=True, slots=True)
class EndpointGauges:
    """What the metrics scrape reads of one endpoint."""

    name: str
    #: jobs IN_QUEUE (a route endpoint: requests held for a worker)
    queued: int
    #: jobs IN_PROGRESS (a route endpoint: requests in flight)
    running: int
    workers: dict[str, int]
    routes: bool = False


def gauges(endpoints: Iterable[EndpointState]) -> list[EndpointGauges]:
    rows = []
    for ep in endpoints:
        states = {state.value: 0 for state in WorkerState}
        for worker in ep.workers.values():
            states[worker.state.value] += 1
        running = sum(len(w.jobs) for w in ep.workers.values()) + ep.in_flight
        rows.append(EndpointGauges(ep.spec.key, ep.queued, running, states, ep.spec.serves_routes))
    return rows
