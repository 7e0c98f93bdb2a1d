"""The what-if (flashpoint.scheduler.whatif): where each endpoint's workers would go on a described fleet, by tables."""

from __future__ import annotations

from typing import Any

import pytest

from flashpoint import GpuGroup, GpuType
from flashpoint.fleet.inventory import Node
from flashpoint.fleet.simulated import bench_fleet, parse_fleet
from flashpoint.scheduler.whatif import Row, Verdict, what_if
from flashpoint.spec import EndpointSpec, build_spec

#: what the nodes of a fleet with CPU capacity have: 4 vCPUs, 8 GB, CUDA 12.8
HOST = Node("", cpus=4, memory_mb=8 * 1024, cuda="12.8")


def spec(name: str, **options: Any) -> EndpointSpec:
    return build_spec({"name": name, **options})


def rows(fleet: str, *specs: EndpointSpec, host: Node | None = None) -> dict[str, Row]:
    described = parse_fleet(fleet, host=host) if host is not None else parse_fleet(fleet)
    return {row.endpoint: row for row in what_if(specs, described.devices, described.node_facts)}


def where(row: Row) -> list[tuple[str, str, str, tuple[int, ...]]]:
    """Each worker as (phase, model, node, device indices)."""
    return [(w.phase, w.model, w.node, tuple(d.index for d in w.devices)) for w in row.workers]


def codes(row: Row) -> list[tuple[str, str]]:
    return [(r.candidate, r.code.value) for r in row.reasons]


H200, PCIE, L40S = "NVIDIA H200", "NVIDIA A100 80GB PCIe", "NVIDIA L40S"


def test_fallback_order_is_kept_across_nodes() -> None:
    # The H200 is on the second node: declared order beats fleet order, then the fallback fills node a.
    fleet = "a=NVIDIA_A100_80GB_PCIe:2;b=NVIDIA_H200:1"
    ep = spec("ep", gpu=[GpuType.NVIDIA_H200, GpuGroup.AMPERE_80], workers=(0, 4))

    (row,) = rows(fleet, ep).values()

    assert row.verdict is Verdict.RUNS
    assert where(row) == [
        ("first", H200, "b", (0,)),
        ("scale", PCIE, "a", (0,)),
        ("scale", PCIE, "a", (1,)),
    ]
    assert [w.candidate for w in row.workers] == [H200, PCIE, PCIE]
    # a fourth worker finds every candidate taken or absent, in declared order
    assert codes(row) == [(H200, "busy"), (PCIE, "busy"), ("NVIDIA A100-SXM4-80GB", "not_in_fleet")]
    assert row.reasons[0].holders == ("ep",)
    assert [r.candidate for r in row.skipped] == ["NVIDIA A100-SXM4-80GB"]
    assert all(w.simulated for w in row.workers)


@pytest.mark.parametrize(
    ("fleet", "gpu_count", "verdict", "placed", "detail"),
    [
        # four H200 in the fleet, but at most two on one node: a worker of four can never start
        ("a=H200:2;b=H200:2", 4, Verdict.NEVER, [], "no node has 4 x NVIDIA H200 (the most on one node is 2)"),
        # two per worker: one worker per node, never split across them (a's third H200 and nothing on b is not 2);
        # packing puts the first on b, the node it fills exactly, keeping a's three together
        ("a=H200:3;b=H200:2", 2, Verdict.RUNS, [("b", (0, 1)), ("a", (0, 1))], "1 free on one node at most, need 2"),
        # three per worker: only a can ever hold one; b's two free H200 are not enough
        ("a=H200:3;b=H200:2", 3, Verdict.RUNS, [("a", (0, 1, 2))], "2 free on one node at most, need 3; held by ep"),
    ],
)
def test_gpu_count_needs_devices_on_one_node(
    fleet: str, gpu_count: int, verdict: Verdict, placed: list[tuple[str, tuple[int, ...]]], detail: str
) -> None:
    ep = spec("ep", gpu=GpuType.NVIDIA_H200, gpu_count=gpu_count, workers=(0, 3))

    row = rows(fleet, ep)["ep"]

    assert row.verdict is verdict
    assert [(w.node, tuple(d.index for d in w.devices)) for w in row.workers] == placed
    assert any(detail in r.detail for r in row.reasons), row.reasons


