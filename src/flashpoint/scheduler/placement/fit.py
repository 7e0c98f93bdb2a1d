"""Placement: a pure function from (ordered candidates, gpu_count, the fleet index) to a fit or the reasons why not.

No I/O, no clock, no asyncio: the engine keeps a ``FleetIndex`` of its fleet and holders and calls ``place`` with
it, so every fallback rule is table-testable. The index answers "the first node in fleet order with N free of this
model" from free counts it keeps as devices are taken and released, so a decision does not scan the fleet.

CPU endpoints are placed by ``place_cpu`` on the index's node ledger: the first instance type, in declared order,
whose vCPUs and memory are free on one node, on the first such node in fleet order. ``place_endpoint`` is what the
engine calls for an endpoint: it applies the endpoint's node filters (``datacenter=``, ``min_cuda_version``) and
places a GPU or a CPU worker; an endpoint without filters goes straight to ``place``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from flashpoint.explain import NEVER_CODES, Code, WaitReason
from flashpoint.flashtypes import cpu_size
from flashpoint.fleet.inventory import Device, Holder, Node, show_gb
from flashpoint.gpus import AnyGPU, Candidate, describe
from flashpoint.scheduler.placement.filters import NodeFilter
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.placement.nodes import CpuRequest, CpuSlot, NodeLedger
from flashpoint.spec import EndpointSpec


@dataclass(frozen=True, slots=True)
class Fit:
    """A worker fits: these devices on this node. ``reclaim`` lists idle holders that must give them up first."""

    candidate: Candidate
    node: str
    devices: tuple[Device, ...]
    reclaim: tuple[Holder, ...] = ()


@dataclass(frozen=True, slots=True)
class CpuFit:
    """A CPU worker fits: ``request``'s slot on a node. ``reclaim`` lists idle CPU workers that must stop first."""

    request: CpuRequest
    slot: CpuSlot
    reclaim: tuple[Holder, ...] = ()

    @property
    def node(self) -> str:
        return self.slot.node


@dataclass(frozen=True, slots=True)
class NoFit:
    """No candidate fits now; one reason per candidate, in declared order (then one per node filter that left nodes
    out)."""

    reasons: tuple[WaitReason, ...]

    @property
    def never(self) -> bool:
        """True when no candidate could fit even on an idle fleet (every reason is one waiting does not cure)."""
        return all(r.code in NEVER_CODES for r in self.reasons)


def _never(holder: Holder) -> bool:
    return False


class Yielders:
    """A ``yieldable`` predicate that knows every holder it may accept: with it, a candidate without a free fit
    considers only those holders, instead of asking about every holder of its devices (what a busy fleet's decisions
    cost with a plain predicate: a reconcile asks for every waiting endpoint).

    ``Yielders(holders)`` accepts exactly ``holders``; ``Yielders(holders, check)`` accepts those of them ``check``
    accepts at decision time (``check`` is never asked about any other holder). Pass the holders that could yield now
    (idle workers above their minimum, once per plan); an empty one skips the reclaim path at once.
    """

    __slots__ = ("check", "holders")

    def __init__(self, holders: Iterable[Holder], check: Callable[[Holder], bool] | None = None) -> None:
        self.holders: Collection[Holder] = frozenset(holders)
        self.check = check

    def __call__(self, holder: Holder) -> bool:
        return holder in self.holders and (self.check is None or self.check(holder))


