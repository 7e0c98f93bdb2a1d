"""The what-if: where an app's endpoints' workers would go on a described fleet, or why they never could.

Pure: endpoint specs and devices in, one ``Row`` per endpoint out; no I/O, nothing started. ``flashpoint explain
--app app.py --fleet FLEET`` renders it.

Semantics (as if every endpoint had jobs queued at once, on an empty fleet; nothing yields, since every worker is
busy):

1. ``min``: in the order the app declares them, each endpoint gets its ``workers_min`` workers.
2. ``first``: each endpoint still without a worker gets one (the worker its first job would start), so "where would
   it go" has an answer also for ``workers_min = 0``.
3. ``scale``: round-robin in declared order, each endpoint below its ``workers_max`` gets one more worker, until
   none can: the last rounds show who runs out of room first.

Every worker is placed as the control plane places one (``scheduler.placement.place_endpoint``): on the nodes the
endpoint's ``datacenter=`` and ``min_cuda_version`` leave it, the first candidate in declared order with
``gpu_count`` free devices of one model on one node; a CPU worker, the first instance type whose vCPUs and memory are
free on one node. An endpoint that cannot get a worker once never gets another (the fleet only fills up), so its
reasons are those of that attempt. An endpoint that could never fit on this fleet is ``never`` (placement's
never-codes: ``not_in_fleet``, ``cpu_too_large``, ``datacenter``, ``cuda_version``) and takes no part.

Service module: imports the domain layer and ``scheduler.placement``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from flashpoint.explain import WaitReason
from flashpoint.fleet.inventory import Device, Holder, Node
from flashpoint.gpus import describe
from flashpoint.scheduler.optionnotes import host_option_notes
from flashpoint.scheduler.placement.fit import CpuFit, Fit, NoFit, endpoint_notes, never_candidates, place_endpoint
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.placement.nodes import CpuSlot
from flashpoint.spec import EndpointSpec

__all__ = ["Phase", "PlannedWorker", "Row", "Verdict", "what_if"]

#: why a worker is wanted: the endpoint's minimum, its first worker, or scaling up to its maximum
Phase = Literal["min", "first", "scale"]


class Verdict(str, Enum):
    """What an endpoint gets on the fleet."""

    #: it gets at least the workers its jobs need (its minimum, and at least one)
    RUNS = "runs"
    #: it does not: the GPUs (or vCPUs) it could use are all taken by workers placed before (busy); its jobs would
    #: wait
    WAITS = "waits"
    #: it could never fit on this fleet, even an idle one (not_in_fleet and the like); its jobs would wait forever
    NEVER = "never"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class PlannedWorker:
    """One worker the endpoint would get: which candidate matched, and which devices (or CPU slot) on which node."""

    worker_id: str
    phase: Phase
    #: the candidate that fit, as placement names it ("NVIDIA H200", "ANY"; a CPU instance type, "cpu3c-2-4")
    candidate: str
    node: str
    devices: tuple[Device, ...]
    #: a CPU worker's cores and memory (None for a GPU worker)
    cpu: CpuSlot | None = None
    #: whether its node is simulated (a CPU worker's; a GPU worker's devices say it)
    node_simulated: bool = True

    @property
    def model(self) -> str:
        """The GPU model, or the CPU instance type of a CPU worker."""
        return self.devices[0].model_name if self.devices else self.candidate

    @property
    def simulated(self) -> bool:
        return all(d.simulated for d in self.devices) if self.devices else self.node_simulated

    def to_json(self) -> dict[str, Any]:
        cpu = self.cpu
        return {
            "workerId": self.worker_id,
            "phase": self.phase,
            "candidate": self.candidate,
            "gpuModel": self.devices[0].model_name if self.devices else None,
            "node": self.node,
            "deviceIds": [d.index for d in self.devices],
            "simulated": self.simulated,
            "cpu": None
            if cpu is None
            else {"instance": self.candidate, "cores": list(cpu.cores), "memoryGb": round(cpu.memory_mb / 1024, 1)},
        }


@dataclass(frozen=True, slots=True)
class Row:
    """What one endpoint gets on the fleet."""

    endpoint: str
    #: what it asks for, e.g. "NVIDIA H200 > NVIDIA A100 80GB PCIe (x2)" or "cpu=cpu3c-1-2 > cpu3c-2-4"
    asks: str
    gpu_count: int
    workers_min: int
    workers_max: int
    verdict: Verdict
    workers: tuple[PlannedWorker, ...] = ()
    #: never: why it can never fit (per candidate, and per node filter that left nodes out); otherwise, when it got
    #: fewer than workers_max, why the next worker found no room (busy, with the holders, and the like)
    reasons: tuple[WaitReason, ...] = ()
    #: candidates that could never fit on this fleet although others can (its fallback skips them)
    skipped: tuple[WaitReason, ...] = ()
    #: what its options do not do on this fleet (a datacenter option no node label can match)
    notes: tuple[str, ...] = ()

    @property
    def needed(self) -> int:
        """The workers its jobs need: its minimum, and at least one."""
        return max(self.workers_min, 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "gpu": self.asks,
            "gpuCount": self.gpu_count,
            "workersMin": self.workers_min,
            "workersMax": self.workers_max,
            "verdict": self.verdict.value,
            "never": self.verdict is Verdict.NEVER,
            "placed": len(self.workers),
            "workers": [w.to_json() for w in self.workers],
            "reasons": [r.to_json() for r in self.reasons],
            "skipped": [r.to_json() for r in self.skipped],
            "notes": list(self.notes),
        }


class _Fleet:
    """The what-if's fleet and who holds what: the one place that calls placement."""

    def __init__(self, devices: Sequence[Device], nodes: Sequence[Node]) -> None:
        self.index = FleetIndex(devices, nodes)
        #: the same fleet with nothing held, for "could this ever fit" (placement's ``feasible``, built once)
        self.idle = FleetIndex(devices, nodes)

    def never(self, spec: EndpointSpec) -> NoFit | None:
        """Why a worker of ``spec`` could never fit even on the idle fleet; None when one could."""
        result = place_endpoint(spec, self.idle)
        return result if isinstance(result, NoFit) else None

    def place(self, spec: EndpointSpec) -> Fit | CpuFit | NoFit:
        # nothing yields: every worker of the what-if is busy
        return place_endpoint(spec, self.index)

    def hold(self, fit: Fit | CpuFit, holder: Holder) -> None:
        if isinstance(fit, CpuFit):
            self.index.nodes.reserve(fit.slot, holder)
        else:
            self.index.hold(fit.devices, holder)

    def node_simulated(self, name: str) -> bool:
        node = self.index.nodes.node(name)
        return node is not None and node.simulated


