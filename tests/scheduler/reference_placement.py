"""The straightforward placement: every decision scans the whole fleet. The reference the index must agree with.

This is ``placement.place`` as it was before the fleet index (scheduler/index.py): the same rules, read directly
off a device tuple and a holders dict. tests/scheduler/placement/test_index.py compares the two on random fleets, and
bench/bench_fleet.py times it beside the index as the anchor. Kept simple on purpose: never optimise it.

With ``allowed`` (the nodes an endpoint's filters leave it) the fleet is those nodes' devices only. CPU placement
(``reference_place_cpu``) reads a node list and a slots dict the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from flashpoint.explain import Code, WaitReason
from flashpoint.fleet.inventory import Device, Holder, Node
from flashpoint.gpus import AnyGPU, Candidate, describe
from flashpoint.scheduler.placement.fit import CpuFit, Fit, NoFit
from flashpoint.scheduler.placement.nodes import CpuRequest, CpuSlot

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
    allowed: Collection[str] | None = None,
    policy: str = "first",
) -> Fit | NoFit:
    """Walk the candidates in declared order; the first with ``gpu_count`` usable devices of one model on one node
    wins (free devices first, else through holders that may yield). Among the winner's groups with enough free
    devices, ``policy`` picks: the first in fleet order, the fewest free (``pack``) or the most free (``spread``),
    ties in fleet order."""
    if allowed is not None:
        devices = [d for d in devices if d.node in allowed]
    where = "no node" if allowed is None else "no eligible node"
    reasons: list[WaitReason] = []
    for candidate in candidates:
        groups = _groups(candidate, devices)
        name = describe(candidate)
        if not groups:
            reasons.append(WaitReason(name, Code.NOT_IN_FLEET, f"{where} has {name}{_coarse_hint(candidate, devices)}"))
            continue
        largest = max(len(group) for group in groups.values())
        if largest < gpu_count:
            reasons.append(
                WaitReason(
                    name, Code.NOT_IN_FLEET, f"{where} has {gpu_count} x {name} (the most on one node is {largest})"
                )
            )
            continue
        fit = _fit_free(candidate, groups, gpu_count, holders, policy) or _fit_reclaim(
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
    candidate: Candidate,
    groups: dict[tuple[str, str], list[Device]],
    gpu_count: int,
    holders: Holders,
    policy: str = "first",
) -> Fit | None:
    fits = []
    for (node, _), group in groups.items():
        free = [d for d in group if d.key not in holders]
        if len(free) >= gpu_count:
            fits.append((node, free))
    if not fits:
        return None
    if policy == "pack":
        node, free = min(fits, key=lambda fit: len(fit[1]))  # min keeps the first of equals: fleet order
    elif policy == "spread":
        node, free = max(fits, key=lambda fit: len(fit[1]))  # so does max
    else:
        node, free = fits[0]
    return Fit(candidate, node, tuple(free[:gpu_count]))


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


def _gb(memory_mb: int) -> str:
    return f"{round(memory_mb / 1024, 1):g} GB"


def _needs(request: CpuRequest) -> str:
    plural = "s" if request.vcpus != 1 else ""
    return f"{request.name} needs {request.vcpus} vCPU{plural} and {_gb(request.memory_mb)}"


def reference_place_cpu(
    requests: Sequence[CpuRequest],
    nodes: Sequence[Node],
    slots: Mapping[Holder, CpuSlot],
    yieldable: Callable[[Holder], bool] = _never,
    allowed: Collection[str] | None = None,
) -> CpuFit | NoFit:
    """Walk the CPU instance types in declared order; the first whose cores and memory are free on one node wins
    (the node's first free cores in its hand-out order), else through the slots of holders that may yield."""
    if allowed is not None:
        nodes = [n for n in nodes if n.name in allowed]
    kind = "node" if allowed is None else "eligible node"
    reasons: list[WaitReason] = []
    for request in requests:
        if not any(n.cpus >= request.vcpus and n.memory_mb >= request.memory_mb for n in nodes):
            reasons.append(_too_large(request, nodes, kind))
            continue
        for node in nodes:
            held = {h: s for h, s in slots.items() if s.node == node.name}
            taken = {c for s in held.values() for c in s.cores}
            free = [c for c in node.core_ids if c not in taken]
            memory = node.memory_mb - sum(s.memory_mb for s in held.values())
            if len(free) >= request.vcpus and memory >= request.memory_mb:
                return CpuFit(request, CpuSlot(node.name, tuple(free[: request.vcpus]), request.memory_mb))
        if yieldable is not _never:
            for node in nodes:
                order = {c: i for i, c in enumerate(node.core_ids)}
                held = {h: s for h, s in slots.items() if s.node == node.name}
                taken = {c for s in held.values() for c in s.cores}
                free = [c for c in node.core_ids if c not in taken]
                memory = node.memory_mb - sum(s.memory_mb for s in held.values())
                # holders that may yield, by their first core in the node's hand-out order, until enough is free
                chosen: list[Holder] = []
                for holder in sorted(
                    (h for h in held if yieldable(h)),
                    key=lambda h: min((order[c] for c in held[h].cores), default=-1),
                ):
                    if len(free) >= request.vcpus and memory >= request.memory_mb:
                        break
                    chosen.append(holder)
                    free += list(held[holder].cores)
                    memory += held[holder].memory_mb
                if chosen and len(free) >= request.vcpus and memory >= request.memory_mb:
                    cores = tuple(sorted(free, key=order.__getitem__)[: request.vcpus])
                    return CpuFit(request, CpuSlot(node.name, cores, request.memory_mb), tuple(chosen))
        endpoints = sorted({h.endpoint for h, s in slots.items() if any(n.name == s.node for n in nodes)})
        most = (0, 0)
        for node in nodes:
            held_slots = [s for s in slots.values() if s.node == node.name]
            cores = node.cpus - sum(len(s.cores) for s in held_slots)
            memory = max(node.memory_mb - sum(s.memory_mb for s in held_slots), 0)
            most = max(most, (cores, memory))
        reasons.append(
            WaitReason(
                request.name,
                Code.CPU_BUSY,
                f"{_needs(request)}; the most free on one node is {most[0]} vCPUs and {_gb(most[1])}"
                + (f"; held by {', '.join(endpoints)}" if endpoints else ""),
                tuple(endpoints),
            )
        )
    return NoFit(tuple(reasons))


def _too_large(request: CpuRequest, nodes: Sequence[Node], kind: str) -> WaitReason:
    most_cpus = max((n.cpus for n in nodes), default=0)
    most_memory = max((n.memory_mb for n in nodes), default=0)
    best = max(nodes, key=lambda n: (n.cpus, n.memory_mb), default=None)
    if best is None:
        have = f"the fleet has no {kind}"
    elif (best.cpus, best.memory_mb) == (most_cpus, most_memory):
        have = f"the largest {kind} has {most_cpus} vCPUs and {_gb(most_memory)}"
    else:
        have = f"no {kind} has both (the most vCPUs on one is {most_cpus}, the most memory {_gb(most_memory)})"
    declare = []
    if request.vcpus > most_cpus:
        declare.append(f"FLASHPOINT_CPUS={request.vcpus}")
    if request.memory_mb > most_memory:
        declare.append(f"FLASHPOINT_MEMORY_GB={request.memory_mb // 1024}")
    advice = (
        f"declare {' and '.join(declare) or 'more'} on a machine that has them (cpus/memory_gb in a fleet file), "
        "or choose a smaller instance"
    )
    return WaitReason(request.name, Code.CPU_TOO_LARGE, f"{_needs(request)}; {have}: {advice}")