def place(
    candidates: Sequence[Candidate],
    gpu_count: int,
    index: FleetIndex,
    yieldable: Callable[[Holder], bool] = _never,
    allowed: Collection[str] | None = None,
    refuse: Callable[[Candidate], WaitReason | None] | None = None,
    policy: str = "first",
) -> Fit | NoFit:
    """Walk the candidates in declared order; the first with ``gpu_count`` usable devices of one model on one node
    wins, with its devices in fleet order. Which node, by ``policy`` (``FleetIndex.fit_free``): ``first`` in fleet
    order, ``pack`` (best fit: fewest free left) or ``spread`` (most free); candidates are walked in declared order
    whatever the policy, so it chooses only among the nodes of the candidate that wins.

    Free devices are preferred; devices whose holder ``yieldable`` accepts (an idle worker above its endpoint's
    minimum) are usable too, in which case the fit names the holders to stop. Declared order beats yielding: an
    earlier candidate that needs a reclaim wins over a later one that is free. Without a ``yieldable`` predicate
    nothing is reclaimed and the reclaim path is skipped; a plain predicate is asked about every holder of the
    devices of a candidate without a free fit, a ``Yielders`` only about the holders it names (same answers).

    With ``allowed`` (the node names an endpoint's filters leave it), the fleet is those nodes only: fits, and
    ``not_in_fleet`` ("no eligible node has ...") and ``busy`` reasons, are about them.

    ``refuse`` says why a candidate may not be used now whatever is free (a quota on its model): its reason is that
    candidate's, and the walk goes on to the next one, as for a busy candidate.
    """
    reasons: list[WaitReason] = []
    for candidate in candidates:
        missing = _not_in_fleet(candidate, gpu_count, index, allowed)
        if missing is not None:
            reasons.append(missing)
            continue
        if refuse is not None and (refused := refuse(candidate)) is not None:
            reasons.append(refused)
            continue
        free_fit = index.fit_free(candidate, gpu_count, allowed, policy)
        if free_fit is not None:
            return Fit(candidate, *free_fit)
        if yieldable is not _never:
            reclaim_fit = (
                index.fit_reclaim(candidate, gpu_count, yieldable.check, yieldable.holders, allowed)
                if isinstance(yieldable, Yielders)
                else index.fit_reclaim(candidate, gpu_count, yieldable, None, allowed)
            )
            if reclaim_fit is not None:
                return Fit(candidate, *reclaim_fit)
        reasons.append(_busy(candidate, gpu_count, index, allowed))
    return NoFit(tuple(reasons))


def _not_in_fleet(
    candidate: Candidate, gpu_count: int, index: FleetIndex, allowed: Collection[str] | None = None
) -> WaitReason | None:
    """Why no node (in ``allowed``) could ever host ``gpu_count`` x ``candidate``; None when one could."""
    largest = index.largest(candidate, allowed)
    if largest and largest >= gpu_count:
        return None
    name = describe(candidate)
    where = "no node" if allowed is None else "no eligible node"
    if not largest:
        return WaitReason(name, Code.NOT_IN_FLEET, f"{where} has {name}{_coarse_hint(candidate, index, allowed)}")
    return WaitReason(name, Code.NOT_IN_FLEET, f"{where} has {gpu_count} x {name} (the most on one node is {largest})")


def _busy(candidate: Candidate, gpu_count: int, index: FleetIndex, allowed: Collection[str] | None) -> WaitReason:
    """``busy``, naming the endpoints holding the candidate's devices and (``processes``) the other flashpoint
    processes of this machine that hold some (the index holds those devices for them; ``FleetIndex.hold_foreign``)."""
    name = describe(candidate)
    found = index.holding_endpoints(candidate, allowed)
    processes = tuple(p for h in found if (p := index.process(h)) is not None)
    holders = tuple(h for h in found if index.process(h) is None)
    held_by = ", ".join([*holders, *(p.label for p in processes)])
    free = index.most_free(candidate, allowed)
    if free:
        return WaitReason(
            name, Code.BUSY, f"{free} free on one node at most, need {gpu_count}; held by {held_by}", holders, processes
        )
    return WaitReason(name, Code.BUSY, f"all held by {held_by}", holders, processes)


def _coarse_hint(candidate: Candidate, index: FleetIndex, allowed: Collection[str] | None = None) -> str:
    """When the fleet has GPUs known only by a coarse name that could be ``candidate`` ("A100" for an A100 80GB
    PCIe), say so: the device may well be there, unlabelled."""
    if isinstance(candidate, AnyGPU):
        return ""
    words = candidate.name.casefold().replace("-", " ").split()
    nodes = sorted(
        {
            d.node
            for d in index.coarse_devices()
            if (allowed is None or d.node in allowed)
            and all(any(w.startswith(part) for w in words) for part in d.name.casefold().replace("-", " ").split())
        }
    )
    if not nodes:
        return ""
    return (
        f" by its exact name; {', '.join(nodes)} has GPUs Ray only calls by a coarse type, which may be this model: "
        "label the node with its gpu-model (`flashpoint ray-flags` prints the flags)"
    )


