"""Nodes that left the fleet during the plane's life, and what only they could hold: ``node_away``, not "never".

A node that leaves may come back: a Ray node whose raylet stopped answering (the Ray backend sets it aside until Ray
reports it alive again or dead), one Ray declared dead whose machine restarts, a node an autoscaler stopped. While it
is away, an endpoint that only it could serve waits for it; it is not impossible. Its reasons say ``node_away``
(which node, since when, and why), its explanation is not "can never run on this fleet", and a waiting call does not
fail with ``UnsatisfiableError``.

The plane keeps what it saw of each departed node (``Departed``: its devices and facts, when and why it left) until a
node of that name is back, at most ``MAX_DEPARTED`` of them (the oldest are forgotten first). Pure: the plane passes
the time in, and nothing here does I/O.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flashpoint.explain import Code, WaitReason
from flashpoint.fleet.inventory import Device, Fleet, Node
from flashpoint.gpus import describe
from flashpoint.scheduler.placement.fit import NoFit, cpu_requests, feasible_endpoint, never_candidates
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.spec import EndpointSpec

__all__ = ["LEFT", "MAX_DEPARTED", "Departed", "departures", "judge", "why_lost", "with_away"]

#: departed nodes remembered at most (an autoscaling cluster comes and goes; the oldest are forgotten first)
MAX_DEPARTED = 64
#: why a node is away when its backend gave no word for it
LEFT = "it left the fleet"
#: the reasons a departed node may turn into ``node_away``: those that say no present node could ever hold a candidate
_NEVER_HERE = frozenset({Code.NOT_IN_FLEET, Code.CPU_TOO_LARGE})


@dataclass(frozen=True, slots=True)
class Departed:
    """A node that left the fleet: what it had, when it left (wall time) and why (the backend's words)."""

    node: Node
    devices: tuple[Device, ...]
    since: float
    why: str

    def describe(self) -> str:
        """``node n1 (2 x NVIDIA H200) away since 14:02:03: its raylet at 10.0.0.5:40805 stopped answering``."""
        counts: dict[str, int] = {}
        for device in self.devices:
            counts[device.model_name] = counts.get(device.model_name, 0) + 1
        has = ", ".join(f"{n} x {model}" for model, n in counts.items()) or f"{self.node.cpus} vCPUs"
        at = time.strftime("%H:%M:%S", time.localtime(self.since))
        return f"node {self.node.name} ({has}) away since {at}: {self.why}"


def departures(
    kept: Mapping[str, Departed],
    devices_before: Sequence[Device],
    nodes_before: Sequence[Node],
    after: Fleet,
    now: float,
) -> dict[str, Departed]:
    """The departed nodes once the fleet is ``after``: those of ``kept`` that are not back, then the nodes of the
    fleet before (``nodes_before``, with their ``devices_before``) that ``after`` lacks, left at wall time ``now`` for
    the reason ``after.away`` gives (else ``LEFT``). Oldest first, at most ``MAX_DEPARTED``."""
    present = {node.name for node in after.nodes}
    why = dict(after.away)
    found = {name: gone for name, gone in kept.items() if name not in present}
    for node in nodes_before:
        if node.name in present or node.name in found:
            continue
        devices = tuple(d for d in devices_before if d.node == node.name)
        found[node.name] = Departed(node, devices, now, why.get(node.name, LEFT))
    for name in list(found)[: max(0, len(found) - MAX_DEPARTED)]:
        del found[name]
    return found


def why_lost(nodes: Sequence[str], away: Sequence[tuple[str, str]]) -> str:
    """Why a worker on ``nodes`` (that left) is lost, in words: ``node n1 is away (its raylet ... stopped answering)``
    for a node its backend said why of (``Fleet.away``), else ``node n1 left the fleet``."""
    why = dict(away)
    return "; ".join(f"node {n} is away ({why[n]})" if n in why else f"node {n} left the fleet" for n in nodes)


def judge(
    spec: EndpointSpec, index: FleetIndex, departed: Mapping[str, Departed]
) -> tuple[NoFit | None, dict[str, WaitReason]]:
    """The endpoint's verdict on the fleet of ``index`` (who holds what aside), and its candidates only a departed
    node could hold.

    Returns ``(never, away)``: ``never`` is the ``NoFit`` of an endpoint no node could ever serve, present or
    departed (None when one could); ``away`` maps each candidate (GPU model, or CPU instance type) that no present
    node could hold but a departed one could to its ``node_away`` reason, naming those nodes.
    """
    never = feasible_endpoint(spec, index.devices, index.nodes.nodes)
    if not departed:
        return never, {}
    missing = never_candidates(spec, index)
    if not missing:
        return never, {}
    away: dict[str, WaitReason] = {}
    holds = {name: _could_hold(spec, index, gone) for name, gone in departed.items()}
    for reason in missing:
        nodes = [gone for name, gone in departed.items() if reason.candidate in holds[name]]
        if nodes:
            detail = "; ".join(gone.describe() for gone in nodes)
            away[reason.candidate] = WaitReason(reason.candidate, Code.NODE_AWAY, detail)
    return (None if away else never), away


def with_away(reasons: tuple[WaitReason, ...], away: Mapping[str, WaitReason]) -> tuple[WaitReason, ...]:
    """``reasons`` with each "no node could ever hold it" reason of a candidate a departed node could hold replaced
    by that candidate's ``node_away`` reason (``away``, from ``judge``)."""
    if not away:
        return reasons
    return tuple(away.get(r.candidate, r) if r.code in _NEVER_HERE else r for r in reasons)


def _could_hold(spec: EndpointSpec, index: FleetIndex, gone: Departed) -> frozenset[str]:
    """The candidates of ``spec`` that the fleet of ``index`` with ``gone`` back could hold, its node filters applied
    to that fleet as they would be if it returned. Only candidates the node alone is large enough for are asked
    about, so a departed node that could not help costs no fleet index."""
    alone = FleetIndex(gone.devices, (gone.node,))
    if spec.uses_gpu:
        maybe = [describe(c) for c in spec.candidates if alone.largest(c) >= spec.gpu_count]
    else:
        maybe = [r.name for r in cpu_requests(spec) if alone.nodes.could_hold(r)]
    if not maybe:
        return frozenset()
    back = FleetIndex((*index.devices, *gone.devices), (*index.nodes.nodes, gone.node))
    never = {r.candidate for r in never_candidates(spec, back)}
    return frozenset(name for name in maybe if name not in never)
