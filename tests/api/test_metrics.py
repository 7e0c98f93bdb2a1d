"""Prometheus metrics of a control plane: state gauges at scrape time, and finished jobs observed by listener. The
plane is a door plane (StubBackend, FakeClock) whose workers the test plays; /metrics is scraped in-process (ASGI)."""

from __future__ import annotations

import httpx
import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from flashpoint import GpuGroup, GpuType
from flashpoint.api.metrics import PlaneMetrics, metrics_route
from flashpoint.api.native import create_native_app
from flashpoint.jobs import JobStatus
from flashpoint.wire import protocol
from tests.scheduler.door import BASE_URL, Door, open_door

pytestmark = pytest.mark.timeout(30)

KEY = "metrics-key"
FLEET = "node-a=NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2"


async def scrape(door: Door, metrics: PlaneMetrics, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET /metrics from the native app mounted with these metrics, once every job end so far has been heard."""
    await door.plane.committed()  # listeners hear of a job's end once it is durable
    app = create_native_app(door.plane, (KEY,), metrics=metrics)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as client:
        return await client.get("/metrics", headers={"Authorization": f"Bearer {KEY}"} if headers is None else headers)


async def samples(door: Door, metrics: PlaneMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, keyed by name and labels."""
    response = await scrape(door, metrics)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == prometheus_client.CONTENT_TYPE_LATEST
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


async def test_finished_jobs_are_counted_and_timed_per_endpoint() -> None:
    door = await open_door(FLEET)
    metrics = PlaneMetrics(door.plane)
    door.endpoint(name="echo", gpu=GpuGroup.AMPERE_80)
    jobs = [door.submit("echo", n) for n in (1, 2, -1)]
    await door.settle()
    worker = door.worker("echo")
    door.clock.advance(1)  # each job waited 1 s in the queue
    assert await door.pull(worker, 3) == [job.id for job in jobs]
    door.clock.advance(2)  # and ran 2 s
    await door.finish(worker, jobs[0].id, 1)
    await door.finish(worker, jobs[1].id, 2)
    failed = protocol.error_record("ValueError", "negative")
    door.plane.done("echo", worker.id, jobs[2].id, failed)
    await door.settle()
    assert [job.status for job in jobs] == [JobStatus.COMPLETED, JobStatus.COMPLETED, JobStatus.FAILED]
    found = await samples(door, metrics)

    assert found[key("flashpoint_jobs_finished_total", endpoint="echo", status="COMPLETED", reason="completed")] == 2
    assert found[key("flashpoint_jobs_finished_total", endpoint="echo", status="FAILED", reason="user_error")] == 1
    assert found[key("flashpoint_jobs", endpoint="echo", status="COMPLETED")] == 2
    assert found[key("flashpoint_jobs", endpoint="echo", status="FAILED")] == 1
    assert found[key("flashpoint_jobs", endpoint="echo", status="CANCELLED")] == 0
    assert found[key("flashpoint_jobs", endpoint="echo", status="IN_QUEUE")] == 0
    assert found[key("flashpoint_job_delay_seconds_count", endpoint="echo")] == 3
    assert found[key("flashpoint_job_delay_seconds_sum", endpoint="echo")] == 3
    assert found[key("flashpoint_job_delay_seconds_bucket", endpoint="echo", le="0.5")] == 0
    assert found[key("flashpoint_job_delay_seconds_bucket", endpoint="echo", le="1.0")] == 3
    assert found[key("flashpoint_job_delay_seconds_bucket", endpoint="echo", le="+Inf")] == 3
    assert found[key("flashpoint_job_execution_seconds_count", endpoint="echo")] == 3
    assert found[key("flashpoint_job_execution_seconds_sum", endpoint="echo")] == 6
    assert found[key("flashpoint_queue_depth", endpoint="echo")] == 0
    # the worker stays warm for its idle timeout, holding one A100
    assert found[key("flashpoint_workers", endpoint="echo", state="IDLE")] == 1
    assert found[key("flashpoint_workers", endpoint="echo", state="STOPPING")] == 0
    assert found[key("flashpoint_devices", model="NVIDIA A100 80GB PCIe", state="busy", simulated="true")] == 1
    assert found[key("flashpoint_devices", model="NVIDIA A100 80GB PCIe", state="free", simulated="true")] == 1
    assert found[key("flashpoint_devices", model="NVIDIA H200", state="free", simulated="true")] == 1
    assert found[key("flashpoint_devices", model="NVIDIA H200", state="busy", simulated="true")] == 0


async def test_queued_running_cancelled_and_timed_out_jobs() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    metrics = PlaneMetrics(door.plane)
    door.endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    door.endpoint(name="busy", gpu=GpuType.NVIDIA_H200)
    queued = [door.submit("never", n) for n in range(3)]
    door.plane.cancel(queued[0].id)
    # a job whose TTL runs out while it waits ends TIMED_OUT (the plane checks expiry once a second)
    expiring = door.submit("never", 9, ttl_ms=1_000)
    running = door.submit("busy")
    await door.settle()
    await door.pull(door.worker("busy"))
    await door.step(1)
    assert (expiring.status, running.status) == (JobStatus.TIMED_OUT, JobStatus.IN_PROGRESS)
    found = await samples(door, metrics)

    assert found[key("flashpoint_jobs", endpoint="never", status="IN_QUEUE")] == 2
    assert found[key("flashpoint_jobs", endpoint="never", status="IN_PROGRESS")] == 0
    assert found[key("flashpoint_jobs", endpoint="never", status="CANCELLED")] == 1
    assert found[key("flashpoint_jobs", endpoint="never", status="TIMED_OUT")] == 1
    assert found[key("flashpoint_queue_depth", endpoint="never")] == 2
    assert found[key("flashpoint_jobs_finished_total", endpoint="never", status="CANCELLED", reason="cancelled")] == 1
    assert (
        found[key("flashpoint_jobs_finished_total", endpoint="never", status="TIMED_OUT", reason="queue_ttl_expired")]
        == 1
    )
    # never started: no delay or execution time to observe
    assert key("flashpoint_job_delay_seconds_count", endpoint="never") not in found
    assert found[key("flashpoint_workers", endpoint="never", state="STARTING")] == 0
    # the other endpoint's job runs on a worker that holds the H200
    assert found[key("flashpoint_jobs", endpoint="busy", status="IN_PROGRESS")] == 1
    assert found[key("flashpoint_queue_depth", endpoint="busy")] == 0
    assert found[key("flashpoint_workers", endpoint="busy", state="RUNNING")] == 1
    assert found[key("flashpoint_devices", model="NVIDIA H200", state="busy", simulated="true")] == 1


async def test_metrics_need_the_api_key() -> None:
    door = await open_door(FLEET)
    metrics = PlaneMetrics(door.plane)

    missing = await scrape(door, metrics, headers={})
    wrong = await scrape(door, metrics, headers={"Authorization": "Bearer nope"})
    raw = await scrape(door, metrics, headers={"Authorization": KEY})

    for response in (missing, wrong):
        assert response.status_code == 401
        body = response.json()
        assert body["code"] == "unauthorized" and body["error"] == body["message"]
    assert raw.status_code == 200


async def test_each_plane_has_its_own_registry_and_close_stops_observing() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    first = PlaneMetrics(door.plane)
    second = PlaneMetrics(door.plane)  # no clash: registries are per PlaneMetrics, never the global one
    door.endpoint(name="never", gpu=GpuType.NVIDIA_B200)

    second.close()
    job = door.submit("never", 1)
    door.plane.cancel(job.id)

    finished = key("flashpoint_jobs_finished_total", endpoint="never", status="CANCELLED", reason="cancelled")
    assert (await samples(door, first))[finished] == 1
    assert finished not in await samples(door, second)
    assert prometheus_client.REGISTRY.get_sample_value("flashpoint_queue_depth", {"endpoint": "never"}) is None


async def test_metrics_route_is_a_plain_route_for_any_app() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    app = Starlette(routes=[metrics_route(PlaneMetrics(door.plane))])  # no api_keys in its state: no auth

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as client:
        response = await client.get("/metrics")

    assert response.status_code == 200
    assert 'flashpoint_devices{model="NVIDIA H200",simulated="true",state="free"} 1.0' in response.text
