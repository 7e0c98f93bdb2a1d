"""The node ledger: every node of the fleet, and the CPU reservations (cores and memory) of CPU workers on them.

Pure (no I/O, no clock, no asyncio). The fleet index owns one (``FleetIndex.nodes``): the engine ``reserve``s a
CPU worker's slot when it starts the worker, ``release``s it when the worker is gone, and ``replace`` keeps the
reservations of nodes still in a new fleet. ``placement.place_cpu`` reads it.

The invariant, like "a device is never handed out twice": on every node, no core is reserved twice and the memory
reserved never exceeds the node's; ``reserve`` raises and takes nothing otherwise, and ``verify`` recounts. A node
that comes back smaller (a Ray node restarted with fewer CPUs) keeps the reservations of workers still running on
it: nothing new fits there until they end.

GPU workers reserve nothing here: a GPU endpoint's CPU use is the machine's business, as on Runpod, where a GPU
worker's vCPUs come with its GPU.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from flashpoint.fleet.inventory import Holder, Node
from flashpoint.scheduler.placement.filters import Eligible, NodeFilter, eligible

__all__ = ["CpuRequest", "CpuSlot", "NodeLedger"]


@dataclass(frozen=True, slots=True)
class CpuRequest:
    """One CPU instance type an endpoint may run on: its name and what a worker of it reserves."""

    name: str
    vcpus: int
    memory_mb: int


@dataclass(frozen=True, slots=True)
class CpuSlot:
    """A CPU worker's share of one node: the cores it is pinned to and the memory it reserves."""

    node: str
    cores: tuple[int, ...]
    memory_mb: int


class _NodeState:
    """One node's reservations: its free cores (sorted, in the order the node hands them out) and free memory."""

    __slots__ = ("free_cores", "free_memory", "node", "order", "position", "slots")

    def __init__(self, node: Node, position: int) -> None:
        self.node = node
        self.position = position
        #: core id -> its place in the node's hand-out order
        self.order = {core: i for i, core in enumerate(node.core_ids)}
        #: free cores as hand-out places, sorted
        self.free_cores: list[int] = list(range(len(self.order)))
        self.free_memory = node.memory_mb
        self.slots: dict[Holder, CpuSlot] = {}