class _Plan:
    """One endpoint's workers so far, and the answer of its first failed attempt."""

    def __init__(self, spec: EndpointSpec) -> None:
        self.spec = spec
        self.workers: list[PlannedWorker] = []
        self.stuck: NoFit | None = None

    def grow(self, fleet: _Fleet, phase: Phase) -> bool:
        """Try one more worker; False (and remember why) when none fits."""
        if self.stuck is not None or len(self.workers) >= self.spec.workers_max:
            return False
        result = fleet.place(self.spec)
        if isinstance(result, NoFit):
            self.stuck = result
            return False
        worker_id = f"{self.spec.key}-{len(self.workers) + 1}"
        fleet.hold(result, Holder(worker_id, self.spec.key))
        if isinstance(result, CpuFit):
            planned = PlannedWorker(
                worker_id, phase, result.request.name, result.node, (), result.slot, fleet.node_simulated(result.node)
            )
        else:
            planned = PlannedWorker(worker_id, phase, describe(result.candidate), result.node, result.devices)
        self.workers.append(planned)
        return True


def what_if(specs: Sequence[EndpointSpec], devices: Sequence[Device], nodes: Sequence[Node] = ()) -> list[Row]:
    """Where the workers of ``specs`` (in the app's order) would go on ``devices`` and ``nodes`` (a node a device
    names that ``nodes`` omits has no CPU capacity and an unknown CUDA version): one row per spec, same order.

    See the module docstring for the order in which workers are placed.
    """
    fleet = _Fleet(devices, nodes)
    rows: dict[str, Row] = {}
    plans: list[_Plan] = []
    for spec in specs:
        never = fleet.never(spec)
        if never is not None:
            rows[spec.key] = _row(spec, Verdict.NEVER, fleet, reasons=never.reasons)
            continue
        plans.append(_Plan(spec))
    for plan in plans:
        while len(plan.workers) < plan.spec.workers_min and plan.grow(fleet, "min"):
            pass
    for plan in plans:
        if not plan.workers:
            plan.grow(fleet, "first")
    growing = True
    while growing:
        growing = False
        for plan in plans:
            growing = plan.grow(fleet, "scale") or growing
    for plan in plans:
        spec = plan.spec
        verdict = Verdict.RUNS if len(plan.workers) >= max(spec.workers_min, 1) else Verdict.WAITS
        rows[spec.key] = _row(
            spec,
            verdict,
            fleet,
            workers=tuple(plan.workers),
            reasons=plan.stuck.reasons if plan.stuck is not None else (),
            # the candidates its fallback skips because they could never fit (one reason each)
            skipped=never_candidates(spec, fleet.idle),
        )
    return [rows[spec.key] for spec in specs]


def _row(
    spec: EndpointSpec,
    verdict: Verdict,
    fleet: _Fleet,
    *,
    workers: tuple[PlannedWorker, ...] = (),
    reasons: tuple[WaitReason, ...] = (),
    skipped: tuple[WaitReason, ...] = (),
) -> Row:
    return Row(
        spec.key,
        spec.describe_gpu(),
        spec.gpu_count,
        spec.workers_min,
        spec.workers_max,
        verdict,
        workers,
        reasons,
        skipped,
        endpoint_notes(spec, fleet.idle) + host_option_notes(spec),
    )
