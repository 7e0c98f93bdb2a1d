"""Calls as Runpod Flash code makes them (issue 11, point 7): sync ``def`` endpoints (one that blocks, a sync
generator), positional and keyword arguments mixed with defaults, ``*args`` and ``**kwargs``, and class endpoints
built with constructor arguments (one instance per distinct arguments, several methods). Real worker processes on the
embedded default, simulated GPUs only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from flashpoint import Endpoint, GpuGroup
from tests.conftest import eventually, eventually_async

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


async def test_sync_def_endpoints_with_mixed_arguments(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="flash-mix", gpu=GpuGroup.ANY, workers=1)
    def mix(a: int, b: int = 2, *rest: int, c: int, d: int = 4, **extra: Any) -> dict[str, Any]:
        return {"a": a, "b": b, "rest": list(rest), "c": c, "d": d, "extra": extra}

    # defaults filled on the worker, keywords in any order
    assert await mix(1, c=3) == {"a": 1, "b": 2, "rest": [], "c": 3, "d": 4, "extra": {}}
    assert await mix(c=3, a=1, b=7) == {"a": 1, "b": 7, "rest": [], "c": 3, "d": 4, "extra": {}}
    # positional beyond the named ones go to *rest, unknown keywords to **extra
    assert await mix(1, 5, 6, 7, c=3, e=9) == {"a": 1, "b": 5, "rest": [6, 7], "c": 3, "d": 4, "extra": {"e": 9}}
    job = await mix.run(10, 20, 30, c=0, d=1, flag=True)
    assert await job.wait(timeout=60) == "COMPLETED"
    assert job.output == {"a": 10, "b": 20, "rest": [30], "c": 0, "d": 1, "extra": {"flag": True}}
    # values JSON cannot carry travel too (a tuple and bytes, positionally)
    assert await mix((1, 2), b"x", c=3) == {"a": (1, 2), "b": b"x", "rest": [], "c": 3, "d": 4, "extra": {}}
    with pytest.raises(TypeError, match="missing a required argument: 'c'"):
        await mix(1)


async def test_positional_only_and_async_endpoints(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="flash-posonly", gpu=GpuGroup.ANY, workers=1)
    async def scale(x: float, /, factor: float = 2, *, offset: float = 0) -> float:
        return x * factor + offset

    assert await scale(3) == 6
    assert await scale(3, 4) == 12
    assert await scale(3, factor=5, offset=1) == 16


async def test_a_blocking_sync_def_keeps_its_worker_serving(make_embedded, tmp_path: Path) -> None:
    make_embedded("NVIDIA_H200:1")
    started, gate = tmp_path / "started", tmp_path / "gate"

    @Endpoint(name="flash-block", gpu=GpuGroup.ANY, workers=1, max_concurrency=2)
    def block(tag: str, started: str = "", gate: str = "") -> str:
        if gate:
            Path(started).touch()
            while not Path(gate).exists():  # blocks its thread, as a synchronous model call does
                time.sleep(0.01)
        return tag

    held = await block.run("held", started=str(started), gate=str(gate))
    await eventually(started.exists, timeout=60, what="the blocking call to start")
    # the worker's event loop is free while the sync call blocks: another job runs and ends meanwhile
    assert await block("quick") == "quick"
    assert await held.status() == "IN_PROGRESS"
    gate.touch()
    assert await held.wait(timeout=30) == "COMPLETED" and held.output == "held"


async def test_a_sync_generator_streams_its_chunks(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="flash-sync-gen", gpu=GpuGroup.ANY, workers=1)
    def count(n: int, start: int = 0):  # type: ignore[no-untyped-def]
        for i in range(start, start + n):
            yield {"i": i}

    assert [chunk async for chunk in count.stream(3)] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert [chunk async for chunk in count.stream(2, start=5)] == [{"i": 5}, {"i": 6}]
    assert await count(2) == [{"i": 0}, {"i": 1}]  # awaited whole: every chunk


async def test_class_constructor_arguments_and_several_methods(make_embedded) -> None:
    make_embedded("NVIDIA_H200:1")

    @Endpoint(name="flash-model", gpu=GpuGroup.ANY, workers=1)
    class Model:
        built = 0

        def __init__(self, size: int, unit: str = "px", *, label: str = "") -> None:
            # type(self), not Model: in this test's scope Model names the endpoint's handle, not the class
            type(self).built += 1
            self.serial = type(self).built
            self.size, self.unit, self.label = size, unit, label

        def describe(self, prefix: str = "") -> str:
            return f"{prefix}{self.label}{self.size}{self.unit}#{self.serial}"

        async def area(self, width: int, height: int = 1) -> int:
            return self.size * width * height

        def sizes(self, *factors: int) -> list[int]:
            return [self.size * f for f in factors]

    # one instance per distinct constructor arguments, however they were passed (positionally or by name)
    assert await Model(3).describe() == "3px#1"
    assert await Model(3).describe(prefix="> ") == "> 3px#1"
    assert await Model(size=3).describe() == "3px#1"
    assert await Model(3, "cm").describe() == "3cm#2"
    assert await Model(3, unit="cm").describe() == "3cm#2"
    assert await Model(4, label="big ").describe() == "big 4px#3"
    # several methods: sync and async, positional and keyword arguments, defaults and *args
    model = Model(5)
    assert await model.area(2) == 10
    assert await model.area(2, height=3) == 30
    assert await model.sizes(1, 2, 3) == [5, 10, 15]
    job = await model.area.run(4, 4)
    assert await job.wait(timeout=60) == "COMPLETED" and job.output == 80
    assert await Model(5).describe() == "5px#4"  # the instance built for Model(5) above
    with pytest.raises(TypeError, match="size"):
        Model(unit="cm")  # a missing constructor argument fails at the call, before any job


async def test_jobs_arriving_while_an_instance_is_built_share_it(make_embedded, tmp_path: Path) -> None:
    make_embedded("NVIDIA_H200:1")
    started, gate = tmp_path / "started", tmp_path / "gate"

    @Endpoint(name="flash-slow-init", gpu=GpuGroup.ANY, workers=1, max_concurrency=2)
    class Slow:
        built = 0

        def __init__(self, started: str, gate: str) -> None:
            type(self).built += 1
            self.serial = type(self).built
            Path(started).touch()
            while not Path(gate).exists():  # a model loading
                time.sleep(0.01)

        def serial_number(self) -> int:
            return self.serial

    instance = Slow(str(started), str(gate))
    first = await instance.serial_number.run()
    await eventually(started.exists, timeout=60, what="the constructor to start")
    second = await instance.serial_number.run()

    async def second_taken() -> bool:
        return await second.status() == "IN_PROGRESS"

    # the worker took the second job while the first one's constructor still runs
    await eventually_async(second_taken, timeout=60, what="the worker to take the second job")
    gate.touch()
    assert await first.result(timeout=30) == 1
    assert await second.result(timeout=30) == 1  # it waited for the instance being built, and built none of its own
