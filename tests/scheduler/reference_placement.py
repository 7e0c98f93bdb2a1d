"""The straightforward placement: every decision scans the whole fleet. The reference the index must agree with.

This is ``placement.place`` as it was before the fleet index (scheduler/index.py): the same rules, read directly
off a device tuple and a holders dict. tests/scheduler/test_index.py compares the two on random fleets, and
bench/bench_fleet.py times it beside the index as the anchor. Kept simple on purpose: never optimise it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from flashpoint.explain import Code, WaitReason
from flashpoint.gpus import AnyGPU, Candidate, describe
from flashpoint.scheduler.inventory import Device, Holder
from flashpoint.scheduler.placement import Fit, NoFit

Holders = Mapping[tuple[str, int], Holder]


def _never(holder: Holder) -> bool:
    return False


def _matches(candidate: Candidate, device: Device) -> bool:
    if isinstance(candidate, AnyGPU):
        return True
    return device.model == candidate


def _groups(candidate: Candidate, devices: Sequence[Device]) -> dict[tuple[str, str], list[Device]]:
    """Devices of the candidate grouped by (node, model name), in fleet order: a worker never mixes models."""
    groups: dict[tuple[str, str], list[Device]] = {}
    for device in devices:
        if _matches(candidate, device):
            groups.setdefault((device.node, device.model_name), []).append(device)
    return groups


def reference_place(
    candidates: Sequence[Candidate],
    gpu_count: int,
    devices: Sequence[Device],
    holders: Holders,
    yieldable: Callable[[Holder], bool] = _never,
) -> Fit | NoFit:
    """Walk the candidates in declared order; the first with ``gpu_count`` usable devices of one model on one node
    wins (free devices first, else through holders that may yield)."""
    reasons: list[WaitReason] = []
    for candidate in candidates:
        groups = _groups(candidate, devices)
        name = describe(candidate)
        if not groups:
            reasons.append(WaitReason(name, Code.NOT_IN_FLEET, f"no node has {name}{_coarse_hint(candidate, devices)}"))
            continue
        largest = max(len(group) for group in groups.values())
        if largest < gpu_count:
            reasons.append(
                WaitReason(
                    name, Code.NOT_IN_FLEET, f"no node has {gpu_count} x {name} (the most on one node is {largest})"
                )
            )
            continue
        fit = _fit_free(candidate, groups, gpu_count, holders) or _fit_reclaim(
            candidate, groups, gpu_count, holders, yieldable
        )
        if fit is not None:
            return fit
        endpoints = sorted({h.endpoint for d in devices if _matches(candidate, d) for h in [holders.get(d.key)] if h})
        free = max(sum(1 for d in group if d.key not in holders) for group in groups.values())
        reasons.append(
            WaitReason(
                name,
                Code.BUSY,
                f"{free} free on one node at most, need {gpu_count}; held by {', '.join(endpoints)}",
                tuple(endpoints),
            )
            if free
            else WaitReason(name, Code.BUSY, f"all held by {', '.join(endpoints)}", tuple(endpoints))
        )
    return NoFit(tuple(reasons))


def _coarse_hint(candidate: Candidate, devices: Sequence[Device]) -> str:
    if isinstance(candidate, AnyGPU):
        return ""
    words = candidate.name.casefold().replace("-", " ").split()
    nodes = sorted(
        {
            d.node
            for d in devices
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
    candidate: Candidate, groups: dict[tuple[str, str], list[Device]], gpu_count: int, holders: Holders
) -> Fit | None:
    for (node, _), group in groups.items():
        free = [d for d in group if d.key not in holders]
        if len(free) >= gpu_count:
            return Fit(candidate, node, tuple(free[:gpu_count]))
    return None


def _fit_reclaim(
    candidate: Candidate,
    groups: dict[tuple[str, str], list[Device]],
    gpu_count: int,
    holders: Holders,
    yieldable: Callable[[Holder], bool],
) -> Fit | None:
    for (node, _), group in groups.items():
        usable: list[Device] = []
        # free devices first, so as few idle workers as possible are stopped
        for device in sorted(group, key=lambda d: d.key in holders):
            holder = holders.get(device.key)
            if holder is None or yieldable(holder):
                usable.append(device)
        if len(usable) >= gpu_count:
            chosen = tuple(usable[:gpu_count])
            reclaim = {h.worker_id: h for d in chosen if (h := holders.get(d.key)) is not None}
            return Fit(candidate, node, chosen, tuple(reclaim.values()))
    return None