class NodeLedger:
    """The nodes in fleet order and who reserves which cores and memory on them."""

    __slots__ = ("_eligible", "_labelled", "_nodes", "_slots", "_states")

    def __init__(self, nodes: Sequence[Node] = ()) -> None:
        self._build(nodes)
        #: every reservation, by holder
        self._slots: dict[Holder, CpuSlot] = {}

    def _build(self, nodes: Sequence[Node]) -> None:
        self._nodes = tuple(nodes)
        self._states: dict[str, _NodeState] = {}
        for position, node in enumerate(self._nodes):
            if node.name in self._states:
                raise ValueError(f"the fleet describes node {node.name} twice")
            self._states[node.name] = _NodeState(node, position)
        self._labelled = any(node.datacenter for node in self._nodes)
        #: the nodes each filter lets an endpoint use, worked out once per fleet
        self._eligible: dict[NodeFilter, Eligible] = {}

    # ----------------------------------------------------------------------------------------------------------------
    # the nodes and their reservations

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every node, in fleet order."""
        return self._nodes

    def node(self, name: str) -> Node | None:
        state = self._states.get(name)
        return state.node if state is not None else None

    @property
    def labelled(self) -> bool:
        """Whether any node has a datacenter label (without one, ``datacenter=`` is not applied)."""
        return self._labelled

    def eligible(self, rule: NodeFilter) -> Eligible:
        """The nodes ``rule`` lets an endpoint use on this fleet (``filters.eligible``), remembered per fleet."""
        found = self._eligible.get(rule)
        if found is None:
            found = self._eligible[rule] = eligible(rule, self._nodes)
        return found

    def replace(self, nodes: Sequence[Node]) -> None:
        """A new fleet: reservations on nodes still in it are kept (cores that no longer exist are dropped from
        them); those on departed nodes are dropped."""
        slots = self._slots
        self._build(nodes)
        self._slots = {}
        for holder, slot in slots.items():
            state = self._states.get(slot.node)
            if state is None:
                continue
            kept = CpuSlot(slot.node, tuple(c for c in slot.cores if c in state.order), slot.memory_mb)
            self._take(state, kept, holder)

    def reserve(self, slot: CpuSlot, holder: Holder) -> None:
        """``holder`` reserves ``slot``: its cores and memory on its node. Cores are never handed out twice and a
        node's memory is never oversubscribed.

        Raises:
            ValueError: the node is not in the fleet, the holder already holds a slot, a core is not the node's, is
                reserved already or is named twice, or the memory exceeds what is free; nothing is reserved.
        """
        state = self._states.get(slot.node)
        if state is None:
            raise ValueError(f"node {slot.node} is not in the fleet")
        if holder in self._slots:
            raise ValueError(f"worker {holder.worker_id} of {holder.endpoint} already reserves CPUs")
        places: set[int] = set()
        free = set(state.free_cores)
        for core in slot.cores:
            place = state.order.get(core)
            if place is None:
                raise ValueError(f"node {slot.node} has no core {core}")
            if place not in free or place in places:
                owner = next((h for h, s in state.slots.items() if core in s.cores), None)
                raise ValueError(
                    f"core {core} of {slot.node} is already reserved"
                    f"{f' by worker {owner.worker_id} of {owner.endpoint}' if owner is not None else ''}"
                )
            places.add(place)
        if slot.memory_mb < 0 or slot.memory_mb > state.free_memory:
            raise ValueError(
                f"{slot.memory_mb} MiB of memory on {slot.node} would oversubscribe it ({state.free_memory} MiB free)"
            )
        self._take(state, slot, holder)

    def release(self, holder: Holder) -> None:
        """``holder``'s slot is given back; a holder without one is ignored."""
        slot = self._slots.pop(holder, None)
        if slot is None:
            return
        state = self._states.get(slot.node)
        if state is None or state.slots.get(holder) is not slot:
            return
        del state.slots[holder]
        for core in slot.cores:
            insort(state.free_cores, state.order[core])
        state.free_memory += slot.memory_mb

    def _take(self, state: _NodeState, slot: CpuSlot, holder: Holder) -> None:
        for core in slot.cores:
            state.free_cores.remove(state.order[core])
        state.free_memory -= slot.memory_mb
        state.slots[holder] = slot
        self._slots[holder] = slot

    def slot(self, holder: Holder) -> CpuSlot | None:
        """The slot ``holder`` reserves, or None."""
        return self._slots.get(holder)

    def slots(self) -> dict[Holder, CpuSlot]:
        """Holder -> slot, for every reservation (a copy)."""
        return dict(self._slots)

    def free(self, name: str) -> tuple[int, int]:
        """Free cores and free memory (MiB) on node ``name``; (0, 0) for a node not in the fleet."""
        state = self._states.get(name)
        return (len(state.free_cores), max(state.free_memory, 0)) if state is not None else (0, 0)

    def verify(self) -> None:
        """Recount every node's free cores and memory from its reservations, and check the invariant (tests).

        Raises:
            AssertionError: a count differs from the recount, or a node is oversubscribed.
        """
        by_node: dict[str, dict[Holder, CpuSlot]] = {}
        for holder, slot in self._slots.items():
            by_node.setdefault(slot.node, {})[holder] = slot
        for name, state in self._states.items():
            slots = by_node.pop(name, {})
            if state.slots != slots:
                raise AssertionError(f"node {name} keeps reservations {state.slots!r}, the ledger {slots!r}")
            reserved = [state.order[c] for s in slots.values() for c in s.cores]
            if len(reserved) != len(set(reserved)):
                raise AssertionError(f"a core of {name} is reserved twice: {sorted(reserved)}")
            free = sorted(set(range(len(state.order))) - set(reserved))
            if state.free_cores != free:
                raise AssertionError(f"node {name} keeps free cores {state.free_cores}, a recount gives {free}")
            memory = state.node.memory_mb - sum(s.memory_mb for s in slots.values())
            if state.free_memory != memory:
                raise AssertionError(f"node {name} keeps {state.free_memory} MiB free, a recount gives {memory}")
        if by_node:
            raise AssertionError(f"reservations on nodes not in the fleet: {sorted(by_node)}")

    # ----------------------------------------------------------------------------------------------------------------
    # what CPU placement asks

    def states(self, allowed: Collection[str] | None = None) -> Iterator[_NodeState]:
        """The nodes (as their states) in fleet order; only those in ``allowed`` when given."""
        states = self._states.values()
        if allowed is None:
            yield from states
        else:
            yield from (s for s in states if s.node.name in allowed)

    def fit_free(self, request: CpuRequest, allowed: Collection[str] | None = None) -> CpuSlot | None:
        """The first node in fleet order with ``request``'s cores and memory free: a slot of its first free cores."""
        for state in self.states(allowed):
            if len(state.free_cores) >= request.vcpus and state.free_memory >= request.memory_mb:
                return _slot(state, state.free_cores[: request.vcpus], request.memory_mb)
        return None

    def fit_reclaim(
        self,
        request: CpuRequest,
        yieldable: Callable[[Holder], bool] | None,
        among: Collection[Holder] | None = None,
        allowed: Collection[str] | None = None,
    ) -> tuple[CpuSlot, tuple[Holder, ...]] | None:
        """The first node in fleet order where free capacity plus the slots of holders that may yield (in ``among``
        when given, accepted by ``yieldable`` when given) make ``request``: the slot (its first cores among the free
        and the yielded ones) and the holders to stop, taken by their first core until enough is free."""
        for state in self.states(allowed):
            if not state.slots:
                continue
            accepted = sorted(
                (
                    (min(state.order[c] for c in slot.cores) if slot.cores else -1, holder)
                    for holder, slot in state.slots.items()
                    if (among is None or holder in among) and (yieldable is None or yieldable(holder))
                ),
                key=lambda pair: pair[0],
            )
            cores = list(state.free_cores)
            memory = state.free_memory
            chosen: list[Holder] = []
            for _, holder in accepted:
                if len(cores) >= request.vcpus and memory >= request.memory_mb:
                    break
                slot = state.slots[holder]
                cores.extend(state.order[c] for c in slot.cores)
                memory += slot.memory_mb
                chosen.append(holder)
            if chosen and len(cores) >= request.vcpus and memory >= request.memory_mb:
                return _slot(state, sorted(cores)[: request.vcpus], request.memory_mb), tuple(chosen)
        return None

    def largest(self, allowed: Collection[str] | None = None) -> tuple[Node | None, int, int]:
        """The node with the most CPUs (then memory), and the most CPUs and memory (MiB) any one node has."""
        best: Node | None = None
        most_cpus = most_memory = 0
        for state in self.states(allowed):
            node = state.node
            most_cpus, most_memory = max(most_cpus, node.cpus), max(most_memory, node.memory_mb)
            if best is None or (node.cpus, node.memory_mb) > (best.cpus, best.memory_mb):
                best = node
        return best, most_cpus, most_memory

    def could_hold(self, request: CpuRequest, allowed: Collection[str] | None = None) -> bool:
        """Whether some node could ever hold ``request`` (with nothing reserved)."""
        return any(s.node.cpus >= request.vcpus and s.node.memory_mb >= request.memory_mb for s in self.states(allowed))

    def most_free(self, allowed: Collection[str] | None = None) -> tuple[int, int]:
        """The node with the most free cores (then memory): its free cores and memory (MiB)."""
        best = (0, 0)
        for state in self.states(allowed):
            best = max(best, (len(state.free_cores), max(state.free_memory, 0)))
        return best

    def holding_endpoints(self, allowed: Collection[str] | None = None) -> list[str]:
        """The endpoints reserving CPUs on the nodes (in ``allowed``), sorted."""
        return sorted({h.endpoint for s in self.states(allowed) for h in s.slots})


def _slot(state: _NodeState, places: Sequence[int], memory_mb: int) -> CpuSlot:
    cores = state.node.core_ids
    return CpuSlot(state.node.name, tuple(cores[p] for p in places), memory_mb)
