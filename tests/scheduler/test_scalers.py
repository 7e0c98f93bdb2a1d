"""flashpoint's scalers (issue 25, point 3): the rules by table (``scalers.wanted``, ``schedule_minimum``, the
signals' windows, what registration refuses), and through the test door (StubBackend + FakeClock): a latency target
adds route workers while the p95 is over it, a concurrency target follows the mean load, a workers schedule raises
and lowers the minimum on its cron times, a user scaler's answer is clamped to ``workers``, its errors contained and
shown; and scale-to-zero stays correct: a request that arrives while the last route worker stops is served."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from flashpoint import GpuType
from flashpoint.errors import InvalidEndpointError
from flashpoint.scaling import Scaling
from flashpoint.scheduler import scalers
from flashpoint.scheduler.records import Worker, WorkerState
from flashpoint.scheduler.scalers import USER_PERIOD_S, check_scaling, schedule_minimum, wanted
from flashpoint.scheduler.signals import LATENCY_WINDOW_S, Signals
from flashpoint.spec import EndpointSpec, build_spec
from tests.scheduler.door import Door, open_door, until


def spec_with(**scaling: Any) -> EndpointSpec:
    return dataclasses.replace(build_spec({"name": "s", "workers": (0, 8)}), scaling=Scaling(**scaling))


@pytest.mark.parametrize(
    ("scaling", "signals", "live", "starting", "demand", "want"),
    [
        ({}, {}, 2, 0, 5, None),  # Flash's scaler_type rules
        # latency: the first worker for any demand; one more while the p95 is over the target and none starts
        ({"target_latency_ms": 200}, {}, 0, 0, 1, 1),
        ({"target_latency_ms": 200}, {}, 0, 0, 0, 0),
        ({"target_latency_ms": 200}, {"p95_s": 0.5}, 2, 0, 3, 3),
        ({"target_latency_ms": 200}, {"p95_s": 0.5}, 2, 1, 3, 2),  # one is starting: wait for it
        ({"target_latency_ms": 200}, {"p95_s": 0.5}, 2, 0, 0, 2),  # no demand now: no more
        ({"target_latency_ms": 200}, {"p95_s": 0.1}, 2, 0, 3, 2),
        # concurrency: ceil(max(now, mean over a minute) / target): up at once, down slowly
        ({"target_concurrency": 4}, {"mean_load": 2.0}, 1, 0, 9, 3),
        ({"target_concurrency": 4}, {"mean_load": 9.0}, 3, 0, 0, 3),
        ({"target_concurrency": 4}, {"mean_load": 0.0}, 3, 0, 0, 0),
        # user: its last answer (clamped later); before one, a worker for demand
        ({"scaler": len}, {"user_want": 5}, 1, 0, 0, 5),
        ({"scaler": len}, {}, 0, 0, 2, 1),
        ({"scaler": len}, {}, 2, 0, 0, 2),
    ],
)
def test_each_scaler_wants(
    scaling: dict[str, Any], signals: dict[str, Any], live: int, starting: int, demand: int, want: int | None
) -> None:
    assert wanted(spec_with(**scaling), Signals(**signals), live=live, starting=starting, demand=demand) == want


def wall(text: str) -> float:
    """Epoch seconds of a UTC time written ISO-style."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


WEEKDAYS = (("0 9 * * 1-5", 2), ("0 18 * * 1-5", 0))


@pytest.mark.parametrize(
    ("when", "minimum"),
    [
        ("2026-12-07T08:59:00", 0),  # Monday morning: Friday 18:00 fired last
        ("2026-12-07T09:00:00", 2),
        ("2026-12-07T17:59:59", 2),
        ("2026-12-07T18:00:00", 0),
        ("2026-12-05T12:00:00", 0),  # Saturday
    ],
)
def test_a_workers_schedule_sets_the_minimum_of_the_entry_that_fired_last(when: str, minimum: int) -> None:
    found, why = schedule_minimum(WEEKDAYS, wall(when))
    assert found == minimum and why.startswith(f"workers_schedule: {minimum} warm since")