def feasible(
    candidates: Sequence[Candidate], gpu_count: int, devices: Sequence[Device], nodes: Sequence[Node] = ()
) -> NoFit | None:
    """None if some candidate could ever fit on this fleet (ignoring who holds what); else the reasons."""
    index = _fleet_shape(devices, nodes)
    reasons: list[WaitReason] = []
    for candidate in candidates:
        missing = _not_in_fleet(candidate, gpu_count, index)
        if missing is None:
            return None
        reasons.append(missing)
    return NoFit(tuple(reasons))


def feasible_endpoint(spec: EndpointSpec, devices: Sequence[Device], nodes: Sequence[Node] = ()) -> NoFit | None:
    """None if a worker of ``spec`` could ever be placed on this fleet (ignoring who holds what), its node filters
    and CPU instances included; else the reasons (every one a ``NEVER_CODES`` one)."""
    result = place_endpoint(spec, _fleet_shape(devices, nodes))
    return result if isinstance(result, NoFit) else None


#: the last fleet ``feasible`` indexed, and its index (nobody holds anything there): the engine asks about every
#: endpoint with the same fleet, so the index is built once per fleet, not once per endpoint
_last_fleet: list[tuple[tuple[Device, ...], tuple[Node, ...], FleetIndex]] = []


def _fleet_shape(devices: Sequence[Device], nodes: Sequence[Node]) -> FleetIndex:
    fleet = devices if isinstance(devices, tuple) else tuple(devices)
    described = nodes if isinstance(nodes, tuple) else tuple(nodes)
    # the same devices and nodes: an identity check per item
    if _last_fleet and _last_fleet[0][0] == fleet and _last_fleet[0][1] == described:
        return _last_fleet[0][2]
    index = FleetIndex(fleet, described)
    _last_fleet[:] = [(fleet, described, index)]
    return index


# ----------------------------------------------------------------------------------------------------------------
# CPU workers and whole endpoints


def cpu_requests(spec: EndpointSpec) -> tuple[CpuRequest, ...]:
    """The endpoint's CPU instance types in declared order, with what a worker of each reserves."""
    requests = []
    for name in spec.cpu:
        vcpus, memory_gb = cpu_size(name)
        requests.append(CpuRequest(name, vcpus, memory_gb * 1024))
    return tuple(requests)


def node_filter(spec: EndpointSpec) -> NodeFilter:
    """What ``spec`` asks of its nodes: its datacenters, and (GPU endpoints only, as in Flash) its CUDA floor."""
    return NodeFilter(tuple(spec.datacenters), spec.min_cuda_version if spec.uses_gpu else None)


def endpoint_notes(spec: EndpointSpec, index: FleetIndex) -> tuple[str, ...]:
    """What ``spec``'s node options do not do on this fleet, in words (a datacenter no node label can match)."""
    rule = node_filter(spec)
    return () if rule.open else index.nodes.eligible(rule).notes


def never_candidates(spec: EndpointSpec, index: FleetIndex) -> tuple[WaitReason, ...]:
    """The candidates (GPU models, or CPU instance types) of ``spec`` that no node its filters leave could ever hold,
    one reason each, in declared order: what its fallback skips on this fleet, whoever holds what."""
    rule = node_filter(spec)
    allowed = None if rule.open else index.nodes.eligible(rule).nodes
    if spec.uses_gpu:
        found = (_not_in_fleet(c, spec.gpu_count, index, allowed) for c in spec.candidates)
        return tuple(r for r in found if r is not None)
    ledger = index.nodes
    return tuple(_too_large(r, ledger, allowed) for r in cpu_requests(spec) if not ledger.could_hold(r, allowed))


