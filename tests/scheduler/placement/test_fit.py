"""Table-driven tests for flashpoint.scheduler.placement.fit: ordered fallback, one model on one node, reclaim."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import pytest

from flashpoint.explain import Code, WaitReason
from flashpoint.fleet.inventory import Device, Holder
from flashpoint.gpus import ANY_GPU, MODELS, Candidate, GpuGroup, GPUModel, GpuType, candidates, model_of
from flashpoint.scheduler.placement.fit import Fit, NoFit, Yielders, feasible, place
from flashpoint.scheduler.placement.index import FleetIndex

H200 = model_of(GpuType.NVIDIA_H200)
A100_PCIE = model_of(GpuType.NVIDIA_A100_80GB_PCIe)
A100_SXM = model_of(GpuType.NVIDIA_A100_SXM4_80GB)
A4000 = model_of(GpuType.NVIDIA_RTX_A4000)
A40 = model_of(GpuType.NVIDIA_A40)
B200 = model_of(GpuType.NVIDIA_B200)
L40S = next(m for m in MODELS if m.name == "NVIDIA L40S")

#: what a device that matches no catalog model looks like: a name NVML reports, no model
UNKNOWN = "NVIDIA Tesla T4"


def dev(node: str, index: int, model: GPUModel | str) -> Device:
    """A simulated device; a str model means an unrecognised device of that NVML name."""
    if isinstance(model, str):
        return Device(node, index, model, None, 16 * 1024, simulated=True)
    return Device(node, index, model.name, model, model.vram_gb * 1024, simulated=True)


#: the endpoints whose workers may yield in these tables (placement asks the caller, through ``yieldable``)
IDLE_PREFIX = "idle"


def held(endpoint: str, *, worker: str | None = None) -> Holder:
    """A holder; it may yield when its endpoint's name starts with "idle"."""
    return Holder(worker or f"w-{endpoint}", endpoint)


def idle(holder: Holder) -> bool:
    return holder.endpoint.startswith(IDLE_PREFIX)


def fleet(devices: tuple[Device, ...], holders: dict[tuple[str, int], Holder] | None = None) -> FleetIndex:
    """An index of ``devices`` with ``holders`` holding their devices."""
    index = FleetIndex(devices)
    by_key = {d.key: d for d in devices}
    for key, holder in (holders or {}).items():
        index.hold((by_key[key],), holder)
    return index


def placed(
    cands: tuple[Candidate, ...],
    gpu_count: int,
    devices: tuple[Device, ...],
    holders: dict[tuple[str, int], Holder] | None = None,
) -> Fit | NoFit:
    return place(cands, gpu_count, fleet(devices, holders), idle)


@dataclass(frozen=True)
class Case:
    """One placement scenario: a fleet, who holds what, a request, and the expected fit (or None for NoFit)."""

    devices: tuple[Device, ...]
    cands: tuple[Candidate, ...]
    holders: dict[tuple[str, int], Holder] = field(default_factory=dict)
    gpu_count: int = 1
    #: (node, device indexes) of the expected fit, or None when no candidate fits
    expect: tuple[str, tuple[int, ...]] | None = None
    #: the expected fit's candidate
    expect_candidate: Candidate | None = None


def run(case: Case) -> Fit | NoFit:
    return placed(case.cands, case.gpu_count, case.devices, case.holders)


# --- the first fit in declared order wins ------------------------------------------------------------------------

H200_THEN_A80 = candidates([GpuType.NVIDIA_H200, GpuGroup.AMPERE_80])
ONE_NODE = (dev("a", 0, A100_PCIE), dev("a", 1, H200))

