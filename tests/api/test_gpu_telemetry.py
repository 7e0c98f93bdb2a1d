"""GPU telemetry over the native API (decision 0117): ``/v1/fleet``'s devices with their telemetry ("simulated: no
telemetry" on simulated ones), ``/v1/jobs/{id}``'s peak GPU memory and mean utilisation, and the Prometheus gauges of
real sampled devices only. Door planes (StubBackend, FakeClock); the real-device plane reads recorded samples
(``tests/scheduler/test_gpusampler.py``'s), never a stand-in NVML."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from flashpoint import GpuType
from flashpoint.api import schemas
from flashpoint.api.metrics import PlaneMetrics
from flashpoint.api.native import create_native_app
from flashpoint.fleet.telemetry import Sample
from tests.api.test_metrics import key, samples
from tests.scheduler.door import BASE_URL, Door, open_door
from tests.scheduler.test_gpusampler import DEVICES, Recorded, on_gpu0, real_door

pytestmark = pytest.mark.timeout(30)

KEY = "metrics-key"  # the key tests.api.test_metrics' scrape sends
AUTH = {"Authorization": f"Bearer {KEY}"}


async def get(door: Door, path: str) -> dict[str, Any]:
    app = create_native_app(door.plane, (KEY,))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as client:
        response = await client.get(path, headers=AUTH)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def ran_one(door: Door, endpoint: str, *, sampled: bool) -> str:
    """A job of ``endpoint`` run to its end by its worker, sampled once while it ran (``sampled``)."""
    job = door.submit(endpoint)
    await door.step()
    worker = door.worker(endpoint)
    assert await door.pull(worker) == [job.id]
    if sampled:
        assert await door.plane.telemetry.sample_once()
    await door.finish(worker, job.id)
    return job.id


async def test_simulated_devices_say_they_have_no_telemetry_and_their_jobs_no_figures() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    door.endpoint(name="sim", gpu=GpuType.NVIDIA_H200, workers=(0, 1))
    job_id = await ran_one(door, "sim", sampled=False)

    fleet = await get(door, "/fleet")
    job = await get(door, f"/jobs/{job_id}")

    schemas.Fleet.model_validate(fleet)
    assert [d["telemetry"] for d in fleet["devices"]] == [
        {"status": "simulated", "detail": "simulated: no telemetry"}
    ] * 2
    schemas.Job.model_validate(job)
    assert job["gpuMemoryPeakMb"] is None and job["gpuUtilizationMeanPct"] is None


async def test_real_devices_show_their_latest_sample_and_a_job_its_figures() -> None:
    door = await real_door(Recorded(on_gpu0(64.0, 12000, 11000)))
    door.endpoint(name="llm", gpu=GpuType.NVIDIA_H100_80GB_HBM3, workers=(0, 1))
    job_id = await ran_one(door, "llm", sampled=True)

    fleet = await get(door, "/fleet")
    job = await get(door, f"/jobs/{job_id}")

    schemas.Fleet.model_validate(fleet)
    gpu0, gpu1, elsewhere = (d["telemetry"] for d in fleet["devices"])
    assert (gpu0["status"], gpu0["utilizationPct"], gpu0["memoryUsedMb"], gpu0["memoryTotalMb"]) == (
        "sampled",
        64.0,
        12000,
        81559,
    )
    assert (gpu0["temperatureC"], gpu0["powerW"]) == (51.0, 250.0)
    assert gpu0["processes"] == [{"pid": 4100, "memoryUsedMb": 11000, "worker": None}]  # the stub knows no pid
    assert gpu1["status"] == "sampled" and gpu1["utilizationPct"] == 0.0
    assert elsewhere == {"status": "unknown", "detail": "unknown: not sampled yet"}  # another node's
    assert (job["gpuMemoryPeakMb"], job["gpuUtilizationMeanPct"]) == (12000, 64.0)


async def test_nvml_failing_shows_unknown_with_why() -> None:
    door = await real_door(Recorded(Sample(failure="NVML could not start (Driver Not Loaded)")))
    assert await door.plane.telemetry.sample_once()

    fleet = await get(door, "/fleet")

    assert {d["telemetry"]["status"] for d in fleet["devices"]} == {"unknown"}
    assert fleet["devices"][0]["telemetry"]["detail"] == "unknown: NVML could not start (Driver Not Loaded)"


async def test_prometheus_has_gauges_for_real_sampled_devices_only() -> None:
    door = await real_door(Recorded(on_gpu0(64.0, 12000, 11000)))
    metrics = PlaneMetrics(door.plane)
    before = await samples(door, metrics)
    assert not [name for name, _ in before if name.startswith("flashpoint_gpu_") and "seconds" not in name]

    assert await door.plane.telemetry.sample_once()
    found = await samples(door, metrics)

    model = DEVICES[0].model_name
    labels = {"node": "node-a", "index": "0", "uuid": "GPU-0a", "model": model}
    assert found[key("flashpoint_gpu_utilization_percent", **labels)] == 64.0
    assert found[key("flashpoint_gpu_memory_used_bytes", **labels)] == 12000 * 1024 * 1024
    assert found[key("flashpoint_gpu_memory_total_bytes", **labels)] == 81559 * 1024 * 1024
    assert found[key("flashpoint_gpu_temperature_celsius", **labels)] == 51.0
    assert found[key("flashpoint_gpu_power_watts", **labels)] == 250.0
    # node-b's device was never read: no series, not zeros
    assert not [k for k in found if dict(k[1]).get("uuid") == "GPU-0b"]


async def test_prometheus_has_no_gpu_gauges_on_a_simulated_fleet() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    metrics = PlaneMetrics(door.plane)

    found = await samples(door, metrics)

    gauges = ("utilization_percent", "memory_used_bytes", "memory_total_bytes", "temperature_celsius", "power_watts")
    assert not [name for name, _ in found if name.removeprefix("flashpoint_gpu_") in gauges]
