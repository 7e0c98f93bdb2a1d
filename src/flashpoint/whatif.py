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

Every worker is placed as the control plane places one (``scheduler.placement``): the first candidate in declared
order with ``gpu_count`` free devices of one model on one node. An endpoint that cannot get a worker once never gets
another (the fleet only fills up), so its reasons are those of that attempt. An endpoint no candidate could ever fit
on this fleet is ``never`` (placement's ``not_in_fleet`` per candidate) and takes no part; a CPU endpoint needs no
GPU.

Service module: imports the domain layer and ``scheduler.placement``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from flashpoint.explain import WaitReason
from flashpoint.gpus import Candidate, describe
from flashpoint.scheduler.index import FleetIndex
from flashpoint.scheduler.inventory import Device, Holder
from flashpoint.scheduler.placement import Fit, NoFit, place
from flashpoint.spec import EndpointSpec

__all__ = ["Phase", "PlannedWorker", "Row", "Verdict", "what_if"]

#: why a worker is wanted: the endpoint's minimum, its first worker, or scaling up to its maximum
Phase = Literal["min", "first", "scale"]


class Verdict(str, Enum):
    """What an endpoint gets on the fleet."""

    #: it gets at least the workers its jobs need (its minimum, and at least one)
    RUNS = "runs"
    #: it does not: the GPUs it could use are all taken by workers placed before (busy); its jobs would wait
    WAITS = "waits"
    #: no candidate could ever fit on this fleet, even an idle one (not_in_fleet); its jobs would wait forever
    NEVER = "never"
    #: a CPU endpoint: needs no GPU
    CPU = "cpu"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class PlannedWorker:
    """One worker the endpoint would get: which candidate matched, and which devices on which node."""

    worker_id: str
    phase: Phase
    #: the candidate that fit, as placement names it ("NVIDIA H200", "ANY")
    candidate: str
    node: str
    devices: tuple[Device, ...]

    @property
    def model(self) -> str:
        return self.devices[0].model_name

    @property
    def simulated(self) -> bool:
        return all(d.simulated for d in self.devices)

    def to_json(self) -> dict[str, Any]:
        return {
            "workerId": self.worker_id,
            "phase": self.phase,
            "candidate": self.candidate,
            "gpuModel": self.model,
            "node": self.node,
            "deviceIds": [d.index for d in self.devices],
            "simulated": self.simulated,
        }


@dataclass(frozen=True, slots=True)
class Row:
    """What one endpoint gets on the fleet."""

    endpoint: str
    #: what it asks for, e.g. "NVIDIA H200 > NVIDIA A100 80GB PCIe (x2)" or "cpu=cpu3c-1-2"
    asks: str
    gpu_count: int
    workers_min: int
    workers_max: int
    verdict: Verdict
    workers: tuple[PlannedWorker, ...] = ()
    #: never: every candidate's not_in_fleet; otherwise, when it got fewer than workers_max, why the next worker
    #: found no room (busy, with the holders; not_in_fleet for candidates that could never fit)
    reasons: tuple[WaitReason, ...] = ()
    #: candidates that could never fit on this fleet although others can (its fallback skips them)
    skipped: tuple[WaitReason, ...] = ()

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
        }


class _Fleet:
    """The what-if's fleet and who holds what: the one place that calls placement."""

    def __init__(self, devices: Sequence[Device]) -> None:
        self._index = FleetIndex(devices)
        #: the same fleet with nothing held, for "could this ever fit" (placement's ``feasible``, built once)
        self._idle = FleetIndex(devices)

    def never(self, candidates: Sequence[Candidate], gpu_count: int) -> NoFit | None:
        """Why ``gpu_count`` x these candidates could never fit even on the idle fleet; None when they could."""
        result = place(candidates, gpu_count, self._idle)
        return result if isinstance(result, NoFit) else None

    def place(self, candidates: Sequence[Candidate], gpu_count: int) -> Fit | NoFit:
        # nothing yields: every worker of the what-if is busy
        return place(candidates, gpu_count, self._index)

    def hold(self, fit: Fit, holder: Holder) -> None:
        self._index.hold(fit.devices, holder)


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
        result = fleet.place(self.spec.candidates, self.spec.gpu_count)
        if isinstance(result, NoFit):
            self.stuck = result
            return False
        worker_id = f"{self.spec.name}-{len(self.workers) + 1}"
        fleet.hold(result, Holder(worker_id, self.spec.name))
        self.workers.append(PlannedWorker(worker_id, phase, describe(result.candidate), result.node, result.devices))
        return True


def what_if(specs: Sequence[EndpointSpec], devices: Sequence[Device]) -> list[Row]:
    """Where the workers of ``specs`` (in the app's order) would go on ``devices``: one row per spec, same order.

    See the module docstring for the order in which workers are placed.
    """
    fleet = _Fleet(devices)
    rows: dict[str, Row] = {}
    plans: list[_Plan] = []
    for spec in specs:
        if not spec.uses_gpu:
            rows[spec.name] = _row(spec, Verdict.CPU)
            continue
        never = fleet.never(spec.candidates, spec.gpu_count)
        if never is not None:
            rows[spec.name] = _row(spec, Verdict.NEVER, reasons=never.reasons)
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
        # the candidates its fallback skips because they could never fit (placement's not_in_fleet, one each)
        skipped = tuple(
            never.reasons[0] for c in spec.candidates if (never := fleet.never((c,), spec.gpu_count)) is not None
        )
        rows[spec.name] = _row(
            spec,
            verdict,
            workers=tuple(plan.workers),
            reasons=plan.stuck.reasons if plan.stuck is not None else (),
            skipped=skipped,
        )
    return [rows[spec.name] for spec in specs]


def _row(
    spec: EndpointSpec,
    verdict: Verdict,
    *,
    workers: tuple[PlannedWorker, ...] = (),
    reasons: tuple[WaitReason, ...] = (),
    skipped: tuple[WaitReason, ...] = (),
) -> Row:
    return Row(
        spec.name,
        spec.describe_gpu(),
        spec.gpu_count,
        spec.workers_min,
        spec.workers_max,
        verdict,
        workers,
        reasons,
        skipped,
    )
