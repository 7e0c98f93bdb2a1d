"""The plane's GPU sampler (``scheduler/gpusampler.py``, decision 0117) through the test door: recorded samples read in
a worker thread, attributed to the jobs running then, and kept on each job's record (a SQLite file's too) when it
ends; nothing sampled on a simulated fleet; the interval's bounds.

The devices are described as NVML described real ones, and the reader returns recorded samples (values as
``NvmlReader`` returns them): no stand-in NVML. The NVML reader itself is tested in ``tests/fleet/test_telemetry.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from flashpoint import GpuType
from flashpoint.backends.base import Launch
from flashpoint.backends.local import LocalBackend
from flashpoint.backends.stub import StubBackend
from flashpoint.clock import FakeClock
from flashpoint.config import Settings
from flashpoint.errors import BadInputError, ConfigError
from flashpoint.fleet.inventory import Device
from flashpoint.fleet.telemetry import DeviceReading, ProcessReading, Sample
from flashpoint.gpus import identify
from flashpoint.hosting.plane import PlaneRole, plane_settings
from flashpoint.scheduler.gpusampler import GpuSampler
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.store.base import JobStore
from flashpoint.store.memory import MemoryJobStore
from flashpoint.store.sqlite import SQLiteJobStore
from tests.scheduler.door import DOOR_HOST, Door, open_door, plane_state

pytestmark = pytest.mark.timeout(30)

H100 = "NVIDIA H100 80GB HBM3"
#: two real devices of this node, and one of another node (a Ray cluster's): only this node's are read here
DEVICES = (
    Device("node-a", 0, H100, identify(H100, 81559), 81559, False, "GPU-0a"),
    Device("node-a", 1, H100, identify(H100, 81559), 81559, False, "GPU-1a"),
    Device("node-b", 0, H100, identify(H100, 81559), 81559, False, "GPU-0b"),
)


class Recorded:
    """A reader that returns recorded samples in order (the last again once they run out), and notes the thread
    each read ran on and the devices it was asked for."""

    def __init__(self, *samples: Sample) -> None:
        self.samples = list(samples)
        self.threads: list[int] = []
        self.asked: list[list[str]] = []
        self.read = threading.Event()

    def __call__(self, devices: Sequence[Device]) -> Sample:
        self.threads.append(threading.get_ident())
        self.asked.append([d.uuid for d in devices])
        self.read.set()
        return self.samples.pop(0) if len(self.samples) > 1 else self.samples[0]


async def real_door(reader: Recorded, store: JobStore | None = None, **options: Any) -> Door:
    """A door plane on ``DEVICES`` (node-a is this plane's node) whose GPU telemetry reads ``reader``."""
    clock = FakeClock()
    backend = StubBackend(DEVICES, nodes=[dataclasses.replace(DOOR_HOST, name="node-a")])
    # "first": workers go to device 0 of node-a (pack would choose node-b's lone device)
    settings = PlaneSettings(node="node-a", route_poll_s=(0.0, 0.0), placement_policy="first", **options)
    plane = ControlPlane(
        store or MemoryJobStore(),
        backend,
        worker_secret="door",
        settings=settings,
        clock=clock,
        probe=backend.probe,
        telemetry=reader,
    )
    await plane.start(ticking=False)
    return Door(plane, backend, clock)


def on_gpu0(util: float, used: int, proc_mb: int, pid: int = 4100) -> Sample:
    """A sample in which device 0 runs at ``util`` % with ``used`` MiB in use, ``proc_mb`` of them by ``pid``."""
    return Sample(
        (
            DeviceReading("GPU-0a", util, used, 81559, 51.0, 250.0),
            DeviceReading("GPU-1a", 0.0, 1, 81559, 30.0, 60.0),
        ),
        (ProcessReading("GPU-0a", pid, proc_mb, pid),),
    )


async def test_a_job_keeps_its_workers_peak_memory_and_mean_utilisation_while_it_ran() -> None:
    # Given a worker (pid 4100) running a job on device 0
    reader = Recorded(on_gpu0(0.0, 600, 0), on_gpu0(30.0, 2600, 2000), on_gpu0(90.0, 9600, 9000), on_gpu0(0, 1, 0))
    door = await real_door(reader)
    door.endpoint(name="llm", gpu=GpuType.NVIDIA_H100_80GB_HBM3, workers=(0, 1))
    job = door.submit("llm")
    await door.step()
    worker = door.worker("llm")
    worker.pid = 4100  # what the local backend reports (the stub starts no process)
    assert await door.plane.telemetry.sample_once()  # started, no job yet: not the job's
    assert await door.pull(worker) == [job.id]

    # When two samples are taken while it runs, and it ends
    assert await door.plane.telemetry.sample_once()
    assert await door.plane.telemetry.sample_once()
    await door.finish(worker, job.id)
    assert await door.plane.telemetry.sample_once()  # after it ended: not the job's either

    # Then its record has the peak of its process's memory and the mean of its device's utilisation
    record = door.plane.job(job.id)
    assert (record.gpu_memory_peak_mb, record.gpu_utilization_mean_pct) == (9000, 60.0)
    view = record.view().to_native()
    assert (view["gpuMemoryPeakMb"], view["gpuUtilizationMeanPct"]) == (9000, 60.0)
    # NVML was read off the loop's thread, for this node's real devices only
    assert threading.get_ident() not in reader.threads
    assert reader.asked == [["GPU-0a", "GPU-1a"]] * 4
    # and the device shows the last sample, its process named as the worker's
    telemetry = door.plane.state.gpus.telemetry(DEVICES[0])
    assert telemetry["status"] == "sampled" and telemetry["utilizationPct"] == 0
    assert door.plane.state.gpus.telemetry(DEVICES[2])["status"] == "unknown"  # another node's: never read here


async def test_a_job_no_sample_saw_and_a_job_while_nvml_failed_have_no_figures() -> None:
    reader = Recorded(Sample(failure="NVML could not start (Driver Not Loaded)"))
    door = await real_door(reader)
    door.endpoint(name="llm", gpu=GpuType.NVIDIA_H100_80GB_HBM3, workers=(0, 1))
    quick, failed = door.submit("llm"), door.submit("llm", payload={"n": 2})
    await door.step()
    worker = door.worker("llm")
    assert await door.pull(worker) == [quick.id]
    await door.finish(worker, quick.id)  # between two samples
    assert await door.pull(worker) == [failed.id]
    assert await door.plane.telemetry.sample_once()
    await door.finish(worker, failed.id)

    for job in (quick, failed):
        record = door.plane.job(job.id)
        assert (record.gpu_memory_peak_mb, record.gpu_utilization_mean_pct) == (None, None)
        assert record.view().to_native()["gpuMemoryPeakMb"] is None
    assert door.plane.state.gpus.telemetry(DEVICES[0])["status"] == "unknown"


async def test_the_figures_are_kept_in_the_sqlite_record(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    store = SQLiteJobStore(db)
    door = await real_door(Recorded(on_gpu0(42.0, 5000, 4000)), store=store)
    door.endpoint(name="llm", gpu=GpuType.NVIDIA_H100_80GB_HBM3, workers=(0, 1))
    job = door.submit("llm")
    await door.step()
    worker = door.worker("llm")
    assert await door.pull(worker) == [job.id]
    assert await door.plane.telemetry.sample_once()
    await door.finish(worker, job.id)
    await door.plane.committed()
    await door.plane.close()
    store.close()

    again = SQLiteJobStore(db).get(job.id)
    assert again is not None
    # the stub backend knows no pid: its device's memory used (the worker holds it alone)
    assert (again.gpu_memory_peak_mb, again.gpu_utilization_mean_pct) == (5000, 42.0)


async def test_a_simulated_fleet_is_never_sampled() -> None:
    reader = Recorded(on_gpu0(50.0, 1000, 1000))
    door = await open_door("node-a=NVIDIA_H200:2", node="node-a")
    sampler = GpuSampler(door.plane.state, reader, interval_s=5.0, node="node-a")
    door.endpoint(name="sim", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    job = door.submit("sim")
    await door.step()
    worker = door.worker("sim")
    assert await door.pull(worker) == [job.id]

    assert not sampler.active
    assert not await sampler.sample_once()
    await door.finish(worker, job.id)

    assert reader.asked == []
    assert door.plane.job(job.id).gpu_memory_peak_mb is None
    assert door.plane.state.gpus.telemetry(door.plane.index.devices[0]) == {
        "status": "simulated",
        "detail": "simulated: no telemetry",
    }


async def test_a_ticking_plane_samples_from_its_start_and_stops_when_it_closes() -> None:
    reader = Recorded(on_gpu0(12.0, 700, 0))
    door = await real_door(reader)
    door.plane.telemetry.start()  # as start(ticking=True) does

    assert await asyncio.to_thread(reader.read.wait, 10)  # the first sample is taken at once
    await door.plane.close()
    assert door.plane.telemetry._task is None


@pytest.mark.parametrize(("interval", "active"), [(0.0, False), (1.0, True), (5.0, True)])
def test_the_interval_is_0_for_none_or_at_least_a_second(interval: float, active: bool) -> None:
    state = plane_state("")
    state.index.replace(DEVICES, [])
    assert GpuSampler(state, Recorded(Sample()), interval_s=interval, node="node-a").active is active
    assert not GpuSampler(state, Recorded(Sample()), interval_s=interval, node="elsewhere").active
    assert not GpuSampler(state, None, interval_s=interval, node="node-a").active


@pytest.mark.parametrize("interval", [0.001, 0.5, 0.99])
def test_a_shorter_interval_is_refused_saying_what_to_use(interval: float) -> None:
    with pytest.raises(BadInputError, match="at least 1 s, or 0 to turn GPU telemetry off"):
        GpuSampler(plane_state(), None, interval_s=interval, node="node-a")


@pytest.mark.parametrize(("text", "seconds"), [(None, 5.0), ("0", 0.0), ("1", 1.0), ("30", 30.0)])
def test_a_server_takes_its_interval_from_flashpoint_gpu_sample_s(text: str | None, seconds: float) -> None:
    settings = Settings.load(env={} if text is None else {"FLASHPOINT_GPU_SAMPLE_S": text})
    assert settings.gpu_sample_s == seconds
    hosted = plane_settings(settings, PlaneRole(), base_url="http://plane", worker_env={}, parent_pid=None)
    assert hosted.gpu_sample_s == seconds


@pytest.mark.parametrize("text", ["0.5", "-1", "often"])
def test_a_bad_flashpoint_gpu_sample_s_is_refused_saying_what_to_write(text: str) -> None:
    with pytest.raises(ConfigError, match="FLASHPOINT_GPU_SAMPLE_S"):
        Settings.load(env={"FLASHPOINT_GPU_SAMPLE_S": text})


async def test_the_local_backend_reports_its_workers_pid_which_heads_its_own_session() -> None:
    # a real process: what attribution needs of it is its pid, and that its children share its session
    backend = LocalBackend([])
    up = asyncio.Event()
    script = "import os, time; print(os.getsid(0), flush=True); time.sleep(60)"
    launch = Launch("w1", "e", [sys.executable, "-c", script], dict(os.environ), ())
    started = await backend.start(
        launch, lambda worker_id, channel, line: up.set() if line.strip() else None, lambda w, code, cause="": None
    )
    try:
        await asyncio.wait_for(up.wait(), 30)
        assert started.pid is not None and started.pid != os.getpid()
        assert os.getsid(started.pid) == started.pid
    finally:
        await backend.close()