def place_endpoint(
    spec: EndpointSpec,
    index: FleetIndex,
    yieldable: Callable[[Holder], bool] = _never,
    refuse: Callable[[Candidate], WaitReason | None] | None = None,
    policy: str | None = None,
) -> Fit | CpuFit | NoFit:
    """Place one worker of ``spec``: on the nodes its filters leave it, a GPU worker by ``place`` or a CPU worker by
    ``place_cpu``. When it does not fit, the filters' reasons (nodes left out, and why) follow the candidates'.
    ``refuse`` is ``place``'s (GPU candidates only); ``policy`` (a plane's override) else ``spec.placement`` chooses
    the node of a GPU worker."""
    how = policy or spec.placement
    if spec.uses_gpu and not spec.datacenters and spec.min_cuda_version is None:
        return place(spec.candidates, spec.gpu_count, index, yieldable, None, refuse, how)  # the fast path: no filter
    rule = node_filter(spec)
    eligible = index.nodes.eligible(rule) if not rule.open else None
    allowed = eligible.nodes if eligible is not None else None
    if eligible is not None and eligible.nothing:
        return NoFit(eligible.reasons)
    result: Fit | CpuFit | NoFit
    if spec.uses_gpu:
        result = place(spec.candidates, spec.gpu_count, index, yieldable, allowed, refuse, how)
    else:
        result = place_cpu(cpu_requests(spec), index.nodes, yieldable, allowed)
    if isinstance(result, NoFit) and eligible is not None and eligible.reasons:
        return NoFit(result.reasons + eligible.reasons)
    return result


def place_cpu(
    requests: Sequence[CpuRequest],
    ledger: NodeLedger,
    yieldable: Callable[[Holder], bool] = _never,
    allowed: Collection[str] | None = None,
) -> CpuFit | NoFit:
    """Walk the CPU instance types in declared order; the first whose vCPUs and memory are free on one node wins,
    on the first such node in fleet order, with that node's first free cores.

    As with GPUs, CPU workers whose holder ``yieldable`` accepts (idle ones above their endpoint's minimum) give
    their slots up, and declared order beats yielding. Reasons per instance: ``cpu_too_large`` when no node (in
    ``allowed``) could ever hold it, else ``cpu_busy`` naming the endpoints whose workers hold the CPUs.
    """
    reasons: list[WaitReason] = []
    for request in requests:
        if not ledger.could_hold(request, allowed):
            reasons.append(_too_large(request, ledger, allowed))
            continue
        slot = ledger.fit_free(request, allowed)
        if slot is not None:
            return CpuFit(request, slot)
        if yieldable is not _never:
            reclaim = (
                ledger.fit_reclaim(request, yieldable.check, yieldable.holders, allowed)
                if isinstance(yieldable, Yielders)
                else ledger.fit_reclaim(request, yieldable, None, allowed)
            )
            if reclaim is not None:
                return CpuFit(request, *reclaim)
        reasons.append(_cpu_busy(request, ledger, allowed))
    return NoFit(tuple(reasons))


def _needs(request: CpuRequest) -> str:
    return (
        f"{request.name} needs {request.vcpus} vCPU{'s' if request.vcpus != 1 else ''} and {show_gb(request.memory_mb)}"
    )


def _too_large(request: CpuRequest, ledger: NodeLedger, allowed: Collection[str] | None) -> WaitReason:
    best, most_cpus, most_memory = ledger.largest(allowed)
    where = "node" if allowed is None else "eligible node"
    if best is None:
        have = f"the fleet has no {where}"
    elif (best.cpus, best.memory_mb) == (most_cpus, most_memory):
        have = f"the largest {where} has {most_cpus} vCPUs and {show_gb(most_memory)}"
    else:
        have = f"no {where} has both (the most vCPUs on one is {most_cpus}, the most memory {show_gb(most_memory)})"
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


def _cpu_busy(request: CpuRequest, ledger: NodeLedger, allowed: Collection[str] | None) -> WaitReason:
    holders = ledger.holding_endpoints(allowed)
    cores, memory = ledger.most_free(allowed)
    held = f"; held by {', '.join(holders)}" if holders else ""
    return WaitReason(
        request.name,
        Code.CPU_BUSY,
        f"{_needs(request)}; the most free on one node is {cores} vCPUs and {show_gb(memory)}{held}",
        tuple(holders),
    )
