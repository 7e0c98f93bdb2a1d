"""Nodes: the CPU ledger's reserve/release/replace rules, CPU placement and node filters, by tables; and CPU placement
on the ledger against the scanning reference (``reference_place_cpu``) on random fleets and operation sequences."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from flashpoint.explain import Code
from flashpoint.flashtypes import CpuInstanceType, cpu_size
from flashpoint.fleet.inventory import Device, Fleet, Holder, Node
from flashpoint.gpus import GpuType, model_of
from flashpoint.scheduler.placement.filters import NodeFilter, eligible, parse_cuda
from flashpoint.scheduler.placement.fit import CpuFit, NoFit, Yielders, place_cpu
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.placement.nodes import CpuRequest, CpuSlot, NodeLedger
from tests.scheduler.reference_placement import reference_place_cpu

GB = 1024
H200 = model_of(GpuType.NVIDIA_H200)


def req(name: str) -> CpuRequest:
    vcpus, memory_gb = cpu_size(name)
    return CpuRequest(name, vcpus, memory_gb * GB)


def node(name: str, cpus: int = 4, memory_gb: float = 8, **facts: object) -> Node:
    return Node(name, cpus=cpus, memory_mb=round(memory_gb * GB), **facts)  # type: ignore[arg-type]


W1, W2, W3 = Holder("w1", "ep1"), Holder("w2", "ep2"), Holder("w3", "ep1")


# --- the ledger: reserve, release, replace ---------------------------------------------------------------------------


def test_reserve_and_release() -> None:
    ledger = NodeLedger([node("a")])

    ledger.reserve(CpuSlot("a", (0, 1), 4 * GB), W1)

    assert ledger.free("a") == (2, 4 * GB)
    assert ledger.slot(W1) == CpuSlot("a", (0, 1), 4 * GB)
    ledger.verify()
    ledger.release(W1)
    ledger.release(W1)  # a holder without a slot is ignored
    assert ledger.free("a") == (4, 8 * GB) and ledger.slots() == {}
    ledger.verify()


@pytest.mark.parametrize(
    ("slot", "holder", "message"),
    [
        (CpuSlot("a", (1, 2), GB), W2, "core 1 of a is already reserved by worker w1 of ep1"),
        (CpuSlot("a", (2, 2), GB), W2, "core 2 of a is already reserved"),
        (CpuSlot("a", (7,), GB), W2, "node a has no core 7"),
        (CpuSlot("b", (0,), GB), W2, "node b is not in the fleet"),
        (CpuSlot("a", (2,), 7 * GB), W2, "would oversubscribe it"),
        (CpuSlot("a", (2,), GB), W1, "already reserves CPUs"),
    ],
)
def test_a_core_is_never_handed_out_twice_and_memory_never_oversubscribed(
    slot: CpuSlot, holder: Holder, message: str
) -> None:
    ledger = NodeLedger([node("a")])
    ledger.reserve(CpuSlot("a", (0, 1), 2 * GB), W1)

    with pytest.raises(ValueError, match=message):
        ledger.reserve(slot, holder)

    # a refused reservation takes nothing
    ledger.verify()
    assert ledger.slots() == {W1: CpuSlot("a", (0, 1), 2 * GB)}
    assert ledger.free("a") == (2, 6 * GB)


def test_cores_are_the_nodes_own_ids_in_its_order() -> None:
    ledger = NodeLedger([Node("a", cpus=3, memory_mb=8 * GB, cores=(4, 6, 5))])

    fit = place_cpu([req("cpu3c-2-4")], ledger)

    assert isinstance(fit, CpuFit) and fit.slot == CpuSlot("a", (4, 6), 4 * GB)
    ledger.reserve(fit.slot, W1)
    again = place_cpu([req("cpu3c-1-2")], ledger)
    assert isinstance(again, CpuFit) and again.slot.cores == (5,)


def test_replace_keeps_reservations_on_nodes_still_there() -> None:
    ledger = NodeLedger([node("a"), node("b")])
    ledger.reserve(CpuSlot("a", (0, 1), 2 * GB), W1)
    ledger.reserve(CpuSlot("b", (0,), GB), W2)

    # b leaves; a comes back with two CPUs: its reservation keeps the cores that still exist
    ledger.replace([node("a", cpus=1), node("c")])

    ledger.verify()
    assert ledger.slots() == {W1: CpuSlot("a", (0,), 2 * GB)}
    assert ledger.free("a") == (0, 6 * GB) and ledger.free("c") == (4, 8 * GB)
    assert [n.name for n in ledger.nodes] == ["a", "c"]


def test_a_node_described_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        NodeLedger([node("a"), node("a")])
    with pytest.raises(ValueError, match="twice"):
        Fleet.of((), [node("a"), node("a")])


def test_a_node_with_core_ids_for_other_than_its_cpus_is_refused() -> None:
    with pytest.raises(ValueError, match="2 CPUs but 1 core ids"):
        Node("a", cpus=2, cores=(0,))


def test_fleet_of_describes_every_node_a_device_names() -> None:
    device = Device("gpu-box", 0, H200.name, H200, 141 * GB, simulated=True)

    fleet = Fleet.of([device], [node("cpu-box")])

    assert [(n.name, n.cpus, n.cuda, n.simulated) for n in fleet.nodes] == [
        ("cpu-box", 4, None, False),
        ("gpu-box", 0, None, True),  # nobody described it: no CPU capacity, CUDA unknown
    ]


def test_the_index_releases_and_verifies_its_nodes_too() -> None:
    index = FleetIndex((), [node("a")])
    index.nodes.reserve(CpuSlot("a", (0,), GB), W1)
    index.verify()
    index.replace((), [node("b")])
    assert index.nodes.slots() == {}
    index.verify()


# --- CPU placement, by tables ----------------------------------------------------------------------------------------


def test_the_first_instance_that_fits_on_the_first_node_that_has_it() -> None:
    ledger = NodeLedger([node("a", cpus=2, memory_gb=16), node("b", cpus=8, memory_gb=16)])

    fit = place_cpu([req("cpu5c-8-16"), req("cpu3c-4-8"), req("cpu3c-1-2")], ledger)

    # declared order: cpu5c-8-16 fits on b (a is too small); it wins over the smaller ones that fit on a
    assert isinstance(fit, CpuFit) and (fit.request.name, fit.node, fit.slot.cores) == (
        "cpu5c-8-16",
        "b",
        tuple(range(8)),
    )


def test_a_busy_node_sends_the_worker_to_the_next_node_and_then_to_the_next_instance() -> None:
    ledger = NodeLedger([node("a", cpus=2, memory_gb=4), node("b", cpus=1, memory_gb=2)])
    ledger.reserve(CpuSlot("a", (0,), 2 * GB), W1)

    fit = place_cpu([req("cpu3c-2-4"), req("cpu3c-1-2")], ledger)

    # cpu3c-2-4 fits on no node now (a has one core and 2 GB free): the fallback takes cpu3c-1-2 on a
    assert isinstance(fit, CpuFit) and (fit.request.name, fit.slot) == ("cpu3c-1-2", CpuSlot("a", (1,), 2 * GB))


def test_cpu_busy_names_the_holders_and_what_is_free() -> None:
    ledger = NodeLedger([node("a", cpus=2, memory_gb=4)])
    ledger.reserve(CpuSlot("a", (0,), 2 * GB), W1)

    result = place_cpu([req("cpu3c-2-4")], ledger)

    assert isinstance(result, NoFit) and not result.never
    (reason,) = result.reasons
    assert (reason.candidate, reason.code, reason.holders) == ("cpu3c-2-4", Code.CPU_BUSY, ("ep1",))
    assert (
        reason.detail == "cpu3c-2-4 needs 2 vCPUs and 4 GB; the most free on one node is 1 vCPUs and 2 GB; held by ep1"
    )


@pytest.mark.parametrize(
    ("nodes", "instance", "detail"),
    [
        (
            [node("a", cpus=2, memory_gb=23.5)],
            "cpu5c-8-16",
            "cpu5c-8-16 needs 8 vCPUs and 16 GB; the largest node has 2 vCPUs and 23.5 GB: declare FLASHPOINT_CPUS=8 "
            "on a machine that has them (cpus/memory_gb in a fleet file), or choose a smaller instance",
        ),
        (
            [node("a", cpus=16, memory_gb=4), node("b", cpus=2, memory_gb=64)],
            "cpu5c-8-16",
            "cpu5c-8-16 needs 8 vCPUs and 16 GB; no node has both (the most vCPUs on one is 16, the most memory 64 GB)"
            ": declare more on a machine that has them (cpus/memory_gb in a fleet file), or choose a smaller instance",
        ),
        (
            [],
            "cpu3c-1-2",
            "cpu3c-1-2 needs 1 vCPU and 2 GB; the fleet has no node: declare FLASHPOINT_CPUS=1 and "
            "FLASHPOINT_MEMORY_GB=2 on a machine that has them (cpus/memory_gb in a fleet file), or choose a smaller "
            "instance",
        ),
    ],
)
def test_an_instance_larger_than_every_node_never_fits_and_says_what_to_do(
    nodes: list[Node], instance: str, detail: str
) -> None:
    result = place_cpu([req(instance)], NodeLedger(nodes))

    assert isinstance(result, NoFit) and result.never
    (reason,) = result.reasons
    assert (reason.code, reason.detail) == (Code.CPU_TOO_LARGE, detail)


def test_idle_cpu_workers_yield_and_declared_order_beats_yielding() -> None:
    ledger = NodeLedger([node("a", cpus=2, memory_gb=4), node("b", cpus=1, memory_gb=2)])
    ledger.reserve(CpuSlot("a", (0,), 2 * GB), W1)
    ledger.reserve(CpuSlot("a", (1,), 2 * GB), W2)

    # w1 may yield: cpu3c-2-4 (first declared) needs both of a's cores, so w1 and w2 would have to go; only w1 may
    result = place_cpu([req("cpu3c-2-4"), req("cpu3c-1-2")], ledger, Yielders([W1]))
    # so the first instance is busy and the second takes b, which is free, without any reclaim
    assert isinstance(result, CpuFit) and (result.request.name, result.node, result.reclaim) == ("cpu3c-1-2", "b", ())

    # with both yielding, the first instance wins by reclaiming both, in the order of their cores
    both = place_cpu([req("cpu3c-2-4"), req("cpu3c-1-2")], ledger, Yielders([W1, W2]))
    assert isinstance(both, CpuFit) and (both.slot, both.reclaim) == (CpuSlot("a", (0, 1), 4 * GB), (W1, W2))

    # a free node first, then the reclaim path: one worker stops, no more than needed
    ledger.reserve(CpuSlot("b", (0,), 2 * GB), W3)
    one = place_cpu([req("cpu3c-1-2")], ledger, Yielders([W2, W3]))
    assert isinstance(one, CpuFit) and (one.slot, one.reclaim) == (CpuSlot("a", (1,), 2 * GB), (W2,))


def test_allowed_nodes_narrow_cpu_placement() -> None:
    ledger = NodeLedger([node("a"), node("b")])

    fit = place_cpu([req("cpu3c-1-2")], ledger, allowed={"b"})
    assert isinstance(fit, CpuFit) and fit.node == "b"

    never = place_cpu([req("cpu3c-8-16")], ledger, allowed={"b"})
    assert isinstance(never, NoFit) and "the largest eligible node has 4 vCPUs" in never.reasons[0].detail


# --- node filters, by tables -----------------------------------------------------------------------------------------

EU = {"datacenter": "EU-RO-1"}
US = {"datacenter": "US-KS-2"}


@pytest.mark.parametrize(
    ("nodes", "rule", "allowed", "codes", "notes"),
    [
        # nothing asked: every node, no reason
        ([node("a")], NodeFilter(), None, [], 0),
        # no node has a datacenter label: the option is not applied, a note says so
        ([node("a"), node("b")], NodeFilter(("EU-RO-1",)), None, [], 1),
        # labelled nodes: only those in the datacenter (case does not matter); an unlabelled node is in none
        (
            [node("a", labels=EU), node("b", labels=US), node("c")],
            NodeFilter(("eu-ro-1",)),
            {"a"},
            [Code.DATACENTER],
            0,
        ),
        # several datacenters: any of them
        ([node("a", labels=EU), node("b", labels=US)], NodeFilter(("US-KS-2", "EU-RO-1")), None, [], 0),
        ([node("a", labels=EU)], NodeFilter(("US-CA-2",)), set(), [Code.DATACENTER], 0),
        # CUDA: below the floor, or unknown, is out; equal or newer is in; versions compare as numbers
        (
            [node("a", cuda="12.4"), node("b", cuda="12.8"), node("c"), node("d", cuda="12.10")],
            NodeFilter(min_cuda="12.8"),
            {"b", "d"},
            [Code.CUDA_VERSION],
            0,
        ),
        # both: one reason each
        (
            [node("a", cuda="12.8", labels=US), node("b", cuda="11.8", labels=EU), node("c", cuda="12.9", labels=EU)],
            NodeFilter(("EU-RO-1",), "12.8"),
            {"c"},
            [Code.DATACENTER, Code.CUDA_VERSION],
            0,
        ),
    ],
)
def test_eligible_nodes(
    nodes: list[Node], rule: NodeFilter, allowed: set[str] | None, codes: list[Code], notes: int
) -> None:
    found = eligible(rule, nodes)

    assert found.nodes == (None if allowed is None else frozenset(allowed))
    assert [r.code for r in found.reasons] == codes
    assert len(found.notes) == notes


def test_filter_reasons_name_the_nodes_left_out() -> None:
    nodes = [node("a", cuda="12.4", labels=EU), node("b", labels=EU), node("c", cuda="12.8", labels=US)]

    (dc,) = eligible(NodeFilter(("US-CA-2",)), nodes).reasons
    assert dc.candidate == "datacenter=US-CA-2"
    assert dc.detail == "no node is in US-CA-2; the fleet's nodes are in: EU-RO-1 (a, b); US-KS-2 (c)"

    (cuda,) = eligible(NodeFilter(min_cuda="12.8"), nodes).reasons
    assert cuda.candidate == "min_cuda_version=12.8"
    assert cuda.detail == (
        "a has CUDA 12.4 < 12.8; b: CUDA version unknown (no NVIDIA driver seen; a Ray node needs a cuda-version label)"
    )
    (none_left,) = eligible(NodeFilter(min_cuda="13.0"), nodes).reasons
    assert none_left.detail.startswith("no node has a CUDA driver of 13.0 or newer: ")
    assert none_left.detail.endswith("; update the driver, or lower min_cuda_version")


def test_a_long_list_of_nodes_is_cut_short() -> None:
    nodes = [node(f"n{i}", cuda="11.8") for i in range(10)] + [node("ok", cuda="12.8")]
    (reason,) = eligible(NodeFilter(min_cuda="12.8"), nodes).reasons
    assert reason.detail == "n0, n1, n2, n3, n4, n5 and 4 more have CUDA 11.8 < 12.8"


@pytest.mark.parametrize(
    ("text", "parsed"), [("12.8", (12, 8)), ("12.10", (12, 10)), ("12", (12,)), (" 11.8 ", (11, 8)), ("x", None)]
)
def test_parse_cuda(text: str, parsed: tuple[int, ...] | None) -> None:
    assert parse_cuda(text) == parsed


def test_the_ledger_remembers_eligibility_per_fleet() -> None:
    ledger = NodeLedger([node("a", labels=EU)])
    rule = NodeFilter(("EU-RO-1",))
    assert ledger.eligible(rule) is ledger.eligible(rule)
    ledger.replace([node("a", labels=US)])
    assert ledger.eligible(rule).nothing


# --- random fleets: CPU placement against the reference --------------------------------------------------------------

INSTANCES = st.sampled_from([t.value for t in CpuInstanceType])
NODE = st.tuples(st.integers(0, 8), st.integers(0, 20), st.booleans())
HOLDERS = tuple(Holder(f"w{i}", f"ep{i % 3}") for i in range(8))
MAY_YIELD = st.frozensets(st.sampled_from(HOLDERS))
OPS = st.sampled_from(("reserve", "reserve", "reserve", "release"))


def make_nodes(draws: list[tuple[int, int, bool]]) -> list[Node]:
    """Nodes n0.. of the drawn CPUs and GB; some with core ids in an order of their own."""
    nodes = []
    for i, (cpus, memory_gb, shuffled) in enumerate(draws):
        cores = tuple(reversed(range(10, 10 + cpus))) if shuffled else ()
        nodes.append(Node(f"n{i}", cpus=cpus, memory_mb=memory_gb * GB, cores=cores))
    return nodes


def predicate(may_yield: frozenset[Holder]) -> Callable[[Holder], bool]:
    return lambda holder: holder in may_yield


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_place_cpu_is_the_reference_as_slots_are_reserved_and_released(data: st.DataObject) -> None:
    nodes = make_nodes(data.draw(st.lists(NODE, min_size=0, max_size=4)))
    ledger = NodeLedger(nodes)
    slots: dict[Holder, CpuSlot] = {}
    may_yield = data.draw(MAY_YIELD)
    names = [n.name for n in nodes]
    for _ in range(data.draw(st.integers(1, 12))):
        holder = data.draw(st.sampled_from(HOLDERS))
        if data.draw(OPS) == "release":
            ledger.release(holder)
            slots.pop(holder, None)
        else:
            # a fit the ledger offers, or a slot of random cores (which it must refuse when it would oversubscribe)
            wanted = req(data.draw(INSTANCES))
            if data.draw(st.booleans()) or not nodes:
                fit = place_cpu([wanted], ledger)
                slot = fit.slot if isinstance(fit, CpuFit) else None
            else:
                target = data.draw(st.sampled_from(nodes))
                picked = data.draw(st.lists(st.sampled_from(target.core_ids), max_size=3)) if target.cpus else []
                slot = CpuSlot(target.name, tuple(picked), data.draw(st.integers(0, 6)) * GB)
            if slot is not None:
                target_node = next(n for n in nodes if n.name == slot.node)
                taken = {c for s in slots.values() if s.node == slot.node for c in s.cores}
                used = sum(s.memory_mb for s in slots.values() if s.node == slot.node)
                ok = (
                    holder not in slots
                    and len(set(slot.cores)) == len(slot.cores)
                    and not taken & set(slot.cores)
                    and used + slot.memory_mb <= target_node.memory_mb
                )
                if ok:
                    ledger.reserve(slot, holder)
                    slots[holder] = slot
                else:
                    with pytest.raises(ValueError):
                        ledger.reserve(slot, holder)
        ledger.verify()
        assert ledger.slots() == slots
        requests = [req(i) for i in data.draw(st.lists(INSTANCES, min_size=1, max_size=3))]
        allowed = set(data.draw(st.lists(st.sampled_from(names)))) if names and data.draw(st.booleans()) else None
        for yieldable in (None, predicate(may_yield)):
            expected = (
                reference_place_cpu(requests, nodes, slots, allowed=allowed)
                if yieldable is None
                else reference_place_cpu(requests, nodes, slots, yieldable, allowed)
            )
            got = (
                place_cpu(requests, ledger, allowed=allowed)
                if yieldable is None
                else place_cpu(requests, ledger, yieldable, allowed)
            )
            assert got == expected
        assert place_cpu(requests, ledger, Yielders(may_yield), allowed) == reference_place_cpu(
            requests, nodes, slots, predicate(may_yield), allowed
        )
