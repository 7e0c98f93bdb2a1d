"""The fleet index: its hold/release/replace rules, and placement on it against the scanning reference.

The property tests build random fleets (catalog models, unrecognised and coarse devices, 1-8 per node and model,
in a shuffled fleet order), random holders (some yieldable) and random requests, and compare ``place`` on the
index with ``reference_place`` on the same snapshot: the whole Fit or NoFit, reasons included. The second one
applies random hold/release/replace operations to one index, so the counts it maintains are what is checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from flashpoint.fleet.inventory import Device, Holder
from flashpoint.gpus import MODELS, Candidate, GpuGroup, GPUModel, GpuType, candidates, model_of
from flashpoint.scheduler.placement.fit import Fit, NoFit, Yielders, place
from flashpoint.scheduler.placement.index import FleetIndex
from tests.scheduler.reference_placement import reference_place

H200 = model_of(GpuType.NVIDIA_H200)
A40 = model_of(GpuType.NVIDIA_A40)
SET_ASIDE = Holder("", "(set aside)")


def dev(node: str, index: int, model: GPUModel) -> Device:
    return Device(node, index, model.name, model, model.vram_gb * 1024, simulated=True)


# --- hold, release, replace ----------------------------------------------------------------------------------------


def test_hold_and_release() -> None:
    devices = (dev("a", 0, H200), dev("a", 1, H200))
    index = FleetIndex(devices)
    holder = Holder("w1", "llm")

    index.hold(devices[:1], holder)

    assert index.holder(devices[0]) == holder and not index.is_free(devices[0])
    assert index.holder(devices[1]) is None and index.is_free(devices[1])
    assert index.holders() == {("a", 0): holder}
    assert isinstance(place((H200,), 2, index), NoFit)
    index.verify()
    index.release(devices)
    index.verify()
    assert index.holders() == {} and all(index.is_free(d) for d in devices)
    assert isinstance(place((H200,), 2, index), Fit)


def test_a_device_is_never_handed_out_twice() -> None:
    devices = (dev("a", 0, H200), dev("a", 1, H200), dev("a", 2, H200))
    index = FleetIndex(devices)
    index.hold(devices[:1], Holder("w1", "llm"))

    with pytest.raises(ValueError, match="already held by worker w1 of llm"):
        index.hold(devices[:2], Holder("w2", "chat"))
    with pytest.raises(ValueError, match="already held"):
        index.hold((devices[2], devices[2]), Holder("w2", "chat"))
    with pytest.raises(ValueError, match="not in the fleet"):
        index.hold((devices[1], dev("b", 0, H200)), Holder("w2", "chat"))

    # a refused hold takes nothing
    index.verify()
    assert index.holders() == {("a", 0): Holder("w1", "llm")}
    assert index.is_free(devices[1]) and index.is_free(devices[2])
    fit = place((H200,), 2, index)
    assert isinstance(fit, Fit) and fit.devices == devices[1:]


def test_release_ignores_devices_not_held_or_not_in_the_fleet() -> None:
    devices = (dev("a", 0, H200), dev("a", 1, H200))
    index = FleetIndex(devices)
    index.hold(devices[:1], Holder("w1", "llm"))

    index.release((devices[1], dev("gone", 0, H200)))
    index.release(devices[1:])

    assert index.holders() == {("a", 0): Holder("w1", "llm")}
    assert not index.is_free(dev("gone", 0, H200))
    assert dev("gone", 0, H200) not in index and devices[0] in index


def test_replace_keeps_the_holders_of_devices_still_there_and_drops_the_others() -> None:
    a0, a1, b0 = dev("a", 0, H200), dev("a", 1, H200), dev("b", 0, A40)
    index = FleetIndex((a0, a1, b0))
    index.hold((a0,), Holder("w1", "llm"))
    index.hold((b0,), Holder("w2", "chat"))

    # node b leaves, node c joins
    c0 = dev("c", 0, A40)
    index.replace((a0, a1, c0))

    index.verify()
    assert index.devices == (a0, a1, c0)
    assert index.holders() == {("a", 0): Holder("w1", "llm")}
    busy = place((H200,), 2, index)
    assert isinstance(busy, NoFit) and busy.reasons[0].holders == ("llm",)
    fit = place((A40,), 1, index)
    assert isinstance(fit, Fit) and fit.devices == (c0,)
    # the departed holder's devices are gone from the counts: releasing them changes nothing
    index.release((b0,))
    assert index.holders() == {("a", 0): Holder("w1", "llm")}


def test_holders_is_a_copy() -> None:
    devices = (dev("a", 0, H200),)
    index = FleetIndex(devices)
    index.holders()[("a", 0)] = Holder("w1", "llm")
    assert index.is_free(devices[0]) and isinstance(place((H200,), 1, index), Fit)


def test_a_fleet_listing_a_device_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        FleetIndex((dev("a", 0, H200), dev("a", 0, A40)))


# --- random fleets -------------------------------------------------------------------------------------------------

UNKNOWN = "NVIDIA Tesla T4"
#: the kinds of device a fleet is made of: catalog models, unrecognised ones, coarse ones (Ray's accelerator type
#: only, with or without an inferred model), and an unrecognised device that happens to carry a model's name
KINDS = ("model", "model", "model", "unknown", "coarse", "coarse-model", "named-like-a-model")
COARSE_NAMES = ("A100", "H100", "L40")


def make(node: str, index: int, kind: str, model: GPUModel) -> Device:
    if kind == "model":
        return dev(node, index, model)
    if kind == "unknown":
        return Device(node, index, UNKNOWN, None, 16 * 1024, simulated=True)
    if kind == "coarse":
        return Device(node, index, COARSE_NAMES[index % len(COARSE_NAMES)], None, 0, simulated=False, coarse=True)
    if kind == "coarse-model":
        return Device(node, index, model.name, model, model.vram_gb * 1024, simulated=False, coarse=True)
    return Device(node, index, model.name, None, 16 * 1024, simulated=True)


#: strategies are built once: building one is far dearer than drawing from it
PALETTES = st.lists(st.sampled_from(MODELS), min_size=1, max_size=4, unique=True).map(tuple)
PICK = st.integers(0, 3)
RUNS = st.integers(1, 3)
KIND = st.sampled_from(KINDS)
RUN_LENGTH = st.sampled_from((1, 1, 2, 3, 4, 8))
BOOL = st.booleans()
WORKERS = tuple(Holder(f"w{i}", f"ep{i % 3}") for i in range(6)) + (SET_ASIDE,)
HOLDER = st.sampled_from(WORKERS)
MAY_YIELD = st.frozensets(st.sampled_from(WORKERS[:-1]))
SELECTORS = st.integers(1, 3)
SELECTOR_KIND = st.integers(0, 3)
ANY_MEMBER = st.sampled_from([m for m in GpuType if m is not GpuType.ANY])
GPU_COUNT = st.sampled_from((1, 2, 4, 8))
POSITION = st.integers(0, 1 << 16)
HOLDINGS = st.lists(st.tuples(POSITION, HOLDER), max_size=40)


def node(data: st.DataObject, name: str, palette: tuple[GPUModel, ...]) -> list[Device]:
    """One node: 1-3 runs of 1-8 devices of one kind and model (a catalog model of ``palette``, mostly)."""
    devices: list[Device] = []
    for _ in range(data.draw(RUNS)):
        kind = data.draw(KIND)
        model = palette[data.draw(PICK) % len(palette)]
        for _ in range(data.draw(RUN_LENGTH)):
            devices.append(make(name, len(devices), kind, model))
    return devices


def fleet(data: st.DataObject, palette: tuple[GPUModel, ...], names: Sequence[str]) -> tuple[Device, ...]:
    """Nodes ``names``, sometimes in a shuffled fleet order: nodes interleave, a node's models interleave."""
    devices = [d for name in names for d in node(data, name, palette)]
    if len(devices) > 1 and data.draw(BOOL):
        devices = data.draw(st.permutations(devices))
    return tuple(devices)


