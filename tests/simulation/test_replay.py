"""The replay on small hand-made traces and fleets whose answers are worked out by hand: fill mode's shares and first
refusal, a stream's waits with and without priorities, a timed replay's shape, and the placement checker, alone and
catching a deliberately broken plane."""

from __future__ import annotations

import io
from typing import Any

import pytest

from flashpoint.errors import ConfigError
from flashpoint.gpus import GpuType, candidates
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.simulation.fleets import SimFleet, load_sim_fleet
from flashpoint.simulation.replay import (
    Checker,
    PlacementViolation,
    ReplayOptions,
    Shape,
    replay,
    replay_as_written,
    run_replay,
)
from flashpoint.simulation.traces import Trace, parse_trace

TWO_NODES = "a=NVIDIA_H200:4;b=NVIDIA_H200:4"
H200 = candidates(GpuType.NVIDIA_H200)[0]
B200 = candidates(GpuType.NVIDIA_B200)[0]


def trace(text: str, **options: Any) -> Trace:
    return parse_trace(io.StringIO("arrival_s,duration_s,gpus,candidates,class,app\n" + text), **options)


@pytest.mark.parametrize("policy", ["first", "pack", "spread"])
async def test_fill_mode_reports_the_shares_at_each_checkpoint_and_the_first_refusal(policy: str) -> None:
    # Given 8 GPUs on two nodes of 4 and tasks of 1, 4, 4 and 2 GPUs (any model)
    # When they arrive in order and never leave: the 1 takes a node (both are empty: ties go in fleet order), the
    # first 4 the other whole node, the second 4 finds 3 free on one node (refused, 9 of 8 asked) and the fill stops
    report = await replay(
        load_sim_fleet(TWO_NODES),
        trace("0,,1,,,\n1,,4,,,\n2,,4,,,\n3,,2,,,\n"),
        ReplayOptions(mode="fill", policy=policy),
    )
    # Then at 50% asked (5 of 8) 5 GPUs are allocated and both requests placed; at 80/90/100% (9 asked) 2 of 3
    assert report["tasks"] == 3 and report["placed"] == 2
    assert report["allocated_at"] == {"50": 0.625, "80": 0.625, "90": 0.625, "100": 0.625}
    assert report["placed_at"] == {"50": 1.0, "80": 0.6667, "90": 0.6667, "100": 0.6667}
    assert report["first_refusal_at"] == 1.125
    assert report["checked_starts"] == 2 and report["fractional_as_whole"] == 0


async def test_fill_mode_leaves_out_what_no_node_could_hold_and_checkpoints_not_reached_are_null() -> None:
    report = await replay(
        load_sim_fleet(TWO_NODES), trace("0,,8,,,\n1,,1,B200,,\n2,,2,H200,,\n"), ReplayOptions(mode="fill")
    )
    assert report["left_out"] == {"cpu_only": 0, "fractional": 0, "never_fits": 2}
    assert report["tasks"] == 1 and report["first_refusal_at"] is None
    assert report["allocated_at"] == {"50": None, "80": None, "90": None, "100": None}


STREAM = "0,10,4,,normal,\n1,5,2,,normal,\n2,5,2,,normal,\n3,1,1,,{cls},\n"


async def test_a_stream_waits_as_worked_out_by_hand() -> None:
    # Given one node of 4: A (4 GPUs, 10 s) at 0, B and C (2 GPUs, 5 s) at 1 and 2, D (1 GPU, 1 s) at 3
    fleet = load_sim_fleet("a=NVIDIA_H200:4")
    report = await replay_as_written(fleet, trace(STREAM.format(cls="normal")), ReplayOptions(mode="timed"))
    # Then A runs at once; at 10 B and C take its place (waits 9 and 8), D waits for them to end at 15 (12)
    assert report["waits"] == [0.0, 9.0, 8.0, 12.0]
    assert report["wait_s_by_gpus"]["2"] == {"p50": 9.0, "p99": 9.0, "n": 2}
    # allocation: 4 GPUs over [0, 10), 4 over [10, 15), 1 over [15, 16) of the window [0, 16)
    assert report["gpu_allocation_mean"] == round((40 + 20 + 1) / 16 / 4, 4)
    # stranded: free GPUs while someone waits: none over [0, 15) (nothing free), none after
    assert report["stranded_gpu_fraction_mean"] == 0.0
    assert report["usage_gpu_hours_by_app"] == {"(none)": round(61 / 3600, 3)}


async def test_a_higher_class_is_placed_first_when_devices_free() -> None:
    fleet = load_sim_fleet("a=NVIDIA_H200:4")
    report = await replay_as_written(fleet, trace(STREAM.format(cls="high")), ReplayOptions(mode="timed"))
    # at 10 D (high) goes first, then B; C (older than D, but normal) waits for D to end at 11 (9), its 1 GPU and the
    # one left free stranded over [10, 11); C ends at 16
    assert report["waits"] == [0.0, 9.0, 9.0, 7.0]
    assert report["wait_s_by_class"]["high"] == {"p50": 7.0, "p99": 7.0, "n": 1}
    assert report["stranded_gpu_fraction_mean"] == round(1 * 1 / 16 / 4, 4)


