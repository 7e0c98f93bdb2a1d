"""Prometheus metrics of a real embedded plane: state gauges at scrape time, and finished jobs observed by listener."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from flashpoint import Endpoint, GpuGroup, GpuType, JobFailedError
from flashpoint.api.metrics import PlaneMetrics, metrics_route
from flashpoint.api.native import create_native_app
from flashpoint.embedded import EmbeddedServer

pytestmark = pytest.mark.timeout(90)

T = TypeVar("T")
KEY = "metrics-key"
FLEET = "NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2"


async def on_loop(embedded: EmbeddedServer, fn: Callable[[], T]) -> T:
    """``fn()`` computed on the plane's own loop, awaited from the test's loop."""

    async def run() -> T:
        return fn()

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), embedded.loop))


async def attach(embedded: EmbeddedServer) -> PlaneMetrics:
    return await on_loop(embedded, lambda: PlaneMetrics(embedded.plane))


async def scrape(
    embedded: EmbeddedServer, metrics: PlaneMetrics, headers: dict[str, str] | None = None
) -> httpx.Response:
    """GET /v1/metrics from the native app mounted with these metrics, on the plane's loop."""
    app = create_native_app(embedded.plane, (KEY,), metrics=metrics)

    async def run() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://plane") as client:
            return await client.get(
                "/metrics", headers={"Authorization": f"Bearer {KEY}"} if headers is None else headers
            )

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), embedded.loop))


async def samples(
    embedded: EmbeddedServer, metrics: PlaneMetrics
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, keyed by name and labels."""
    response = await scrape(embedded, metrics)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == prometheus_client.CONTENT_TYPE_LATEST
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


async def test_finished_jobs_are_counted_and_timed_per_endpoint(make_embedded: Any) -> None:
    embedded = make_embedded(FLEET)
    metrics = await attach(embedded)

    @Endpoint(name="echo", gpu=GpuGroup.AMPERE_80)
    async def echo(x: int) -> int:
        if x < 0:
            raise ValueError("negative")
        return x

    assert await echo(1) == 1
    assert await echo(2) == 2
    with pytest.raises(JobFailedError):
        await echo(-1)
    found = await samples(embedded, metrics)

    assert found[key("flashpoint_jobs_finished_total", endpoint="echo", status="COMPLETED", reason="completed")] == 2
    assert found[key("flashpoint_jobs_finished_total", endpoint="echo", status="FAILED", reason="user_error")] == 1
    assert found[key("flashpoint_jobs", endpoint="echo", status="COMPLETED")] == 2
    assert found[key("flashpoint_jobs", endpoint="echo", status="FAILED")] == 1
    assert found[key("flashpoint_jobs", endpoint="echo", status="CANCELLED")] == 0
    assert found[key("flashpoint_jobs", endpoint="echo", status="IN_QUEUE")] == 0
    assert found[key("flashpoint_job_delay_seconds_count", endpoint="echo")] == 3
    assert found[key("flashpoint_job_execution_seconds_count", endpoint="echo")] == 3
    assert found[key("flashpoint_job_delay_seconds_bucket", endpoint="echo", le="+Inf")] == 3
    assert found[key("flashpoint_job_execution_seconds_sum", endpoint="echo")] >= 0
    assert found[key("flashpoint_queue_depth", endpoint="echo")] == 0
    # the worker stays warm for its idle timeout, holding one A100
    assert found[key("flashpoint_workers", endpoint="echo", state="IDLE")] == 1
    assert found[key("flashpoint_workers", endpoint="echo", state="STOPPING")] == 0
    assert found[key("flashpoint_devices", model="NVIDIA A100 80GB PCIe", state="busy", simulated="true")] == 1
    assert found[key("flashpoint_devices", model="NVIDIA A100 80GB PCIe", state="free", simulated="true")] == 1
    assert found[key("flashpoint_devices", model="NVIDIA H200", state="free", simulated="true")] == 1
    assert found[key("flashpoint_devices", model="NVIDIA H200", state="busy", simulated="true")] == 0


async def test_queued_running_cancelled_and_timed_out_jobs(make_embedded: Any) -> None:
    embedded = make_embedded("NVIDIA_H200:1")
    metrics = await attach(embedded)

    @Endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    async def never(n: int) -> int:
        return n

    queued = [await never.run(n) for n in range(3)]
    await queued[0].cancel()
    # a job whose TTL runs out while it waits ends TIMED_OUT (the plane checks expiry once a second)
    expiring = await on_loop(embedded, lambda: embedded.plane.submit("never", {"n": 9}, ttl_ms=1))
    deadline = time.monotonic() + 10
    while (await on_loop(embedded, lambda: embedded.plane.job(expiring.id).status.value)) != "TIMED_OUT":
        assert time.monotonic() < deadline, "the job's TTL never expired"
        await asyncio.sleep(0.05)
    found = await samples(embedded, metrics)

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
    for job in queued[1:]:
        await job.cancel()


async def test_metrics_need_the_api_key(make_embedded: Any) -> None:
    embedded = make_embedded("")
    metrics = await attach(embedded)

    missing = await scrape(embedded, metrics, headers={})
    wrong = await scrape(embedded, metrics, headers={"Authorization": "Bearer nope"})
    raw = await scrape(embedded, metrics, headers={"Authorization": KEY})

    for response in (missing, wrong):
        assert response.status_code == 401
        body = response.json()
        assert body["code"] == "unauthorized" and body["error"] == body["message"]
    assert raw.status_code == 200


async def test_each_plane_has_its_own_registry_and_close_stops_observing(make_embedded: Any) -> None:
    embedded = make_embedded("NVIDIA_H200:1")
    first = await attach(embedded)
    second = await attach(embedded)  # no clash: registries are per PlaneMetrics, never the global one

    @Endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    async def never(n: int) -> int:
        return n

    await on_loop(embedded, second.close)
    job = await never.run(1)
    await job.cancel()

    assert await on_loop(embedded, lambda: second.observe not in embedded.plane.listeners)
    finished = key("flashpoint_jobs_finished_total", endpoint="never", status="CANCELLED", reason="cancelled")
    assert (await samples(embedded, first))[finished] == 1
    assert finished not in await samples(embedded, second)
    assert prometheus_client.REGISTRY.get_sample_value("flashpoint_queue_depth", {"endpoint": "never"}) is None


async def test_metrics_route_is_a_plain_route_for_any_app(make_embedded: Any) -> None:
    from starlette.applications import Starlette

    embedded = make_embedded("NVIDIA_H200:1")
    metrics = await attach(embedded)
    app = Starlette(routes=[metrics_route(metrics)])  # no api_keys in its state: no auth

    async def run() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://plane") as client:
            return await client.get("/metrics")

    response = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), embedded.loop))

    assert response.status_code == 200
    assert 'flashpoint_devices{model="NVIDIA H200",simulated="true",state="free"} 1.0' in response.text
