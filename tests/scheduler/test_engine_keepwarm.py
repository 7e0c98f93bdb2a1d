"""Keep-warm sized from traffic through the test door (StubBackend + FakeClock): an ``idle_timeout="auto"`` endpoint
with periodic traffic lets its worker go after each job and warms one again before the next arrival; a fixed
``idle_timeout`` keeps its exact meaning beside it, even on a plane whose default is auto; the server's default
reaches only the endpoints that set none; a redeployed endpoint keeps its history; ``explain`` says the window and
why (issue 25, point 2)."""

from __future__ import annotations

import dataclasses

from flashpoint import GpuType
from flashpoint.scheduler.keepwarm import MIN_GAPS
from flashpoint.scheduler.records import WorkerState
from tests.scheduler.door import TARGET, Door, open_door

PERIOD_S = 300.0
COLD_S = 8.0


async def one_job(door: Door, name: str, *, cold_s: float = COLD_S) -> bool:
    """A job arrives and runs for 1 s; returns whether it needed a cold start (a worker started for it)."""
    started = len(door.backend.started)
    job = door.submit(name)
    await door.settle()
    cold = len(door.backend.started) > started
    worker = next(w for w in door.workers(name) if w.live)
    if worker.state is WorkerState.STARTING:
        await door.step(cold_s)  # it takes this long to become ready
    assert await door.pull(worker) == [job.id]
    await door.step(1.0)
    await door.finish(worker, job.id)
    return cold


async def wait(door: Door, name: str, seconds: float) -> None:
    """Turn the clock every second for ``seconds``; a worker that has been starting for ``COLD_S`` comes up (asks
    for work and gets none), as a real one does on its own."""
    for _ in range(round(seconds)):
        await door.step(1.0)
        now = door.clock.monotonic()
        for worker in door.workers(name):
            if worker.state is WorkerState.STARTING and now - worker.started_at >= COLD_S:
                assert await door.pull(worker) == []


async def periodic(door: Door, name: str, jobs: int) -> list[bool]:
    """``jobs`` jobs one ``PERIOD_S`` apart; which needed a cold start."""
    colds = []
    for _ in range(jobs):
        colds.append(await one_job(door, name))
        await wait(door, name, PERIOD_S - (COLD_S + 1.0 if colds[-1] else 1.0))
    return colds


async def test_periodic_traffic_is_prewarmed_and_not_kept_idle_between_arrivals() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    door.endpoint(name="auto", gpu=GpuType.NVIDIA_H200, idle_timeout="auto")
    colds = await periodic(door, "auto", MIN_GAPS + 1)
    # until MIN_GAPS gaps are seen the default 60 s holds: each arrival 5 minutes later finds no worker
    assert colds == [True] * (MIN_GAPS + 1)
    notes = door.plane.explain_endpoint("auto").notes
    assert any("idle_timeout auto: let go after the last job, warm one again" in note for note in notes)

    # from now on: let go right after the job, warmed again ahead of the next arrival, which finds it ready
    colds = await periodic(door, "auto", 4)
    assert colds == [False] * 4
    assert door.plane.endpoint("auto").traffic.cold_start_s() == COLD_S
    assert not await one_job(door, "auto")
    (worker,) = [w for w in door.workers("auto") if w.live]
    await wait(door, "auto", 2.0)  # soon after the job: the worker is let go (the next arrival is minutes away)
    assert not worker.live
    before = len(door.backend.started)
    await wait(door, "auto", PERIOD_S - 3.0 - 30.0)
    assert len(door.backend.started) == before  # no worker kept or started while the next arrival is far off
    await wait(door, "auto", 30.0)
    assert len(door.backend.started) == before + 1  # warmed ahead of it, and ready when it comes
    assert any(w.state is WorkerState.IDLE for w in door.workers("auto"))


async def test_a_fixed_idle_timeout_keeps_its_meaning_on_an_auto_plane() -> None:
    door = await open_door("node-a=NVIDIA_H200:2", idle_timeout_auto=True)
    door.endpoint(name="fixed", gpu=GpuType.NVIDIA_H200, idle_timeout=100)
    await periodic(door, "fixed", MIN_GAPS + 2)  # history that would size an auto window
    assert not any("idle_timeout auto" in note for note in door.plane.explain_endpoint("fixed").notes)
    await one_job(door, "fixed")
    (worker,) = [w for w in door.workers("fixed") if w.live]
    await door.step(99.9)
    assert worker.live
    await door.step(0.1)  # exactly idle_timeout after it went idle
    assert not worker.live


async def test_the_servers_default_reaches_only_endpoints_that_set_no_idle_timeout() -> None:
    door = await open_door("node-a=NVIDIA_H200:2", idle_timeout_auto=True)
    door.endpoint(name="unset", gpu=GpuType.NVIDIA_H200)
    door.endpoint(name="given", gpu=GpuType.NVIDIA_H200, idle_timeout=60)
    assert any("idle_timeout auto:" in note for note in door.plane.explain_endpoint("unset").notes)
    assert not any("idle_timeout auto" in note for note in door.plane.explain_endpoint("given").notes)
    plain = await open_door("node-a=NVIDIA_H200:1")  # the default plane: Flash's fixed 60 s
    plain.endpoint(name="unset", gpu=GpuType.NVIDIA_H200)
    assert not any("idle_timeout auto" in note for note in plain.plane.explain_endpoint("unset").notes)


async def test_a_first_request_ever_gets_the_default_window() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="new", gpu=GpuType.NVIDIA_H200, idle_timeout="auto")
    assert await one_job(door, "new")
    (worker,) = door.workers("new")
    (note,) = [n for n in door.plane.explain_endpoint("new").notes if "idle_timeout auto" in n]
    assert "0 idle gap(s) seen" in note and "the default 60s" in note
    await door.step(59.0)
    assert worker.live
    await door.step(1.0)
    assert not worker.live


async def test_a_redeployed_endpoint_keeps_its_traffic_and_a_fixed_timeout_then_rules() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    spec = door.endpoint(name="r", gpu=GpuType.NVIDIA_H200, idle_timeout="auto")
    await periodic(door, "r", MIN_GAPS + 1)
    gaps = list(door.plane.endpoint("r").traffic.gaps)
    assert len(gaps) == MIN_GAPS
    # the same endpoint, redeployed with the same option: its history stays and sizes the window at once
    door.plane.redeclare(spec, TARGET)
    assert list(door.plane.endpoint("r").traffic.gaps) == gaps
    assert any("warm one again" in n for n in door.plane.explain_endpoint("r").notes)
    # redeployed with a fixed idle_timeout: that rules from now on, exactly
    door.plane.redeclare(dataclasses.replace(spec, idle_timeout_s=30.0, idle_auto=False), TARGET)
    await one_job(door, "r")
    (worker,) = [w for w in door.workers("r") if w.live]
    await door.step(29.9)
    assert worker.live
    await door.step(0.1)
    assert not worker.live


async def test_a_clock_jump_is_one_long_gap_not_a_stuck_worker() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="j", gpu=GpuType.NVIDIA_H200, idle_timeout="auto")
    await periodic(door, "j", MIN_GAPS + 1)
    await one_job(door, "j")
    await door.step(10 * 3600.0)  # the machine slept (or the clock jumped): hours in one turn
    assert not any(w.live for w in door.workers("j"))  # no worker kept or pre-warmed past its window
    assert await one_job(door, "j")  # the next arrival is a cold start, and one long gap more
    assert max(door.plane.endpoint("j").traffic.gaps) >= 10 * 3600.0
