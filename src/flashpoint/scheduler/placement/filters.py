"""Node filters: which nodes an endpoint may use (``datacenter=``, ``min_cuda_version``), and why the others not.

Pure. ``eligible(rule, nodes)`` answers once per fleet and rule (the node ledger remembers it), so an endpoint with
filters costs a set lookup per group on its placement path, and one without any costs nothing.

- ``datacenter=``: a node qualifies when its ``datacenter`` label is one of the endpoint's (compared without case).
  A fleet where no node has a datacenter label does not apply the option at all, and says so in a note. Where some
  nodes are labelled, an unlabelled node is in none of them.
- ``min_cuda_version``: GPU endpoints only, as in Flash. A node qualifies when its driver's CUDA version is at least
  the floor; a node whose version is unknown (no NVML, a Ray node without a ``cuda-version`` label) does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flashpoint.explain import Code, WaitReason
from flashpoint.flashtypes import cuda_tuple
from flashpoint.fleet.inventory import Node

__all__ = ["Eligible", "NodeFilter", "eligible", "parse_cuda"]

#: nodes named in one reason, at most; the rest are counted
_SHOWN = 6


def parse_cuda(text: str | None) -> tuple[int, ...] | None:
    """``"12.8"`` -> ``(12, 8)``; None for None or anything that is not a CUDA version (``flashtypes.cuda_tuple``)."""
    if text is None:
        return None
    try:
        return cuda_tuple(text)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class NodeFilter:
    """What an endpoint asks of the nodes its workers run on. Hashable: the ledger remembers answers per filter."""

    #: datacenter names, as the endpoint wrote them; empty means any
    datacenters: tuple[str, ...] = ()
    #: the lowest driver CUDA version, e.g. "12.8"; None means any (always None for CPU endpoints)
    min_cuda: str | None = None

    @property
    def open(self) -> bool:
        """True when it filters nothing."""
        return not self.datacenters and self.min_cuda is None


@dataclass(frozen=True, slots=True)
class Eligible:
    """The nodes a filter leaves an endpoint on one fleet, and why the others are out."""

    #: names of the nodes it may use; None when it may use every node
    nodes: frozenset[str] | None = None
    #: one reason per filter that leaves nodes out (codes ``datacenter`` and ``cuda_version``)
    reasons: tuple[WaitReason, ...] = ()
    #: what the filter does not do on this fleet, in words (a datacenter option no label can match)
    notes: tuple[str, ...] = ()

    @property
    def nothing(self) -> bool:
        """True when no node is left."""
        return self.nodes is not None and not self.nodes


def eligible(rule: NodeFilter, nodes: Sequence[Node]) -> Eligible:
    """Which of ``nodes`` ``rule`` lets an endpoint use, with a reason per filter that leaves nodes out."""
    left = list(nodes)
    reasons: list[WaitReason] = []
    notes: list[str] = []
    if rule.datacenters:
        wanted = ", ".join(rule.datacenters)
        if not any(n.datacenter for n in nodes):
            notes.append(
                f"datacenter={wanted} is not applied: no node of this fleet has a datacenter label "
                '(set FLASHPOINT_DATACENTER on a machine, labels = { datacenter = "..." } on a fleet file\'s node, '
                "or a datacenter label on a Ray node)"
            )
        else:
            names = {d.casefold() for d in rule.datacenters}
            out = [n for n in left if (n.datacenter or "").casefold() not in names]
            if out:
                left = [n for n in left if (n.datacenter or "").casefold() in names]
                reasons.append(_datacenter_reason(wanted, out, nodes, none_left=not left))
    if rule.min_cuda is not None:
        floor = parse_cuda(rule.min_cuda)
        if floor is not None:
            out = [n for n in left if (v := parse_cuda(n.cuda)) is None or v < floor]
            if out:
                left = [n for n in left if (v := parse_cuda(n.cuda)) is not None and v >= floor]
                reasons.append(_cuda_reason(rule.min_cuda, out, none_left=not left))
    if not reasons:
        return Eligible(None, (), tuple(notes))
    return Eligible(frozenset(n.name for n in left), tuple(reasons), tuple(notes))


def _names(nodes: Sequence[Node]) -> str:
    shown = ", ".join(n.name for n in nodes[:_SHOWN])
    return shown + (f" and {len(nodes) - _SHOWN} more" if len(nodes) > _SHOWN else "")


def _datacenter_reason(wanted: str, out: Sequence[Node], fleet: Sequence[Node], *, none_left: bool) -> WaitReason:
    by_dc: dict[str, list[Node]] = {}
    for node in fleet if none_left else out:
        by_dc.setdefault(node.datacenter or "", []).append(node)
    where = "; ".join(
        f"{dc} ({_names(members)})" if dc else f"no datacenter label ({_names(members)})"
        for dc, members in by_dc.items()
    )
    if none_left:
        detail = f"no node is in {wanted}; the fleet's nodes are in: {where}"
    else:
        detail = f"{len(out)} node(s) are not in {wanted}: {where}"
    return WaitReason(f"datacenter={wanted}", Code.DATACENTER, detail)


def _cuda_reason(floor: str, out: Sequence[Node], *, none_left: bool) -> WaitReason:
    by_version: dict[str, list[Node]] = {}
    for node in out:
        by_version.setdefault(node.cuda or "", []).append(node)
    parts = [
        f"{_names(members)} {'has' if len(members) == 1 else 'have'} CUDA {version} < {floor}"
        if version
        else f"{_names(members)}: CUDA version unknown (no NVIDIA driver seen; a Ray node needs a cuda-version label)"
        for version, members in by_version.items()
    ]
    head = f"no node has a CUDA driver of {floor} or newer: " if none_left else ""
    advice = "; update the driver, or lower min_cuda_version" if none_left else ""
    return WaitReason(f"min_cuda_version={floor}", Code.CUDA_VERSION, head + "; ".join(parts) + advice)