async def test_a_timed_replay_draws_its_arrivals_and_reports_every_figure() -> None:
    fleet = load_sim_fleet(TWO_NODES)
    # two classes, none preemptible (the plane's preemption is tested through the test door; see the next test)
    lines = "".join(
        f"{n},{10 + n},{(1, 2, 4)[n % 3]},,{('high', 'normal')[n % 2]},{'ab'[n % 4 // 2]}\n" for n in range(40)
    )
    options = ReplayOptions(mode="timed", load=0.9, seed=7, arrivals=300)
    report = await replay(fleet, trace(lines), options)
    assert report["tasks"] == 300 and report["placed"] == 300 and report["checked_starts"] >= 300
    assert set(report["wait_s_by_gpus"]) == {"1", "2", "4"}
    assert set(report["wait_s_by_class"]) == {"high", "normal"}
    assert report["wait_s"]["n"] == 200  # the first third is a warm-up
    assert 0 < report["gpu_allocation_mean"] <= 1 and 0 <= report["stranded_gpu_fraction_mean"] <= 1
    assert set(report["usage_gpu_hours_by_app"]) == {"a", "b"}
    again = await replay(fleet, trace(lines), options)
    assert {k: v for k, v in again.items() if k != "wall_s"} == {k: v for k, v in report.items() if k != "wall_s"}


async def test_a_timed_replay_needs_durations() -> None:
    with pytest.raises(ConfigError, match="has none"):
        await replay(load_sim_fleet(TWO_NODES), trace("0,,1,,,\n"), ReplayOptions(mode="timed", arrivals=10))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (ReplayOptions(mode="both"), "--mode"),
        (ReplayOptions(policy="best"), "--policy"),
        (ReplayOptions(load=0), "--load"),
    ],
)
def test_bad_options_are_refused(options: ReplayOptions, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        run_replay(load_sim_fleet(TWO_NODES), trace("0,1,1,,,\n"), options)


def test_the_checker_refuses_what_a_placement_must_never_do() -> None:
    fleet: SimFleet = load_sim_fleet("a=NVIDIA_H200:2;b=NVIDIA_H200:2;c=NVIDIA_B200:2")
    a0, a1, b0, _, c0, _ = fleet.devices
    checker = Checker(fleet.devices)
    two = Shape(2, (H200,), "normal", None)
    checker.start("w1", (a0, a1), two)
    cases = [
        ((b0,), two, "1 device"),
        ((a1, b0), two, "held by worker w1"),
        ((b0, c0), Shape(2, (), "normal", None), "several nodes"),
        ((c0,), Shape(1, (H200,), "normal", None), "not among the request's candidates"),
        ((c0.__class__("z", 0, "x", None, 0, True),), Shape(1, (), "normal", None), "not that device of the fleet"),
    ]
    for devices, shape, message in cases:
        with pytest.raises(PlacementViolation, match=message):
            checker.start("w2", devices, shape)
    checker.exit("w1")
    checker.start("w3", (a1, a0), two)  # free again
    assert checker.held == 2 and checker.checked == 2


async def test_the_checker_catches_a_plane_that_gives_a_device_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # a deliberately broken plane: its fleet index forgets what it holds, so placement hands the same devices out again
    # (the clock and the OS are what tests may fake; this one breaks the engine on purpose to test the checker)
    monkeypatch.setattr(FleetIndex, "hold", lambda self, devices, holder: None)
    with pytest.raises(PlacementViolation, match="held by worker"):
        await replay(load_sim_fleet("a=NVIDIA_H200:4"), trace("0,,2,,,\n1,,2,,,\n"), ReplayOptions(mode="fill"))


async def test_preemption_does_not_loop_when_a_lower_class_waits_beside_the_victim() -> None:
    # A low (preemptible) 2-GPU endpoint and a normal 4-GPU one on two nodes of 4, busy: when the plane preempts the low
    # worker beside two free GPUs for the 4-GPU waiter, the free two are kept for the waiter (decision 0115); before,
    # the low endpoint took them in the same plan, the next plan preempted it again, and the replay never ended
    lines = "".join(
        f"{n},{10 + n},{(1, 2, 4, 8)[n % 4]},,{('high', 'normal', 'low')[n % 3]},{'ab'[n % 2]}\n" for n in range(40)
    )
    options = ReplayOptions(mode="timed", load=0.9, seed=7, arrivals=300)
    report = await replay(load_sim_fleet(TWO_NODES), trace(lines), options)
    assert report["placed"] == report["tasks"] == 300  # it ran through, every placement checked
    assert report["preemptions"] > 0