def test_a_second_endpoint_waits_busy_not_never_when_the_only_node_big_enough_is_taken() -> None:
    # b has 2 H200 (never enough for 3), a has 3 and "one"'s worker takes them: "two" waits busy, it is not never
    one = spec("one", gpu=GpuType.NVIDIA_H200, gpu_count=3)
    two = spec("two", gpu=GpuType.NVIDIA_H200, gpu_count=3)

    row = rows("a=H200:3;b=H200:2", one, two)["two"]

    assert row.verdict is Verdict.WAITS
    assert [(r.code.value, r.detail, r.holders) for r in row.reasons] == [
        ("busy", "2 free on one node at most, need 3; held by one", ("one",))
    ]


@pytest.mark.parametrize(
    ("options", "verdict", "reasons"),
    [
        ({"gpu": GpuType.NVIDIA_B200}, Verdict.NEVER, [("NVIDIA B200", "not_in_fleet")]),
        (
            {"gpu": [GpuType.NVIDIA_B200, GpuGroup.AMPERE_80]},
            Verdict.NEVER,
            [("NVIDIA B200", "not_in_fleet"), (PCIE, "not_in_fleet"), ("NVIDIA A100-SXM4-80GB", "not_in_fleet")],
        ),
        ({"gpu": GpuGroup.ANY, "gpu_count": 3}, Verdict.NEVER, [("ANY", "not_in_fleet")]),
        # the fleet declares no CPU capacity: a CPU endpoint never fits
        ({"cpu": "cpu3c-1-2"}, Verdict.NEVER, [("cpu3c-1-2", "cpu_too_large")]),
    ],
)
def test_never_verdicts(options: dict[str, Any], verdict: Verdict, reasons: list[tuple[str, str]]) -> None:
    row = rows("a=H200:2;b=L40S:1", spec("ep", **options))["ep"]

    assert row.verdict is verdict
    assert row.workers == ()
    assert codes(row) == reasons
    assert row.to_json()["never"] is (verdict is Verdict.NEVER)


def test_a_full_fleet_makes_later_endpoints_wait_busy_naming_the_holders() -> None:
    first = spec("first", gpu=GpuGroup.ANY, workers=(2, 2))
    second = spec("second", gpu=[GpuType.NVIDIA_H200, "NVIDIA L40S"], workers=(0, 2))

    result = rows("a=H200:1;b=L40S:1", first, second)

    assert where(result["first"]) == [("min", H200, "a", (0,)), ("min", L40S, "b", (0,))]
    assert result["first"].verdict is Verdict.RUNS and result["first"].reasons == ()
    waiting = result["second"]
    assert waiting.verdict is Verdict.WAITS
    assert waiting.workers == ()
    assert codes(waiting) == [(H200, "busy"), (L40S, "busy")]
    assert [r.holders for r in waiting.reasons] == [("first",), ("first",)]
    assert waiting.skipped == ()