def request(data: st.DataObject, palette: tuple[GPUModel, ...]) -> tuple[tuple[Candidate, ...], int]:
    """A candidate list from GpuType members and GpuGroup pools (mostly of the palette), sometimes ending in ANY;
    and a gpu_count of 1, 2, 4 or 8."""
    selectors: list[GpuType | GpuGroup | GPUModel] = []
    for _ in range(data.draw(SELECTORS)):
        model = palette[data.draw(PICK) % len(palette)]
        choice = data.draw(SELECTOR_KIND)
        if choice == 0 and model.member is not None:
            selectors.append(model.member)
        elif choice == 1 and model.pool is not None:
            selectors.append(model.pool)
        elif choice == 2:
            selectors.append(data.draw(ANY_MEMBER))
        else:
            selectors.append(model)
    if data.draw(PICK) == 0:
        selectors.append(GpuGroup.ANY)
    return candidates(selectors), data.draw(GPU_COUNT)


def predicate(may_yield: frozenset[Holder]) -> Callable[[Holder], bool]:
    return lambda holder: holder in may_yield


@dataclass
class World:
    """What the index should hold: kept by the test, independently of the index."""

    devices: tuple[Device, ...]
    holders: dict[tuple[str, int], Holder]


def check(
    world: World,
    index: FleetIndex,
    request: tuple[tuple[Candidate, ...], int],
    may_yield: frozenset[Holder],
    allowed: frozenset[str] | None = None,
) -> None:
    cands, gpu_count = request
    assert index.devices == world.devices
    assert index.holders() == world.holders
    expected_idle = reference_place(cands, gpu_count, world.devices, world.holders)
    assert place(cands, gpu_count, index) == expected_idle
    yieldable = predicate(may_yield)
    expected = reference_place(cands, gpu_count, world.devices, world.holders, yieldable)
    assert place(cands, gpu_count, index, yieldable) == expected
    # fit_reclaim's two walks, by holders and by groups, find the same group whichever it takes
    for candidate in cands:
        key = index._key(candidate)
        if key is None:
            continue
        for among in (None, may_yield):
            for limit in (None, allowed):
                by_holders = index._reclaim_by_holders(key, gpu_count, yieldable, among, limit)
                assert index._reclaim_by_groups(key, gpu_count, yieldable, among, limit) == by_holders
    # the same holders as a Yielders (only their devices are visited), and as a wider set with the predicate
    assert place(cands, gpu_count, index, Yielders(may_yield)) == expected
    assert place(cands, gpu_count, index, Yielders(WORKERS, yieldable)) == expected
    for policy in ("pack", "spread"):
        # the node choice: best fit or most free, against the scanning reference; the candidate stays the one the
        # declared order gives whatever the policy
        chosen = place(cands, gpu_count, index, yieldable, policy=policy)
        assert chosen == reference_place(cands, gpu_count, world.devices, world.holders, yieldable, policy=policy)
        assert isinstance(chosen, NoFit) == isinstance(expected, NoFit)
        if isinstance(chosen, Fit) and isinstance(expected, Fit):
            assert chosen.candidate == expected.candidate
        if allowed is not None:
            assert place(cands, gpu_count, index, yieldable, allowed, policy=policy) == reference_place(
                cands, gpu_count, world.devices, world.holders, yieldable, allowed, policy
            )
    if allowed is not None:
        # an endpoint with node filters: the index's filtered path is the reference on those nodes' devices
        filtered = reference_place(cands, gpu_count, world.devices, world.holders, allowed=allowed)
        assert place(cands, gpu_count, index, allowed=allowed) == filtered
        expected = reference_place(cands, gpu_count, world.devices, world.holders, yieldable, allowed)
        assert place(cands, gpu_count, index, yieldable, allowed) == expected
        assert place(cands, gpu_count, index, Yielders(may_yield), allowed) == expected
        assert not isinstance(expected, Fit) or expected.node in allowed