FIT_CASES = {
    # declared order, not fleet order: the H200 is listed second on the node but first in gpu=[...]
    "declared-first-free": Case(ONE_NODE, H200_THEN_A80, expect=("a", (1,)), expect_candidate=H200),
    "declared-first-held-falls-back": Case(
        ONE_NODE, H200_THEN_A80, {("a", 1): held("llm")}, expect=("a", (0,)), expect_candidate=A100_PCIE
    ),
    # a "smaller" model written first still wins: the list is never sorted by VRAM or anything else
    "small-first-not-sorted": Case(
        (dev("a", 0, H200), dev("a", 1, A4000)),
        candidates([GpuType.NVIDIA_RTX_A4000, GpuType.NVIDIA_H200]),
        expect=("a", (1,)),
        expect_candidate=A4000,
    ),
    "big-first-not-sorted": Case(
        (dev("a", 0, A4000), dev("a", 1, H200)),
        candidates([GpuType.NVIDIA_H200, GpuType.NVIDIA_RTX_A4000]),
        expect=("a", (1,)),
        expect_candidate=H200,
    ),
    # a pool expands in the seed's order: AMPERE_80 is A100 80GB PCIe, then A100-SXM4-80GB
    "pool-seed-order": Case(
        (dev("a", 0, A100_SXM), dev("a", 1, A100_PCIE)),
        candidates(GpuGroup.AMPERE_80),
        expect=("a", (1,)),
        expect_candidate=A100_PCIE,
    ),
    "pool-second-model-when-first-held": Case(
        (dev("a", 0, A100_SXM), dev("a", 1, A100_PCIE)),
        candidates(GpuGroup.AMPERE_80),
        {("a", 1): held("x")},
        expect=("a", (0,)),
        expect_candidate=A100_SXM,
    ),
    "pool-model-on-second-node": Case(
        (dev("a", 0, A40), dev("b", 0, A100_SXM)),
        candidates(GpuGroup.AMPERE_80),
        expect=("b", (0,)),
        expect_candidate=A100_SXM,
    ),
    # the ADA_48_PRO pool holds L40S, which has no GpuType member
    "pool-model-without-member": Case(
        (dev("a", 0, L40S),), candidates(GpuGroup.ADA_48_PRO), expect=("a", (0,)), expect_candidate=L40S
    ),
    # ANY takes the first free device in fleet order, recognised or not
    "any-first-in-fleet-order-unrecognised": Case(
        (dev("a", 0, UNKNOWN), dev("a", 1, H200)), (ANY_GPU,), expect=("a", (0,)), expect_candidate=ANY_GPU
    ),
    "any-skips-held": Case(
        (dev("a", 0, UNKNOWN), dev("a", 1, H200)),
        (ANY_GPU,),
        {("a", 0): held("x")},
        expect=("a", (1,)),
        expect_candidate=ANY_GPU,
    ),
    "any-across-nodes-fleet-order": Case(
        (dev("a", 0, H200), dev("b", 0, A4000)),
        (ANY_GPU,),
        {("a", 0): held("x")},
        expect=("b", (0,)),
        expect_candidate=ANY_GPU,
    ),
    "fallback-to-any-after-specific": Case(
        (dev("a", 0, H200), dev("a", 1, UNKNOWN)),
        candidates([GpuType.NVIDIA_B200, GpuGroup.ANY]),
        expect=("a", (0,)),
        expect_candidate=ANY_GPU,
    ),
    # gpu_count: that many free devices of one model on one node
    "count2-one-node": Case(
        (dev("a", 0, H200), dev("b", 0, H200), dev("b", 1, H200)),
        (H200,),
        gpu_count=2,
        expect=("b", (0, 1)),
        expect_candidate=H200,
    ),
    "count2-skips-node-with-one-free": Case(
        (dev("a", 0, H200), dev("a", 1, H200), dev("b", 0, H200), dev("b", 1, H200)),
        (H200,),
        {("a", 0): held("x")},
        gpu_count=2,
        expect=("b", (0, 1)),
        expect_candidate=H200,
    ),
    "count2-takes-the-free-pair-of-three": Case(
        (dev("a", 0, H200), dev("a", 1, H200), dev("a", 2, H200)),
        (H200,),
        {("a", 1): held("x")},
        gpu_count=2,
        expect=("a", (0, 2)),
        expect_candidate=H200,
    ),
    # ANY with gpu_count=2 never mixes models: the two A100s, not the H200 next to one of them
    "any-count2-one-model": Case(
        (dev("a", 0, H200), dev("a", 1, A100_PCIE), dev("a", 2, A100_PCIE)),
        (ANY_GPU,),
        gpu_count=2,
        expect=("a", (1, 2)),
        expect_candidate=ANY_GPU,
    ),
    "any-count2-unrecognised-pair": Case(
        (dev("a", 0, H200), dev("a", 1, UNKNOWN), dev("a", 2, UNKNOWN)),
        (ANY_GPU,),
        gpu_count=2,
        expect=("a", (1, 2)),
        expect_candidate=ANY_GPU,
    ),
    "count4-seed-multi-gpu": Case(
        tuple(dev("a", i, A100_SXM) for i in range(4)) + tuple(dev("b", i, A100_PCIE) for i in range(4)),
        candidates(GpuGroup.AMPERE_80),
        gpu_count=4,
        expect=("b", (0, 1, 2, 3)),
        expect_candidate=A100_PCIE,
    ),
}