def test_the_signals_windows_drop_old_samples_and_ignore_nonsense() -> None:
    signals = Signals()
    for n in range(20):
        signals.answered(float(n), 0.1 * (n + 1))
    signals.answered(20.0, float("nan"))
    signals.answered(20.0, -1.0)
    signals.sample(20.0, 3.0)
    assert signals.p95_s == pytest.approx(1.9) and signals.mean_load == 3.0
    signals.sample(20.0 + LATENCY_WINDOW_S + 10.0, 1.0)  # every request is now older than the window
    assert signals.p95_s is None and signals.mean_load == 1.0


@pytest.mark.parametrize(
    ("options", "user_code", "message"),
    [
        ({"workers_schedule": {"61 * * * *": 1}}, True, "workers_schedule '61 * * * *': "),
        ({"target_latency_ms": 100}, True, "target_latency_ms scales an HTTP-route endpoint"),
        ({"scaler": len}, False, "only the embedded plane"),
    ],
)
def test_registration_refuses_what_cannot_be_honoured(options: dict[str, Any], user_code: bool, message: str) -> None:
    spec = build_spec({"name": "s", **options})
    with pytest.raises(InvalidEndpointError, match=message.replace("*", r"\*")):
        check_scaling(spec, runs_user_code=user_code)


def test_registration_takes_a_latency_target_on_a_route_endpoint_and_a_scaler_on_the_embedded_plane() -> None:
    check_scaling(
        dataclasses.replace(build_spec({"name": "s", "target_latency_ms": 100}), kind="routes"), runs_user_code=False
    )
    check_scaling(build_spec({"name": "s", "scaler": len}), runs_user_code=True)


# --------------------------------------------------------------------------------------------------------------------
# through the door


async def ready_all(door: Door, endpoint: str) -> list[Worker]:
    await door.settle()
    for worker in door.workers(endpoint):
        if worker.state is WorkerState.STARTING:
            await door.ready(worker)
    return door.workers(endpoint)


async def test_a_latency_target_adds_route_workers_while_the_p95_is_over_it() -> None:
    door = await open_door("node-a=NVIDIA_H200:4")
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(1, 3), target_latency_ms=200)
    (first,) = await ready_all(door, "api")
    ep = door.plane.endpoint("api")
    for _ in range(10):  # fast answers: one worker is enough
        worker = door.plane.take_route_worker(ep)
        assert worker is first
        door.plane.release_route_worker(ep, worker, took_s=0.05)
    await door.step(1.0)
    assert len(door.workers("api")) == 1
    assert any("target_latency_ms 200: p95 50 ms" in n for n in door.plane.explain_endpoint("api").notes)
    # slow answers with requests in flight: one more worker, then (it ready, still slow) another, up to the max
    busy = door.plane.take_route_worker(ep)
    assert busy is not None
    for _ in range(10):
        ep.signals.answered(door.clock.monotonic(), 0.8)
    await door.step(1.0)
    assert len(door.workers("api")) == 2
    await door.step(1.0)
    assert len(door.workers("api")) == 2  # the second is still starting
    await ready_all(door, "api")
    await door.step(1.0)
    assert len(door.workers("api")) == 3
    await ready_all(door, "api")
    await door.step(1.0)
    assert len(door.workers("api")) == 3  # workers=(1, 3)
    door.plane.release_route_worker(ep, busy, took_s=0.9)


async def test_a_concurrency_target_starts_a_worker_per_target_jobs_at_once() -> None:
    door = await open_door("node-a=NVIDIA_H200:8")
    door.endpoint(name="c", gpu=GpuType.NVIDIA_H200, workers=(0, 8), target_concurrency=2)
    for _ in range(7):
        door.submit("c")
    await door.step(1.0)
    assert len(door.backend.started) == 4  # ceil(7 / 2), at once


async def test_a_workers_schedule_raises_and_lowers_the_minimum_on_its_cron_times() -> None:
    door = await open_door("node-a=NVIDIA_H200:4")  # the door's clock: Friday 2027-01-15 08:00 UTC
    door.endpoint(
        name="sched", gpu=GpuType.NVIDIA_H200, workers=(0, 3), idle_timeout=5, workers_schedule=dict(WEEKDAYS)
    )
    await door.step(3599.0)
    assert door.backend.started == []
    await door.step(1.0)  # 09:00 has fired: two warm workers, with nothing queued
    assert len(door.backend.started) == 2
    notes = door.plane.explain_endpoint("sched").notes
    assert any("workers_schedule: 2 warm since '0 9 * * 1-5' fired" in n for n in notes)
    for worker in door.workers("sched"):
        assert await door.pull(worker) == []  # up, and idle
    await door.step(3600.0)
    assert len([w for w in door.workers("sched") if w.live]) == 2  # kept warm past their idle timeout
    await door.step(8 * 3600.0 - 1.0)  # 17:59:59
    assert len([w for w in door.workers("sched") if w.live]) == 2
    await door.step(1.0)  # 18:00 has fired: the minimum is 0 again, and the idle workers go
    assert not any(w.live for w in door.workers("sched"))


