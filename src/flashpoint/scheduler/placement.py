"""Placement: a pure function from (ordered candidates, gpu_count, fleet snapshot) to a fit or the reasons why not.

No I/O, no clock, no asyncio: the control loop calls it with a snapshot, so every fallback rule is table-testable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flashpoint.explain import Code, Reason
from flashpoint.gpus import AnyGPU, Candidate, describe
from flashpoint.scheduler.inventory import Device, Holder, Inventory


@dataclass(frozen=True, slots=True)
class Fit:
    """A worker fits: these devices on this node. ``reclaim`` lists idle holders that must give them up first."""

    candidate: Candidate
    node: str
    devices: tuple[Device, ...]
    reclaim: tuple[Holder, ...] = ()


@dataclass(frozen=True, slots=True)
class NoFit:
    """No candidate fits now; one reason per candidate, in declared order."""

    reasons: tuple[Reason, ...]

    @property
    def never(self) -> bool:
        """True when no candidate could fit even on an idle fleet."""
        return all(r.code is Code.NOT_IN_FLEET for r in self.reasons)


def _matches(candidate: Candidate, device: Device) -> bool:
    if isinstance(candidate, AnyGPU):
        return True
    return device.model == candidate  # equal, not identical: devices may arrive pickled from other nodes


def _groups(candidate: Candidate, devices: Sequence[Device]) -> dict[tuple[str, str], list[Device]]:
    """Devices of the candidate grouped by (node, model name), in fleet order: a worker never mixes models."""
    groups: dict[tuple[str, str], list[Device]] = {}
    for device in devices:
        if _matches(candidate, device):
            groups.setdefault((device.node, device.model_name), []).append(device)
    return groups


def place(candidates: Sequence[Candidate], gpu_count: int, inventory: Inventory) -> Fit | NoFit:
    """Walk the candidates in declared order; the first with ``gpu_count`` usable devices of one model on one node wins.

    Free devices are preferred; devices held by yieldable (idle, above-minimum) workers are usable too, in which
    case the fit names the holders to stop. Declared order beats yielding: an earlier candidate that needs a
    reclaim wins over a later one that is free.
    """
    reasons: list[Reason] = []
    for candidate in candidates:
        groups = _groups(candidate, inventory.devices)
        name = describe(candidate)
        if not groups:
            reasons.append(Reason(name, Code.NOT_IN_FLEET, f"no node has {name}{_coarse_hint(candidate, inventory)}"))
            continue
        largest = max(len(group) for group in groups.values())
        if largest < gpu_count:
            reasons.append(
                Reason(name, Code.NOT_IN_FLEET, f"no node has {gpu_count} x {name} (the most on one node is {largest})")
            )
            continue
        fit = _fit_free(candidate, groups, gpu_count, inventory) or _fit_reclaim(
            candidate, groups, gpu_count, inventory
        )
        if fit is not None:
            return fit
        holders = sorted(
            {h.endpoint for d in inventory.devices if _matches(candidate, d) for h in [inventory.holder(d)] if h}
        )
        free = max(sum(1 for d in group if inventory.is_free(d)) for group in groups.values())
        reasons.append(
            Reason(
                name,
                Code.BUSY,
                f"{free} free on one node at most, need {gpu_count}; held by {', '.join(holders)}",
                tuple(holders),
            )
            if free
            else Reason(name, Code.BUSY, f"all held by {', '.join(holders)}", tuple(holders))
        )
    return NoFit(tuple(reasons))


def _coarse_hint(candidate: Candidate, inventory: Inventory) -> str:
    """When the fleet has GPUs known only by a coarse name that could be ``candidate`` ("A100" for an A100 80GB
    PCIe), say so: the device may well be there, unlabelled."""
    if isinstance(candidate, AnyGPU):
        return ""
    words = candidate.name.casefold().replace("-", " ").split()
    nodes = sorted(
        {
            d.node
            for d in inventory.devices
            if d.coarse
            and d.model is None
            and all(any(w.startswith(part) for w in words) for part in d.name.casefold().replace("-", " ").split())
        }
    )
    if not nodes:
        return ""
    return (
        f" by its exact name; {', '.join(nodes)} has GPUs Ray only calls by a coarse type, which may be this model: "
        "label the node with its gpu-model (`flashpoint ray-flags` prints the flags)"
    )


def _fit_free(
    candidate: Candidate, groups: dict[tuple[str, str], list[Device]], gpu_count: int, inventory: Inventory
) -> Fit | None:
    for (node, _), group in groups.items():
        free = [d for d in group if inventory.is_free(d)]
        if len(free) >= gpu_count:
            return Fit(candidate, node, tuple(free[:gpu_count]))
    return None


def _fit_reclaim(
    candidate: Candidate, groups: dict[tuple[str, str], list[Device]], gpu_count: int, inventory: Inventory
) -> Fit | None:
    for (node, _), group in groups.items():
        usable: list[Device] = []
        # free devices first, so as few idle workers as possible are stopped
        for device in sorted(group, key=lambda d: not inventory.is_free(d)):
            holder = inventory.holder(device)
            if holder is None or holder.yieldable:
                usable.append(device)
        if len(usable) >= gpu_count:
            chosen = tuple(usable[:gpu_count])
            reclaim = {h.worker_id: h for d in chosen if (h := inventory.holder(d)) is not None}
            # a reclaimed worker gives up all its devices, but it must hold nothing outside this fit for us to
            # count them: the worker's other devices simply become free for whoever comes next
            return Fit(candidate, node, chosen, tuple(reclaim.values()))
    return None


def feasible(candidates: Sequence[Candidate], gpu_count: int, devices: Sequence[Device]) -> NoFit | None:
    """None if some candidate could ever fit on this fleet (ignoring who holds what); else the reasons."""
    result = place(candidates, gpu_count, Inventory(tuple(devices)))
    return result if isinstance(result, NoFit) else None
