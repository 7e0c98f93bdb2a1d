"""A node that leaves the fleet and may come back, through the test door (StubBackend + FakeClock), and the pure rule
behind it (``scheduler/departed.py``) as a table: what only a departed node could hold waits for it (``node_away``)
instead of "can never run"; a worker lost with its node is lost with the node's reason, and a worker the backend
lost sight of is described by the backend's words, never as a signal nobody sent."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import Any

import pytest

from flashpoint import DataCenter, Endpoint, GpuType
from flashpoint.backends.base import ExitCallback, Launch, LineCallback, Started
from flashpoint.backends.stub import StubBackend
from flashpoint.clock import FakeClock
from flashpoint.errors import NotReadyError
from flashpoint.explain import Code
from flashpoint.fleet.inventory import Fleet, Node
from flashpoint.fleet.simulated import parse_fleet
from flashpoint.jobs import JobStatus
from flashpoint.scheduler import departed
from flashpoint.scheduler.departed import LEFT, MAX_DEPARTED, Departed, departures, judge, why_lost, with_away
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.placement.fit import NoFit, place
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.supervision import MAX_START_ATTEMPTS
from flashpoint.store.memory import MemoryJobStore
from tests.scheduler.door import TARGET, open_door

RAYLET = "its raylet at 10.0.0.5:40805 stopped answering"
GB = 1024


async def test_a_model_whose_only_node_is_away_waits_for_it_and_runs_when_it_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="flashpoint.plane")
    # Given a job running on the fleet's only H200 (node-a)
    door = await open_door("node-a=NVIDIA_H200:1;node-b=NVIDIA_A100_80GB_PCIe:1")
    door.endpoint(name="h200", gpu=GpuType.NVIDIA_H200)
    job = door.submit("h200")
    await door.settle()
    worker = door.worker("h200")
    await door.pull(worker)

    # When node-a goes away (its backend says why)
    door.backend.change_fleet(parse_fleet("node-b=NVIDIA_A100_80GB_PCIe:1").devices, away=[("node-a", RAYLET)])
    await door.settle()

    # Then the job waits for the node, and nothing says it can never run
    assert job.status is JobStatus.IN_QUEUE and job.retries == 1
    explanation = door.plane.explain_job(job.id)
    assert not explanation.never
    assert [r.code for r in explanation.reasons] == [Code.NODE_AWAY]
    (reason,) = explanation.reasons
    assert reason.candidate == "NVIDIA H200"
    assert reason.detail.startswith("node node-a (1 x NVIDIA H200) away since ") and reason.detail.endswith(RAYLET)
    assert explanation.summary == f"waiting for its node to return: {reason.detail}"
    assert "can never" not in caplog.text
    assert f"endpoint 'h200': NVIDIA H200 waits for its node to return: {reason.detail}" in caplog.text
    # the worker was lost with its node's reason, which the job's retry names
    assert f"worker {worker.id} of h200 is lost: node node-a is away ({RAYLET})" in caplog.text
    assert f"worker {worker.id} was lost (node node-a is away ({RAYLET})) while running job {job.id}" in caplog.text
    assert door.plane.endpoint("h200").start_failures == 0

    # When node-a is back, the job runs there
    door.backend.change_fleet(parse_fleet("node-a=NVIDIA_H200:1;node-b=NVIDIA_A100_80GB_PCIe:1").devices)
    await door.settle()
    assert door.plane.registry.departed == {}
    again = door.worker("h200")
    assert again.placement().node == "node-a"
    assert await door.pull(again) == [job.id]
    assert door.plane.explain_endpoint("h200").summary.startswith("nothing queued")


async def test_a_fallback_endpoint_names_the_away_model_beside_the_busy_one() -> None:
    # Given an endpoint that prefers the H200 and falls back to the A100, whose A100 a job of another endpoint holds
    door = await open_door("node-a=NVIDIA_H200:1;node-b=NVIDIA_A100_80GB_PCIe:1")
    door.endpoint(name="other", gpu=GpuType.NVIDIA_A100_80GB_PCIe)
    door.endpoint(name="either", gpu=[GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe])
    door.submit("other")
    await door.settle()
    await door.pull(door.worker("other"))
    # When the H200's node is away
    door.backend.change_fleet(parse_fleet("node-b=NVIDIA_A100_80GB_PCIe:1").devices, away=[("node-a", RAYLET)])
    job = door.submit("either")
    await door.settle()

    # Then its job waits for the A100 or the H200's node, and can run
    explanation = door.plane.explain_job(job.id)
    assert not explanation.never
    assert [(r.candidate, r.code) for r in explanation.reasons] == [
        ("NVIDIA H200", Code.NODE_AWAY),
        ("NVIDIA A100 80GB PCIe", Code.BUSY),
    ]
    assert explanation.summary == "waiting: busy; node_away"


async def test_a_model_no_node_ever_had_is_still_never() -> None:
    door = await open_door("node-a=NVIDIA_H200:1;node-b=NVIDIA_A100_80GB_PCIe:1")
    door.backend.change_fleet(parse_fleet("node-b=NVIDIA_A100_80GB_PCIe:1").devices, away=[("node-a", RAYLET)])
    door.endpoint(name="b200", gpu=GpuType.NVIDIA_B200)
    explanation = door.plane.explain_endpoint("b200")
    assert explanation.never and [r.code for r in explanation.reasons] == [Code.NOT_IN_FLEET]


async def test_a_worker_the_backend_lost_sight_of_is_described_by_its_words_and_is_no_failed_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="flashpoint.plane")
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    job = door.submit("e")
    await door.settle()
    for _ in range(MAX_START_ATTEMPTS + 1):  # more losses than failed starts allowed: the job still waits
        starting = door.worker("e")
        door.backend.exit(starting.id, -1, cause="its Ray actor died: the actor was killed by ray.kill")
        await door.step(10)
    assert job.status is JobStatus.IN_QUEUE
    assert door.plane.endpoint("e").start_failures == 0
    assert "ended before taking a job (its Ray actor died: the actor was killed by ray.kill)" in caplog.text
    assert "SIGHUP" not in caplog.text

    worker = door.worker("e")
    await door.pull(worker)
    door.backend.exit(worker.id, -1, cause="its Ray actor died: its node died")
    await door.settle()
    assert f"worker {worker.id} of e ended unexpectedly (its Ray actor died: its node died)" in caplog.text
    assert f"worker {worker.id} ended (its Ray actor died: its node died) while running job {job.id}" in caplog.text
    assert "SIGHUP" not in caplog.text


async def test_an_exit_without_words_is_still_described_by_its_signal(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="flashpoint.plane")
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    door.submit("e")
    await door.settle()
    door.backend.exit(door.worker("e").id, -signal.SIGKILL)
    await door.settle()
    assert "ended before taking a job (killed by SIGKILL)" in caplog.text


class _StartLostWithItsNode(StubBackend):
    """A start that waits for the test, then finds its node gone (as a Ray actor's start does when its raylet died)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> Started:
        self.entered.set()
        await self.gate.wait()
        raise NotReadyError(f"worker {launch.worker_id}: its Ray node node-a is away ({RAYLET})")


async def test_a_start_lost_with_its_node_sets_nothing_aside_and_says_no_more_than_happened(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="flashpoint.plane")
    backend = _StartLostWithItsNode(parse_fleet("node-a=NVIDIA_H200:1;node-b=NVIDIA_A100_80GB_PCIe:1").devices)
    plane = ControlPlane(MemoryJobStore(), backend, worker_secret="door", clock=FakeClock())
    await plane.start(ticking=False)
    plane.register(Endpoint(name="e", gpu=GpuType.NVIDIA_H200).spec, TARGET)
    plane.submit("e", {})
    plane.reconcile()
    await asyncio.wait_for(backend.entered.wait(), 10)  # the start is in flight
    backend.change_fleet(parse_fleet("node-b=NVIDIA_A100_80GB_PCIe:1").devices, away=[("node-a", RAYLET)])
    backend.gate.set()
    await plane.settled()

    assert f"its Ray node node-a is away ({RAYLET})" in caplog.text
    assert "passing those devices over" not in caplog.text
    assert plane.endpoint("e").start_failures == 0
    assert [row["endpoint"] for row in plane.fleet_view()] == [None]  # the A100 is free, nothing set aside
    await plane.close()


# ---------------------------------------------------------------------------------------------------------------------
# the rule, as a table


def _node(name: str, cpus: int = 4, memory_gb: int = 16, **facts: object) -> Node:
    return Node(name, cpus=cpus, memory_mb=memory_gb * GB, cuda="12.8", **facts)  # type: ignore[arg-type]


def _gone(fleet: str, node: Node | None = None, why: str = RAYLET) -> Departed:
    devices = parse_fleet(fleet).devices
    name = devices[0].node if devices else (node.name if node else "")
    return Departed(node or _node(name), devices, 1_800_000_000.0, why)


EU = {"datacenter": "EU-RO-1"}


@pytest.mark.parametrize(
    ("present", "gone", "options", "never", "away"),
    [
        # the model is here: nothing to wait for
        ("b=NVIDIA_H200:1", [_gone("a=NVIDIA_H200:1")], {"gpu": GpuType.NVIDIA_H200}, False, []),
        # only the departed node had it: waiting for it, not never
        ("b=NVIDIA_A100_80GB_PCIe:1", [_gone("a=NVIDIA_H200:1")], {"gpu": GpuType.NVIDIA_H200}, False, ["a"]),
        # no node ever had it: never
        ("b=NVIDIA_A100_80GB_PCIe:1", [_gone("a=NVIDIA_H200:1")], {"gpu": GpuType.NVIDIA_B200}, True, []),
        # nothing departed: never, as before
        ("b=NVIDIA_A100_80GB_PCIe:1", [], {"gpu": GpuType.NVIDIA_H200}, True, []),
        # the departed node had too few of it on one node: never
        (
            "b=NVIDIA_A100_80GB_PCIe:1",
            [_gone("a=NVIDIA_H200:1")],
            {"gpu": GpuType.NVIDIA_H200, "gpu_count": 2},
            True,
            [],
        ),
        # a fallback: the away candidate is named; the endpoint itself can run
        (
            "b=NVIDIA_A100_80GB_PCIe:1",
            [_gone("a=NVIDIA_H200:1")],
            {"gpu": [GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe]},
            False,
            ["a"],
        ),
        # two departed nodes could hold it: both are named
        (
            "b=NVIDIA_A100_80GB_PCIe:1",
            [_gone("a=NVIDIA_H200:1"), _gone("c=NVIDIA_H200:2")],
            {"gpu": GpuType.NVIDIA_H200},
            False,
            ["a", "c"],
        ),
        # node filters apply to departed nodes too: its datacenter
        (
            "b=NVIDIA_A100_80GB_PCIe:1",
            [_gone("a=NVIDIA_H200:1", _node("a", labels=EU))],
            {"gpu": GpuType.NVIDIA_H200, "datacenter": DataCenter.EU_RO_1},
            False,
            ["a"],
        ),
        (
            "b=NVIDIA_A100_80GB_PCIe:1",
            [_gone("a=NVIDIA_H200:1", _node("a", labels={"datacenter": "US-KS-2"}))],
            {"gpu": GpuType.NVIDIA_H200, "datacenter": DataCenter.EU_RO_1},
            True,
            [],
        ),
        # a CPU instance only a departed node was large enough for
        ("", [_gone("", _node("big", cpus=8, memory_gb=32))], {"cpu": "cpu3c-8-16"}, False, ["big"]),
        ("", [_gone("", _node("mid", cpus=8, memory_gb=16))], {"cpu": "cpu3g-8-32"}, True, []),
    ],
)
def test_what_only_a_departed_node_could_hold_waits_for_it(
    present: str, gone: list[Departed], options: dict[str, object], never: bool, away: list[str]
) -> None:
    spec = Endpoint(name="e", **options).spec  # type: ignore[arg-type]
    fleet = parse_fleet(present) if present else None
    nodes = [_node("small", cpus=2, memory_gb=4)] if fleet is None else [_node(d.node) for d in fleet.devices]
    index = FleetIndex(fleet.devices if fleet else (), nodes)
    verdict, reasons = judge(spec, index, {g.node.name: g for g in gone})
    assert (verdict is not None) is never
    assert all(r.code is Code.NODE_AWAY for r in reasons.values())
    named = sorted({g.node.name for g in gone for r in reasons.values() if f"node {g.node.name} (" in r.detail})
    assert named == away


def test_never_reasons_of_an_away_candidate_become_node_away_and_the_others_stay() -> None:
    spec = Endpoint(name="e", gpu=[GpuType.NVIDIA_H200, GpuType.NVIDIA_B200]).spec
    index = FleetIndex(parse_fleet("b=NVIDIA_A100_80GB_PCIe:1").devices)
    never, away = judge(spec, index, {"a": _gone("a=NVIDIA_H200:1")})
    assert never is None and list(away) == ["NVIDIA H200"]
    result = place(spec.candidates, 1, index)
    assert isinstance(result, NoFit)
    rewritten = with_away(result.reasons, away)
    assert [(r.candidate, r.code) for r in rewritten] == [
        ("NVIDIA H200", Code.NODE_AWAY),
        ("NVIDIA B200", Code.NOT_IN_FLEET),
    ]


def test_departures_remember_who_left_why_and_when_and_forget_who_is_back() -> None:
    before = parse_fleet("a=NVIDIA_H200:1;b=NVIDIA_A100_80GB_PCIe:1;c=NVIDIA_L4:1").devices
    nodes = [_node("a"), _node("b"), _node("c")]
    after = Fleet.of([d for d in before if d.node == "b"], [_node("b")], away=[("a", RAYLET)])
    found = departures({}, before, nodes, after, now=100.0)
    assert list(found) == ["a", "c"]
    assert found["a"].why == RAYLET and found["c"].why == LEFT and found["a"].since == 100.0
    assert found["a"].devices == tuple(d for d in before if d.node == "a")
    # later: a is back, c is still away (and keeps when it left)
    back = Fleet.of([d for d in before if d.node in "ab"], [_node("a"), _node("b")])
    found = departures(found, after.devices, after.nodes, back, now=200.0)
    assert list(found) == ["c"] and found["c"].since == 100.0


def test_departures_are_bounded_oldest_forgotten_first() -> None:
    many = [_node(f"n{i}") for i in range(MAX_DEPARTED + 5)]
    found = departures({}, (), many, Fleet.of(), now=1.0)
    assert len(found) == MAX_DEPARTED and next(iter(found)) == "n5"


@pytest.mark.parametrize(
    ("nodes", "away", "text"),
    [
        (["a"], [("a", RAYLET)], f"node a is away ({RAYLET})"),
        (["a"], [], "node a left the fleet"),
        (["a", "b"], [("b", "Ray declared it dead")], "node a left the fleet; node b is away (Ray declared it dead)"),
    ],
)
def test_why_a_worker_was_lost_with_its_node(nodes: list[str], away: list[tuple[str, str]], text: str) -> None:
    assert why_lost(nodes, away) == text


def test_a_departed_node_describes_itself_with_its_local_time() -> None:
    gone = _gone("a=NVIDIA_H200:2")
    at = time.strftime("%H:%M:%S", time.localtime(gone.since))
    assert gone.describe() == f"node a (2 x NVIDIA H200) away since {at}: {RAYLET}"
    assert departed.Departed(_node("cpu", cpus=8), (), gone.since, LEFT).describe().startswith("node cpu (8 vCPUs)")