@pytest.mark.parametrize("case", FIT_CASES.values(), ids=FIT_CASES.keys())
def test_place_fits(case: Case) -> None:
    result = run(case)

    assert isinstance(result, Fit), result
    assert case.expect is not None
    node, indexes = case.expect
    assert (result.node, tuple(d.index for d in result.devices)) == (node, indexes)
    assert all(d.node == node for d in result.devices)
    assert result.candidate is case.expect_candidate
    assert result.reclaim == ()


def test_declared_order_follows_the_h200_as_it_is_held_and_freed() -> None:
    devices = ONE_NODE
    # Given the H200 is free, it wins
    first = placed(H200_THEN_A80, 1, devices)
    # When another endpoint holds it, the A100 is taken
    second = placed(H200_THEN_A80, 1, devices, {("a", 1): held("llm")})
    # Then, once it is freed, the H200 wins again
    third = placed(H200_THEN_A80, 1, devices, {})

    assert isinstance(first, Fit) and isinstance(second, Fit) and isinstance(third, Fit)
    assert [f.devices[0].model for f in (first, second, third)] == [H200, A100_PCIE, H200]


def test_candidates_keep_the_declared_order() -> None:
    assert H200_THEN_A80 == (H200, A100_PCIE, A100_SXM)
    assert candidates([GpuType.NVIDIA_RTX_A4000, GpuType.NVIDIA_H200]) == (A4000, H200)


def test_device_with_an_equal_model_copy_matches() -> None:
    # Devices reported by another node arrive pickled: their model is equal to the catalog's, not the same object.
    copy = pickle.loads(pickle.dumps(H200))
    assert copy == H200
    device = Device("b", 0, copy.name, copy, copy.vram_gb * 1024, simulated=True)

    result = placed((H200,), 1, (device,))

    assert isinstance(result, Fit)
    assert result.devices == (device,)


# --- no fit: one reason per candidate, in declared order ---------------------------------------------------------


@dataclass(frozen=True)
class NoFitCase:
    devices: tuple[Device, ...]
    cands: tuple[Candidate, ...]
    holders: dict[tuple[str, int], Holder]
    gpu_count: int
    #: (candidate label, code, holders, a phrase the detail contains), one per candidate
    reasons: tuple[tuple[str, Code, tuple[str, ...], str], ...]
    never: bool


