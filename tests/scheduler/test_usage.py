"""Usage, exact (decision 0112): every worker's device time through the test door, to the second of the fake clock:
busy and idle GPU-seconds per model, concurrent jobs splitting their worker's time, a 2-GPU worker counting twice,
keys, apps and environments, windows, starting time, route workers, CPU workers' vCPU- and MB-seconds; and the
meter's pure parts (``summarize``, ``parse_since``) by table."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.errors import BadInputError
from flashpoint.fleet.inventory import Node
from flashpoint.scheduler.usage import FLUSH_S, Share, parse_since, summarize
from tests.scheduler.door import TARGET, Door, open_door

pytestmark = pytest.mark.timeout(30)

H200 = "NVIDIA H200"


def by(door: Door, group: str, since: float | None = None) -> dict[str, dict[str, Any]]:
    """Usage since the door opened (or ``since``), grouped: name -> its row."""
    start = door.clock.time() - 10_000 if since is None else since
    return {row["name"]: row for row in summarize(door.plane.usage.window(start), group)}


def deployed(door: Door, name: str, app: str, env: str, **options: Any) -> None:
    spec = dataclasses.replace(Endpoint(name=name, **options).spec, app=app, app_env=env)
    door.plane.register(spec, TARGET)


def who(name: str) -> dict[str, Any]:
    return {"flashpoint": {"submitted_by": name}}


async def test_a_worker_busy_30s_and_idle_70s_is_30_busy_and_70_idle_gpu_seconds_of_its_model() -> None:
    door = await open_door()
    opened = door.clock.time()
    door.endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(0, 1), idle_timeout=60)
    door.submit("embed")  # t=0: a worker starts, and at once pulls its job ...
    await door.step()
    worker = door.worker("embed")
    (job,) = await door.pull(worker)
    await door.finish(worker, job)  # ... which is done at once: idle from t=0
    await door.step(10)
    second = door.submit("embed", payload={"n": 2}, extra=who("alice")).id
    assert await door.pull(worker) == [second]  # t=10: busy ...
    await door.step(30)
    await door.finish(worker, second)  # ... until t=40
    await door.step(59)
    assert door.workers("embed")  # idle for 59 s: still there
    await door.step(1)  # t=100: idle past its timeout, it stops and exits
    assert not door.workers("embed")
    await door.step(50)  # nothing more accrues once it is gone

    row = by(door, "model")[H200]
    assert row["busy"]["gpuSeconds"] == 30
    assert row["idle"]["gpuSeconds"] == 70
    assert row["starting"]["gpuSeconds"] == 0
    assert row["gpuSeconds"] == 100
    assert row["vcpuSeconds"] == 0  # a GPU worker reserves no CPUs
    assert door.plane.usage.gpu_seconds(since=opened) == 100
    assert door.plane.usage.gpu_seconds(key="alice", since=opened) == 30
    assert door.plane.usage.gpu_seconds(key="bob", since=opened) == 0
    keys = by(door, "key")
    assert keys["alice"]["busy"]["gpuSeconds"] == 30 and keys["alice"]["idle"]["gpuSeconds"] == 0
    assert keys[""]["idle"]["gpuSeconds"] == 70  # idle time belongs to no key
    await door.plane.close()


async def test_starting_time_is_its_own_kind_and_counts_as_held() -> None:
    door = await open_door()
    opened = door.clock.time()
    door.endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.step()
    worker = door.worker("embed")
    await door.step(25)  # 25 s of a cold start
    await door.pull(worker)
    await door.step(5)
    row = by(door, "endpoint")["embed"]
    assert (row["starting"]["gpuSeconds"], row["idle"]["gpuSeconds"], row["busy"]["gpuSeconds"]) == (25, 5, 0)
    assert door.plane.usage.gpu_seconds(since=opened) == 30
    await door.plane.close()


async def test_concurrent_jobs_split_their_workers_time_equally_among_their_keys() -> None:
    door = await open_door()
    opened = door.clock.time()
    door.endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1), max_concurrency=2)
    await door.step()
    worker = door.worker("embed")
    await door.pull(worker)
    a = door.submit("embed", extra=who("alice")).id
    assert await door.pull(worker) == [a]
    await door.step(10)  # alice alone: 10 s
    b = door.submit("embed", extra=who("bob")).id
    assert await door.pull(worker) == [b]
    await door.step(20)  # both: 10 s each
    await door.finish(worker, a)
    await door.step(6)  # bob alone: 6 s
    await door.finish(worker, b)
    await door.step(4)  # idle: 4 s

    usage = door.plane.usage
    assert usage.gpu_seconds(key="alice", since=opened) == 20
    assert usage.gpu_seconds(key="bob", since=opened) == 16
    assert usage.gpu_seconds(since=opened) == 40
    row = by(door, "endpoint")["embed"]
    assert (row["busy"]["gpuSeconds"], row["idle"]["gpuSeconds"]) == (36, 4)
    await door.plane.close()


async def test_two_jobs_of_one_key_count_whole_and_a_job_of_no_key_counts_under_none() -> None:
    door = await open_door()
    opened = door.clock.time()
    door.endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1), max_concurrency=3)
    await door.step()
    worker = door.worker("embed")
    for extra in (who("alice"), who("alice"), None):
        door.submit("embed", extra=extra)
    assert len(await door.pull(worker, 3)) == 3
    await door.step(30)
    assert door.plane.usage.gpu_seconds(key="alice", since=opened) == 20
    assert door.plane.usage.gpu_seconds(key="", since=opened) == 10
    await door.plane.close()


async def test_a_2_gpu_worker_counts_twice() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    opened = door.clock.time()
    door.endpoint(name="big", gpu=GpuType.NVIDIA_H200, gpu_count=2, workers=(1, 1))
    await door.step()
    worker = door.worker("big")
    assert len(worker.devices) == 2
    await door.pull(worker)
    await door.step(10)
    job = door.submit("big").id
    await door.pull(worker)
    await door.step(15)
    await door.finish(worker, job)
    row = by(door, "model")[H200]
    assert (row["idle"]["gpuSeconds"], row["busy"]["gpuSeconds"]) == (20, 30)
    assert door.plane.usage.gpu_seconds(since=opened) == 50
    await door.plane.close()


async def test_usage_is_attributed_to_apps_and_environments() -> None:
    door = await open_door("node-a=NVIDIA_H200:3")
    opened = door.clock.time()
    deployed(door, "embed", "shop", "prod", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    deployed(door, "embed", "shop", "staging", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    deployed(door, "embed", "blog", "prod", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.step()
    for key in ("shop.prod.embed", "shop.staging.embed", "blog.prod.embed"):
        await door.pull(door.worker(key))
    await door.step(12)
    usage = door.plane.usage
    assert usage.gpu_seconds(app="shop", since=opened) == 24
    assert usage.gpu_seconds(app="shop", env="prod", since=opened) == 12
    assert usage.gpu_seconds(env="prod", since=opened) == 24
    assert usage.gpu_seconds(app="other", since=opened) == 0
    assert usage.gpu_seconds(app="", since=opened) == 0  # endpoints of no app: none here
    apps, envs = by(door, "app"), by(door, "env")
    assert {name: row["gpuSeconds"] for name, row in apps.items()} == {"shop": 24, "blog": 12}
    assert {name: row["gpuSeconds"] for name, row in envs.items()} == {"prod": 24, "staging": 12}
    assert set(by(door, "endpoint")) == {"shop.prod.embed", "shop.staging.embed", "blog.prod.embed"}
    await door.plane.close()


async def test_windows_count_only_what_falls_inside_them() -> None:
    door = await open_door()
    door.endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.step()
    t0 = door.clock.time()
    worker = door.worker("embed")
    await door.pull(worker)
    await door.step(10)
    job = door.submit("embed", extra=who("alice")).id
    await door.pull(worker)
    await door.step(30)  # busy 10..40
    await door.finish(worker, job)
    await door.step(200)  # idle 40..240, flushed on the way (minute buckets, several)
    usage = door.plane.usage
    assert usage.gpu_seconds(since=t0) == 240
    assert usage.gpu_seconds(since=t0 + 20) == 220
    # the resolution: a window that cuts a minute counts the share of each of its buckets that the bucket's span of
    # use has inside; busy 10..40 is one stretch (exact), idle 0..10 and 40..60 are spread over 0..60 (10/60 of 30 s)
    assert usage.gpu_seconds(since=t0 + 20, now=t0 + 30) == 10 + 5
    assert usage.gpu_seconds(key="alice", since=t0 + 20, now=t0 + 30) == 10
    assert usage.gpu_seconds(key="alice", since=t0 + 35) == 5
    assert usage.gpu_seconds(since=t0 + 60, now=t0 + 180) == 120  # whole minutes of idle time
    assert usage.gpu_seconds(since=t0 + 230) == 10  # the open interval, counted up to now
    assert usage.gpu_seconds(since=t0 + 300) == 0
    await door.plane.close()


async def test_a_route_worker_is_busy_while_requests_are_in_flight() -> None:
    door = await open_door()
    opened = door.clock.time()
    spec = door.routes_endpoint(name="web", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.step()
    worker = door.worker(spec.key)
    await door.step(3)  # starting
    await door.ready(worker)
    await door.step(7)  # idle
    ep = door.plane.endpoint(spec.key)
    first = door.plane.take_route_worker(ep)
    second = door.plane.take_route_worker(ep)
    assert first is second is worker
    await door.step(5)  # two requests in flight: busy
    door.plane.release_route_worker(ep, worker)
    await door.step(5)  # one: still busy
    door.plane.release_route_worker(ep, worker)
    await door.step(2)  # none: idle
    row = by(door, "endpoint")[spec.key]
    assert (row["starting"]["gpuSeconds"], row["busy"]["gpuSeconds"], row["idle"]["gpuSeconds"]) == (3, 10, 9)
    assert door.plane.usage.gpu_seconds(since=opened) == 22
    await door.plane.close()


async def test_a_cpu_worker_counts_vcpu_and_memory_seconds() -> None:
    door = await open_door("", nodes=[Node("box", cpus=4, memory_mb=8 * 1024)])
    door.endpoint(name="tiny", cpu="cpu3c-2-4", workers=(1, 1))
    await door.step()
    worker = door.worker("tiny")
    await door.pull(worker)
    await door.step(10)
    row = by(door, "model")["cpu3c-2-4"]
    assert row["gpuSeconds"] == 0
    assert row["vcpuSeconds"] == 2 * 10
    assert row["memoryMbSeconds"] == 4 * 1024 * 10
    await door.plane.close()


async def test_a_lost_worker_stops_counting_when_it_is_forgotten() -> None:
    door = await open_door()
    opened = door.clock.time()
    door.endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    door.submit("embed", extra=who("alice"))
    await door.step()
    worker = door.worker("embed")
    await door.pull(worker)
    await door.step(8)
    await door.crash(worker)  # t=8: its job goes back to the queue (the retry rule); its time ends here
    await door.step(30)
    (second,) = door.workers("embed")  # started at once for the retried job: still starting
    assert second is not worker
    assert door.plane.usage.gpu_seconds(key="alice", since=opened) == 8
    row = by(door, "endpoint")["embed"]
    assert (row["busy"]["gpuSeconds"], row["starting"]["gpuSeconds"], row["idle"]["gpuSeconds"]) == (8, 30, 0)
    await door.plane.close()


async def test_prometheus_totals_only_grow_and_include_open_intervals() -> None:
    door = await open_door()
    door.endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.step()
    await door.pull(door.worker("embed"))
    seen = []
    for _ in range(4):
        await door.step(FLUSH_S / 3)  # across flushes
        seen.append(sum(v[0] for v in door.plane.usage.lifetime().values()))
    assert seen == sorted(seen) and seen[-1] == pytest.approx(4 * FLUSH_S / 3)
    await door.plane.close()


def test_summarize_groups_and_orders_by_gpu_seconds() -> None:
    shares = [
        Share("a.p.x", "a", "p", "k1", H200, "busy", 10.0, 0.0, 0.0),
        Share("a.p.x", "a", "p", "", H200, "idle", 5.0, 0.0, 0.0),
        Share("b.p.y", "b", "p", "k1", "cpu3c-2-4", "busy", 0.0, 20.0, 40960.0),
        Share("c.s.z", "c", "s", "", H200, "starting", 30.0, 0.0, 0.0),
    ]
    rows = summarize(shares, "app")
    assert [row["name"] for row in rows] == ["c", "a", "b"]
    a = rows[1]
    assert a["gpuSeconds"] == 15 and a["busy"]["gpuSeconds"] == 10 and a["idle"]["gpuSeconds"] == 5
    assert {row["name"]: row["gpuSeconds"] for row in summarize(shares, "env")} == {"s": 30, "p": 15}
    assert summarize(shares, "key")[0]["name"] == ""
    assert summarize(shares, "model")[1]["vcpuSeconds"] == 20
    with pytest.raises(BadInputError, match="cannot be grouped by 'color'"):
        summarize(shares, "color")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("24h", 1000.0 - 86400), ("30m", 1000.0 - 1800), ("90s", 910.0), ("1d", 1000.0 - 86400), ("2w", 1000 - 1209600),
     ("1.5h", 1000 - 5400), ("1800000000", 1_800_000_000.0), ("0", 0.0)],
)  # fmt: skip
def test_parse_since(text: str, expected: float) -> None:
    assert parse_since(text, 1000.0) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "-5", "nan", "inf", "24x"])
def test_parse_since_refuses_what_is_no_time(text: str) -> None:
    with pytest.raises(BadInputError, match="neither a duration"):
        parse_since(text, 1000.0)