NAMES = ("a", "b", "c", "d", "e")
ALLOWED = st.none() | st.frozensets(st.sampled_from(NAMES))
NODE_COUNT = st.integers(1, len(NAMES))
OPS = st.sampled_from(("hold", "hold", "hold", "release", "release", "replace"))
STEPS = st.integers(1, 20)
SOME = st.integers(0, 8)


def index_of(devices: tuple[Device, ...], holders: dict[tuple[str, int], Holder]) -> FleetIndex:
    index = FleetIndex(devices)
    by_key = {d.key: d for d in devices}
    for key, holder in holders.items():
        index.hold((by_key[key],), holder)
    return index


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_place_on_a_fresh_index_is_the_reference(data: st.DataObject) -> None:
    palette = data.draw(PALETTES)
    devices = fleet(data, palette, NAMES[: data.draw(NODE_COUNT)])
    holders = {devices[i % len(devices)].key: h for i, h in data.draw(HOLDINGS)}
    may_yield = data.draw(MAY_YIELD)
    index = index_of(devices, holders)
    index.verify()
    for _ in range(4):
        check(World(devices, holders), index, request(data, palette), may_yield, data.draw(ALLOWED))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_place_stays_the_reference_as_devices_are_held_released_and_the_fleet_changes(data: st.DataObject) -> None:
    palette = data.draw(PALETTES)
    names = list(NAMES[: data.draw(NODE_COUNT)])
    world = World(fleet(data, palette, names), {})
    index = FleetIndex(world.devices)
    may_yield = data.draw(MAY_YIELD)
    for step in range(data.draw(STEPS)):
        op = data.draw(OPS)
        picked = (
            [world.devices[data.draw(POSITION) % len(world.devices)] for _ in range(data.draw(SOME))]
            if world.devices
            else []
        )
        if op == "hold" and picked:
            holder = data.draw(HOLDER)
            if any(d.key in world.holders for d in picked) or len({d.key for d in picked}) < len(picked):
                with pytest.raises(ValueError):
                    index.hold(picked, holder)
            else:
                index.hold(picked, holder)
                world.holders.update((d.key, holder) for d in picked)
        elif op == "release":
            index.release(picked)
            for d in picked:
                world.holders.pop(d.key, None)
        elif op == "replace":
            # a node leaves and/or a new one joins; the rest of the fleet may be reordered
            gone = names[data.draw(POSITION) % len(names)]
            kept = [d for d in world.devices if d.node != gone]
            if data.draw(BOOL):
                names.append(f"n{step}")
                kept += node(data, names[-1], palette)
            if len(kept) > 1 and data.draw(BOOL):
                kept = data.draw(st.permutations(kept))
            keys = {d.key for d in kept}
            world = World(tuple(kept), {k: h for k, h in world.holders.items() if k in keys})
            index.replace(world.devices)
        index.verify()
        check(world, index, request(data, palette), may_yield, data.draw(ALLOWED))
    # the maintained index answers as one built from scratch on the same snapshot
    fresh = index_of(world.devices, world.holders)
    yieldable = predicate(may_yield)
    for _ in range(3):
        cands, gpu_count = request(data, palette)
        assert place(cands, gpu_count, index, yieldable) == place(cands, gpu_count, fresh, yieldable)