NO_FIT_CASES = {
    "empty-fleet": NoFitCase((), (H200,), {}, 1, (("NVIDIA H200", Code.NOT_IN_FLEET, (), "no node has"),), True),
    "model-missing": NoFitCase(
        (dev("a", 0, A40),),
        candidates(GpuGroup.AMPERE_80),
        {},
        1,
        (
            ("NVIDIA A100 80GB PCIe", Code.NOT_IN_FLEET, (), "no node has NVIDIA A100 80GB PCIe"),
            ("NVIDIA A100-SXM4-80GB", Code.NOT_IN_FLEET, (), "no node has NVIDIA A100-SXM4-80GB"),
        ),
        True,
    ),
    # two nodes with one A100 each can never host a 2-GPU worker
    "count2-split-across-nodes": NoFitCase(
        (dev("a", 0, A100_PCIE), dev("b", 0, A100_PCIE)),
        (A100_PCIE,),
        {},
        2,
        (("NVIDIA A100 80GB PCIe", Code.NOT_IN_FLEET, (), "most on one node is 1"),),
        True,
    ),
    "count2-one-of-two-busy": NoFitCase(
        (dev("a", 0, A100_PCIE), dev("a", 1, A100_PCIE)),
        (A100_PCIE,),
        {("a", 0): held("sdxl")},
        2,
        (("NVIDIA A100 80GB PCIe", Code.BUSY, ("sdxl",), "sdxl"),),
        False,
    ),
    "any-count2-does-not-mix-models": NoFitCase(
        (dev("a", 0, H200), dev("a", 1, A100_PCIE), dev("a", 2, UNKNOWN)),
        (ANY_GPU,),
        {},
        2,
        (("ANY", Code.NOT_IN_FLEET, (), "most on one node is 1"),),
        True,
    ),
    "per-candidate-in-declared-order": NoFitCase(
        (dev("a", 0, A100_PCIE), dev("a", 1, H200), dev("b", 0, A100_PCIE)),
        (H200, A100_PCIE, B200),
        {("a", 1): held("llm"), ("a", 0): held("sdxl"), ("b", 0): held("chat")},
        1,
        (
            ("NVIDIA H200", Code.BUSY, ("llm",), "llm"),
            ("NVIDIA A100 80GB PCIe", Code.BUSY, ("chat", "sdxl"), "held by"),
            ("NVIDIA B200", Code.NOT_IN_FLEET, (), "no node has NVIDIA B200"),
        ),
        False,
    ),
    "any-busy-names-every-holder": NoFitCase(
        (dev("a", 0, H200), dev("a", 1, UNKNOWN)),
        (ANY_GPU,),
        {("a", 0): held("llm"), ("a", 1): held("sdxl")},
        1,
        (("ANY", Code.BUSY, ("llm", "sdxl"), "held by"),),
        False,
    ),
    # the same endpoint holding several devices is named once
    "holders-deduplicated": NoFitCase(
        (dev("a", 0, H200), dev("a", 1, H200)),
        (H200,),
        {("a", 0): held("llm", worker="w1"), ("a", 1): held("llm", worker="w2")},
        1,
        (("NVIDIA H200", Code.BUSY, ("llm",), "llm"),),
        False,
    ),
    # non-yieldable holders are never reclaimed
    "non-yieldable-holder-is-busy": NoFitCase(
        (dev("a", 0, H200),),
        (H200,),
        {("a", 0): held("llm")},
        1,
        (("NVIDIA H200", Code.BUSY, ("llm",), "llm"),),
        False,
    ),
    # one yieldable and one non-yieldable holder: a 2-GPU worker still cannot fit
    "count2-half-yieldable-is-busy": NoFitCase(
        (dev("a", 0, H200), dev("a", 1, H200)),
        (H200,),
        {("a", 0): held("idle"), ("a", 1): held("llm")},
        2,
        (("NVIDIA H200", Code.BUSY, ("idle", "llm"), "held by"),),
        False,
    ),
}


@pytest.mark.parametrize("case", NO_FIT_CASES.values(), ids=NO_FIT_CASES.keys())
def test_place_no_fit_reasons(case: NoFitCase) -> None:
    result = placed(case.cands, case.gpu_count, case.devices, case.holders)

    assert isinstance(result, NoFit), result
    assert [(r.candidate, r.code, r.holders) for r in result.reasons] == [
        (label, code, holders) for label, code, holders, _ in case.reasons
    ]
    for reason, (_, _, _, phrase) in zip(result.reasons, case.reasons, strict=True):
        assert phrase in reason.detail, (reason.detail, phrase)
    assert result.never is case.never


