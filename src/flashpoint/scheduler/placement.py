"""Placement: a pure function from (ordered candidates, gpu_count, the fleet index) to a fit or the reasons why not.

No I/O, no clock, no asyncio: the engine keeps a ``FleetIndex`` of its fleet and holders and calls ``place`` with
it, so every fallback rule is table-testable. The index answers "the first node in fleet order with N free of this
model" from free counts it keeps as devices are taken and released, so a decision does not scan the fleet.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from flashpoint.explain import Code, WaitReason
from flashpoint.gpus import AnyGPU, Candidate, describe
from flashpoint.scheduler.index import FleetIndex
from flashpoint.scheduler.inventory import Device, Holder


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

    reasons: tuple[WaitReason, ...]

    @property
    def never(self) -> bool:
        """True when no candidate could fit even on an idle fleet."""
        return all(r.code is Code.NOT_IN_FLEET for r in self.reasons)


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
) -> Fit | NoFit:
    """Walk the candidates in declared order; the first with ``gpu_count`` usable devices of one model on one node
    wins, on the first such node in fleet order, with its devices in fleet order.

    Free devices are preferred; devices whose holder ``yieldable`` accepts (an idle worker above its endpoint's
    minimum) are usable too, in which case the fit names the holders to stop. Declared order beats yielding: an
    earlier candidate that needs a reclaim wins over a later one that is free. Without a ``yieldable`` predicate
    nothing is reclaimed and the reclaim path is skipped; a plain predicate is asked about every holder of the
    devices of a candidate without a free fit, a ``Yielders`` only about the holders it names (same answers).
    """
    reasons: list[WaitReason] = []
    for candidate in candidates:
        missing = _not_in_fleet(candidate, gpu_count, index)
        if missing is not None:
            reasons.append(missing)
            continue
        free_fit = index.fit_free(candidate, gpu_count)
        if free_fit is not None:
            return Fit(candidate, *free_fit)
        if yieldable is not _never:
            reclaim_fit = (
                index.fit_reclaim(candidate, gpu_count, yieldable.check, yieldable.holders)
                if isinstance(yieldable, Yielders)
                else index.fit_reclaim(candidate, gpu_count, yieldable)
            )
            if reclaim_fit is not None:
                return Fit(candidate, *reclaim_fit)
        reasons.append(_busy(candidate, gpu_count, index))
    return NoFit(tuple(reasons))


def _not_in_fleet(candidate: Candidate, gpu_count: int, index: FleetIndex) -> WaitReason | None:
    """Why no node could ever host ``gpu_count`` x ``candidate``; None when one could."""
    largest = index.largest(candidate)
    if largest and largest >= gpu_count:
        return None
    name = describe(candidate)
    if not largest:
        return WaitReason(name, Code.NOT_IN_FLEET, f"no node has {name}{_coarse_hint(candidate, index)}")
    return WaitReason(name, Code.NOT_IN_FLEET, f"no node has {gpu_count} x {name} (the most on one node is {largest})")


def _busy(candidate: Candidate, gpu_count: int, index: FleetIndex) -> WaitReason:
    name = describe(candidate)
    holders = index.holding_endpoints(candidate)
    free = index.most_free(candidate)
    if free:
        return WaitReason(
            name,
            Code.BUSY,
            f"{free} free on one node at most, need {gpu_count}; held by {', '.join(holders)}",
            tuple(holders),
        )
    return WaitReason(name, Code.BUSY, f"all held by {', '.join(holders)}", tuple(holders))


def _coarse_hint(candidate: Candidate, index: FleetIndex) -> str:
    """When the fleet has GPUs known only by a coarse name that could be ``candidate`` ("A100" for an A100 80GB
    PCIe), say so: the device may well be there, unlabelled."""
    if isinstance(candidate, AnyGPU):
        return ""
    words = candidate.name.casefold().replace("-", " ").split()
    nodes = sorted(
        {
            d.node
            for d in index.coarse_devices()
            if all(any(w.startswith(part) for w in words) for part in d.name.casefold().replace("-", " ").split())
        }
    )
    if not nodes:
        return ""
    return (
        f" by its exact name; {', '.join(nodes)} has GPUs Ray only calls by a coarse type, which may be this model: "
        "label the node with its gpu-model (`flashpoint ray-flags` prints the flags)"
    )


def feasible(candidates: Sequence[Candidate], gpu_count: int, devices: Sequence[Device]) -> NoFit | None:
    """None if some candidate could ever fit on this fleet (ignoring who holds what); else the reasons."""
    index = _fleet_shape(devices)
    reasons: list[WaitReason] = []
    for candidate in candidates:
        missing = _not_in_fleet(candidate, gpu_count, index)
        if missing is None:
            return None
        reasons.append(missing)
    return NoFit(tuple(reasons))


#: the last fleet ``feasible`` indexed, and its index (nobody holds anything there): the engine asks about every
#: endpoint with the same fleet, so the index is built once per fleet, not once per endpoint
_last_fleet: list[tuple[tuple[Device, ...], FleetIndex]] = []


def _fleet_shape(devices: Sequence[Device]) -> FleetIndex:
    fleet = devices if isinstance(devices, tuple) else tuple(devices)
    if _last_fleet and _last_fleet[0][0] == fleet:  # the same devices: an identity check per device
        return _last_fleet[0][1]
    index = FleetIndex(fleet)
    _last_fleet[:] = [(fleet, index)]
    return index