async def test_a_user_scaler_is_called_at_a_bounded_rate_clamped_and_its_errors_shown() -> None:
    seen: list[Mapping[str, Any]] = []
    answers: list[Any] = [3, 9, ValueError("bad figures"), "two"]

    def decide(metrics: Mapping[str, Any]) -> int:
        seen.append(dict(metrics))
        answer = answers.pop(0) if answers else 1
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    door = await open_door("node-a=NVIDIA_H200:8")
    door.endpoint(name="u", gpu=GpuType.NVIDIA_H200, workers=(0, 4), scaler=decide)
    await door.step(1.0)
    await door.plane.scalers.answered()
    await door.step(0.0)
    assert len(door.backend.started) == 3
    assert seen[0]["endpoint"] == "u" and seen[0]["workers"] == 0 and seen[0]["queued"] == 0
    for _ in range(4):
        await door.step(1.0)  # within USER_PERIOD_S: not called again
    assert len(seen) == 1
    await door.step(USER_PERIOD_S)
    await door.plane.scalers.answered()
    await door.step(0.0)
    assert len(door.backend.started) == 4  # 9, clamped to workers=(0, 4)
    for expected in ("ValueError: bad figures", "TypeError: it returned 'two', not a whole number of workers"):
        await door.step(USER_PERIOD_S)
        await door.plane.scalers.answered()
        assert door.plane.endpoint("u").signals.user_error == expected
        notes = door.plane.explain_endpoint("u").notes
        assert any(f"scaler decide: last answer 9 worker(s); its last call failed: {expected}" in n for n in notes)
    assert door.plane.endpoint("u").signals.user_want == 9  # the last good answer holds
    await door.plane.close()


async def test_a_user_scaler_that_hangs_never_blocks_the_plane() -> None:
    release = threading.Event()

    def stuck(metrics: Mapping[str, Any]) -> int:
        release.wait(30)
        return 1

    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="h", gpu=GpuType.NVIDIA_H200, workers=(0, 1), scaler=stuck)
    await door.step(1.0)
    job = door.submit("h")  # the plane goes on while the scaler hangs in its thread
    await door.settle()
    assert len(door.backend.started) == 1  # before any answer: a worker for the demand
    assert door.plane.endpoint("h").signals.user_error is None
    await door.plane.scalers.answered()  # the call times out (real seconds: it runs in a thread)
    assert door.plane.endpoint("h").signals.user_error == f"took over {scalers.USER_TIMEOUT_S:g}s"
    assert door.plane.job(job.id).status.value == "IN_QUEUE"
    release.set()
    await door.plane.close()


async def test_a_request_that_arrives_while_the_last_route_worker_stops_is_served() -> None:
    door = await open_door("node-a=NVIDIA_H200:1", exit_on_stop=False)
    door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_H200, workers=(0, 1), idle_timeout=1)
    ep = door.plane.endpoint("api")
    request = asyncio.ensure_future(door.plane.hold_route_worker(ep, 30.0))
    await until(lambda: ep.queued == 1, "the request to be held")
    (first,) = await ready_all(door, "api")
    assert await request is first
    door.plane.release_route_worker(ep, first, took_s=0.01)
    await door.step(1.0)  # idle past its timeout: it is stopping (its process has not exited yet)
    assert first.state is WorkerState.STOPPING
    late = asyncio.ensure_future(door.plane.hold_route_worker(ep, 30.0))
    await until(lambda: ep.queued == 1, "the late request to be held")
    await door.settle()
    assert not late.done()  # not handed to the stopping worker, and not dropped
    door.backend.exit(first.id, 0)  # its device comes back: a new worker starts for the held request
    await door.settle()
    second = next(w for w in door.workers("api") if w is not first)
    await door.ready(second)
    assert await late is second