def test_busy_detail_counts_free_devices_on_one_node() -> None:
    # Given two nodes with two H200s each, one of each held
    devices = (dev("a", 0, H200), dev("a", 1, H200), dev("b", 0, H200), dev("b", 1, H200))
    holders = {("a", 0): held("x"), ("b", 0): held("y")}

    result = placed((H200,), 2, devices, holders)

    # Then the reason says one node has at most one free (two are free in all, but on different nodes)
    assert isinstance(result, NoFit)
    (reason,) = result.reasons
    assert reason.code is Code.BUSY
    assert reason.holders == ("x", "y")
    assert reason.detail.startswith("1 free on one node at most, need 2"), reason.detail


@pytest.mark.parametrize(
    ("codes", "never"),
    [
        ((Code.NOT_IN_FLEET,), True),
        ((Code.NOT_IN_FLEET, Code.NOT_IN_FLEET), True),
        ((Code.BUSY,), False),
        ((Code.NOT_IN_FLEET, Code.BUSY), False),
        ((Code.BUSY, Code.NOT_IN_FLEET), False),
        ((Code.MAX_WORKERS,), False),
        # waiting does not cure a CPU instance larger than every node, nor nodes filtered out
        ((Code.CPU_TOO_LARGE,), True),
        ((Code.NOT_IN_FLEET, Code.DATACENTER), True),
        ((Code.CUDA_VERSION,), True),
        ((Code.CPU_BUSY, Code.DATACENTER), False),
        ((Code.BUSY, Code.CUDA_VERSION), False),
    ],
)
def test_never_only_when_every_reason_is_one_waiting_does_not_cure(codes: tuple[Code, ...], never: bool) -> None:
    assert NoFit(tuple(WaitReason(f"c{i}", code, "d") for i, code in enumerate(codes))).never is never


# --- reclaim: idle workers above their minimum give devices up ----------------------------------------------------


def test_yieldable_holder_is_reclaimed() -> None:
    holder = held("idle")
    devices = (dev("a", 0, H200),)

    result = placed((H200,), 1, devices, {("a", 0): holder})

    assert isinstance(result, Fit)
    assert result.devices == devices
    assert result.reclaim == (holder,)


def test_earlier_candidate_needing_reclaim_beats_later_free_candidate() -> None:
    # Documented policy: declared order beats yielding.
    holder = held("idle")
    devices = (dev("a", 0, H200), dev("a", 1, A100_PCIE))

    result = placed(H200_THEN_A80, 1, devices, {("a", 0): holder})

    assert isinstance(result, Fit)
    assert result.candidate is H200
    assert result.devices == (devices[0],)
    assert result.reclaim == (holder,)


def test_free_device_preferred_over_reclaim_on_the_same_node() -> None:
    devices = (dev("a", 0, H200), dev("a", 1, H200))

    result = placed((H200,), 1, devices, {("a", 0): held("idle")})

    assert isinstance(result, Fit)
    assert result.devices == (devices[1],)
    assert result.reclaim == ()


def test_free_node_preferred_over_reclaim_on_an_earlier_node() -> None:
    devices = (dev("a", 0, H200), dev("b", 0, H200))

    result = placed((H200,), 1, devices, {("a", 0): held("idle")})

    assert isinstance(result, Fit)
    assert (result.node, result.devices, result.reclaim) == ("b", (devices[1],), ())