def test_minimums_of_every_endpoint_come_before_any_first_worker() -> None:
    # "early" is declared first but has no minimum; "late" has one: late's minimum takes the only H200
    early = spec("early", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    late = spec("late", gpu=GpuType.NVIDIA_H200, workers=(1, 1))

    result = rows("a=H200:1", early, late)

    assert where(result["late"]) == [("min", H200, "a", (0,))]
    assert result["early"].verdict is Verdict.WAITS
    assert codes(result["early"]) == [(H200, "busy")]


def test_an_unmet_minimum_waits_even_with_some_workers() -> None:
    row = rows("a=H200:2", spec("ep", gpu=GpuType.NVIDIA_H200, workers=(3, 4)))["ep"]

    assert row.verdict is Verdict.WAITS
    assert len(row.workers) == 2 and row.needed == 3
    assert codes(row) == [(H200, "busy")]


def test_scaling_up_takes_turns_in_declared_order() -> None:
    a = spec("a", gpu=GpuType.NVIDIA_H200, workers=(0, 5))
    b = spec("b", gpu=GpuType.NVIDIA_H200, workers=(0, 5))
    c = spec("c", gpu=GpuType.NVIDIA_H200, workers=(0, 1))

    result = rows("n=H200:6", a, b, c)

    assert [(w.worker_id, w.phase, w.devices[0].index) for w in result["a"].workers] == [
        ("a-1", "first", 0),
        ("a-2", "scale", 3),
        ("a-3", "scale", 5),
    ]
    assert [(w.phase, w.devices[0].index) for w in result["b"].workers] == [("first", 1), ("scale", 4)]
    assert [(w.phase, w.devices[0].index) for w in result["c"].workers] == [("first", 2)]
    # c reached its maximum: nothing is wrong with it, so no reasons
    assert result["c"].verdict is Verdict.RUNS and result["c"].reasons == ()
    assert [r.detail for r in result["b"].reasons] == ["all held by a, b, c"]


def test_rows_keep_the_apps_order_and_json_shape() -> None:
    specs = [spec("z", cpu="cpu3c-1-2"), spec("y", gpu=GpuType.NVIDIA_B200), spec("x", gpu=GpuType.NVIDIA_H200)]

    result = what_if(specs, parse_fleet("n=H200:1").devices)

    assert [r.endpoint for r in result] == ["z", "y", "x"]
    assert result[0].verdict is Verdict.NEVER  # nodes nobody described have no CPU capacity
    assert result[2].to_json() == {
        "endpoint": "x",
        "gpu": "NVIDIA H200",
        "gpuCount": 1,
        "workersMin": 0,
        "workersMax": 1,
        "verdict": "runs",
        "never": False,
        "placed": 1,
        "workers": [
            {
                "workerId": "x-1",
                "phase": "first",
                "candidate": "NVIDIA H200",
                "gpuModel": "NVIDIA H200",
                "node": "n",
                "deviceIds": [0],
                "simulated": True,
                "cpu": None,
            }
        ],
        "reasons": [],
        "skipped": [],
        "notes": [],
    }


def test_an_empty_fleet_never_fits_a_gpu_endpoint() -> None:
    (row,) = what_if([spec("ep", gpu=GpuGroup.ANY)], [])

    assert row.verdict is Verdict.NEVER
    assert codes(row) == [("ANY", "not_in_fleet")]


def test_on_the_benchmark_fleet() -> None:
    devices = bench_fleet()
    specs = [
        spec("any", gpu=GpuGroup.ANY, workers=(0, 9)),
        spec("h200x8", gpu=GpuType.NVIDIA_H200, gpu_count=8, workers=(1, 2)),
        spec("h200x9", gpu=GpuType.NVIDIA_H200, gpu_count=9),
    ]

    result = {row.endpoint: row for row in what_if(specs, devices)}

    # ANY takes the first free devices in fleet order: node 0's eight, then node 1's first
    assert [(w.node, w.devices[0].index) for w in result["any"].workers][-2:] == [("bench-0000", 7), ("bench-0001", 0)]
    # the H200s are every 22nd node, starting with the 19th (the catalog's order)
    assert [w.node for w in result["h200x8"].workers] == ["bench-0018", "bench-0040"]
    assert result["h200x9"].verdict is Verdict.NEVER
    assert "the most on one node is 8" in result["h200x9"].reasons[0].detail


# --- CPU endpoints and node filters ---------------------------------------------------------------------------------


def test_cpu_workers_take_vcpus_and_memory_until_none_fit() -> None:
    # Given nodes of 4 vCPUs and 8 GB, an endpoint of 2-vCPU workers and one of 4-vCPU workers
    small = spec("small", cpu="cpu3c-2-4", workers=(0, 3))
    large = spec("large", cpu=["cpu3c-8-16", "cpu3c-4-8"], workers=(0, 2))

    result = rows("a=H200:1;b=H200:1", small, large, host=HOST)

    # small takes a's CPUs (first worker), large's first falls back to cpu3c-4-8 on b, small's second goes nowhere
    assert [(w.phase, w.candidate, w.node, w.cpu.cores if w.cpu else None) for w in result["small"].workers] == [
        ("first", "cpu3c-2-4", "a", (0, 1)),
        ("scale", "cpu3c-2-4", "a", (2, 3)),
    ]
    assert [(w.candidate, w.node) for w in result["large"].workers] == [("cpu3c-4-8", "b")]
    assert result["large"].verdict is Verdict.RUNS
    assert codes(result["large"]) == [("cpu3c-8-16", "cpu_too_large"), ("cpu3c-4-8", "cpu_busy")]
    assert [r.candidate for r in result["large"].skipped] == ["cpu3c-8-16"]
    assert result["small"].workers[0].to_json()["cpu"] == {"instance": "cpu3c-2-4", "cores": [0, 1], "memoryGb": 4.0}
    assert result["small"].workers[0].to_json()["gpuModel"] is None


def test_a_cpu_instance_larger_than_every_node_is_never() -> None:
    (row,) = rows("a=H200:1", spec("big", cpu="cpu5c-8-16"), host=HOST).values()

    assert row.verdict is Verdict.NEVER
    (reason,) = row.reasons
    assert reason.code.value == "cpu_too_large"
    assert "cpu5c-8-16 needs 8 vCPUs and 16 GB; the largest node has 4 vCPUs and 8 GB" in reason.detail
    assert "FLASHPOINT_CPUS=8 and FLASHPOINT_MEMORY_GB=16" in reason.detail


def test_datacenters_and_cuda_floors_choose_the_nodes() -> None:
    # Given three nodes: a in EU-RO-1 with an old driver, b in EU-RO-1, c in US-KS-2
    fleet = parse_fleet("a=H200:1;b=H200:1;c=H200:1", host=HOST)
    nodes = [
        Node("a", cpus=4, memory_mb=8192, cuda="12.4", labels={"datacenter": "EU-RO-1"}),
        Node("b", cpus=4, memory_mb=8192, cuda="12.8", labels={"datacenter": "EU-RO-1"}),
        Node("c", cpus=4, memory_mb=8192, cuda="12.8", labels={"datacenter": "US-KS-2"}),
    ]
    specs = [
        spec("eu", gpu=GpuType.NVIDIA_H200, datacenter="EU-RO-1", workers=(0, 3)),
        spec("new", gpu=GpuType.NVIDIA_H200, min_cuda_version="12.8", workers=(0, 3)),
        spec("nowhere", gpu=GpuType.NVIDIA_H200, datacenter="US-CA-2"),
    ]

    result = {r.endpoint: r for r in what_if(specs, fleet.devices, nodes)}

    # first workers: eu takes a (its first node), new takes b (a's driver is too old for it); then eu finds nothing
    # more in EU-RO-1, and new takes c
    assert [w.node for w in result["eu"].workers] == ["a"]
    assert [w.node for w in result["new"].workers] == ["b", "c"]
    assert codes(result["eu"]) == [(H200, "busy"), ("datacenter=EU-RO-1", "datacenter")]
    assert result["eu"].reasons[1].detail == "1 node(s) are not in EU-RO-1: US-KS-2 (c)"
    assert codes(result["new"]) == [(H200, "busy"), ("min_cuda_version=12.8", "cuda_version")]
    assert "a has CUDA 12.4 < 12.8" in result["new"].reasons[1].detail
    assert result["nowhere"].verdict is Verdict.NEVER
    assert codes(result["nowhere"]) == [("datacenter=US-CA-2", "datacenter")]
    assert "the fleet's nodes are in: EU-RO-1 (a, b); US-KS-2 (c)" in result["nowhere"].reasons[0].detail


def test_a_datacenter_on_a_fleet_without_datacenter_labels_is_not_applied_and_says_so() -> None:
    (row,) = rows("a=H200:1", spec("eu", gpu=GpuType.NVIDIA_H200, datacenter="EU-RO-1"), host=HOST).values()

    assert row.verdict is Verdict.RUNS
    (note,) = row.notes
    assert note.startswith("datacenter=EU-RO-1 is not applied: no node of this fleet has a datacenter label")