def test_reclaim_uses_free_devices_first_and_stops_as_few_workers_as_possible() -> None:
    # Given three H200s: one held by an idle worker, one free, one held by another idle worker
    first, second = held("idle-a", worker="w1"), held("idle-b", worker="w2")
    devices = (dev("a", 0, H200), dev("a", 1, H200), dev("a", 2, H200))

    result = placed((H200,), 2, devices, {("a", 0): first, ("a", 2): second})

    # Then the free device comes first, one held device (in fleet order) makes the pair, one worker is stopped
    assert isinstance(result, Fit)
    assert result.devices == (devices[1], devices[0])
    assert result.reclaim == (first,)


def test_reclaim_names_a_worker_holding_two_devices_once() -> None:
    holder = held("idle", worker="w1")
    devices = (dev("a", 0, H200), dev("a", 1, H200))

    result = placed((H200,), 2, devices, {("a", 0): holder, ("a", 1): holder})

    assert isinstance(result, Fit)
    assert result.devices == devices
    assert result.reclaim == (holder,)


def test_yielders_name_the_holders_that_may_yield_and_the_check_has_the_last_word() -> None:
    # Given two H200s held by idle workers of two endpoints
    first, second = held("idle-a", worker="w1"), held("idle-b", worker="w2")
    devices = (dev("a", 0, H200), dev("b", 0, H200))
    index = fleet(devices, {("a", 0): first, ("b", 0): second})
    asked: list[Holder] = []

    def check(holder: Holder) -> bool:
        asked.append(holder)
        return holder is not first

    # Then only the named holders are considered, and the check is asked about them only
    only_second = place((H200,), 1, index, Yielders([second]))
    assert isinstance(only_second, Fit) and only_second.reclaim == (second,)
    checked = place((H200,), 1, index, Yielders([first, second], check))
    assert isinstance(checked, Fit) and checked.reclaim == (second,)
    assert set(asked) == {first, second}
    asked.clear()
    assert place((H200,), 1, index, Yielders([first], check)) == place((H200,), 1, index)
    assert asked == [first]
    # an empty one reclaims nothing, as no predicate at all
    assert place((H200,), 1, index, Yielders([])) == place((H200,), 1, index)


# --- feasible: could it ever fit on this fleet? -------------------------------------------------------------------


def test_feasible_ignores_holders() -> None:
    devices = (dev("a", 0, H200),)
    # every device is held, so placement says busy ...
    assert isinstance(placed((H200,), 1, devices, {("a", 0): held("llm")}), NoFit)
    # ... but the request could fit on this fleet
    assert feasible((H200,), 1, devices) is None


def test_feasible_follows_the_fleet_it_is_given() -> None:
    # feasible keeps the last fleet's index: a new fleet (a list, or one equal tuple) must be read afresh
    one = [dev("a", 0, H200)]
    assert feasible((H200,), 1, one) is None
    one.append(dev("a", 1, H200))
    assert feasible((H200,), 2, one) is None
    assert feasible((H200,), 2, (dev("a", 0, H200),)) is not None
    assert feasible((H200,), 2, tuple(one)) is None


@pytest.mark.parametrize(
    ("cands", "gpu_count", "devices", "ok"),
    [
        ((H200,), 1, (dev("a", 0, H200),), True),
        ((B200,), 1, (dev("a", 0, H200),), False),
        ((B200, H200), 1, (dev("a", 0, H200),), True),
        ((H200,), 2, (dev("a", 0, H200), dev("b", 0, H200)), False),
        ((H200,), 2, (dev("a", 0, H200), dev("a", 1, H200)), True),
        ((ANY_GPU,), 1, (dev("a", 0, UNKNOWN),), True),
        ((ANY_GPU,), 1, (), False),
    ],
)
def test_feasible(cands: tuple[Candidate, ...], gpu_count: int, devices: tuple[Device, ...], ok: bool) -> None:
    result = feasible(cands, gpu_count, devices)

    if ok:
        assert result is None
    else:
        assert isinstance(result, NoFit)
        assert result.never
        assert len(result.reasons) == len(cands)
        assert all(r.code is Code.NOT_IN_FLEET for r in result.reasons)
