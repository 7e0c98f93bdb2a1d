"""The official runpod client (sync and asyncio) against a real `flashpoint serve` on loopback, unchanged."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Served, native, wait_status

runpod = pytest.importorskip("runpod")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def server(runpod_served: Any) -> Served:
    # the webhook receivers of these tests listen on 127.0.0.1, which a server refuses unless told otherwise
    return runpod_served("--allow-private-webhooks")


def test_echo_unicode_and_a_256_kb_payload_through_the_sync_client(server: Served) -> None:
    endpoint = runpod.Endpoint("echo")
    text = "héllo ✓ 日本語 🚀"
    assert endpoint.run_sync({"text": text}, timeout=60)["payload"] == {"text": text}
    big = "x" * (256 * 1024)
    job = endpoint.run({"blob": big})
    output = job.output(timeout=60)
    assert output["payload"]["blob"] == big
    assert job.status() == "COMPLETED"


async def test_echo_through_the_asyncio_client(server: Served) -> None:
    from runpod.http_client import AsyncClientSession

    async with AsyncClientSession() as session:
        endpoint = runpod.AsyncioEndpoint("echo", session)
        job = await endpoint.run({"n": 1})
        assert await job.output(timeout=60) == {"payload": {"n": 1}, "gpu": "NVIDIA H200"}
        assert await job.status() == "COMPLETED"
        health = await endpoint.health()
        assert health["jobs"]["completed"] >= 1


def test_failure_keeps_the_remote_traceback(server: Served) -> None:
    job = runpod.Endpoint("fail").run({"message": "bad thing"})
    assert wait_status(job, {"FAILED"}) == "FAILED"
    raw = httpx.get(f"{server.url}/v2/fail/status/{job.job_id}", headers=server.headers).json()
    assert "ValueError" in raw["error"] and "bad thing" in raw["error"] and "Traceback" in raw["error"]
    view = native(server, f"/jobs/{job.job_id}")
    assert view["error"]["type"] == "ValueError"
    assert view["error"]["message"] == "bad thing"
    assert view["reason"] == "user_error"
    # Runpod's client quirk: run_sync returns None for a FAILED job instead of raising
    assert runpod.Endpoint("fail").run_sync({"message": "again"}, timeout=60) is None


def test_cancel_a_queued_and_a_running_job(server: Served, tmp_path: Path) -> None:
    endpoint = runpod.Endpoint("slow")
    marker = tmp_path / "cancelled"
    running = endpoint.run({"seconds": 60, "marker": str(marker)})
    wait_status(running, {"IN_PROGRESS"})
    queued = endpoint.run({"seconds": 60})  # workers=1: waits behind the running one
    assert queued.status() == "IN_QUEUE"
    assert queued.cancel() == {"id": queued.job_id, "status": "CANCELLED"}
    assert running.cancel()["status"] == "CANCELLED"
    deadline = time.monotonic() + 30
    while not marker.exists():  # the handler got CancelledError through job-stop
        assert time.monotonic() < deadline, "the running handler was not stopped"
        time.sleep(0.05)
    assert runpod.Endpoint("slow").run_sync({"seconds": 0}, timeout=60) == "slept"  # and the worker goes on


def test_cancel_of_a_running_sync_handler_is_sticky_and_the_worker_goes_on(server: Served) -> None:
    endpoint = runpod.Endpoint("sync-slow")
    job = endpoint.run({"seconds": 2})
    wait_status(job, {"IN_PROGRESS"})
    assert job.cancel()["status"] == "CANCELLED"
    assert endpoint.run_sync({"seconds": 0}, timeout=60) == "slept"  # the one worker (workers=1) took the next job
    raw = httpx.get(f"{server.url}/v2/sync-slow/status/{job.job_id}", headers=server.headers).json()
    assert raw["status"] == "CANCELLED" and "output" not in raw


def test_execution_timeout_policy_ends_timed_out(server: Served) -> None:
    job = runpod.Endpoint("slow").run({"input": {"seconds": 60}, "policy": {"executionTimeout": 1000}})
    assert wait_status(job, {"TIMED_OUT"}) == "TIMED_OUT"
    assert native(server, f"/jobs/{job.job_id}")["reason"] == "execution_timeout"


def test_ttl_expiry_times_out_a_queued_job_then_deletes_it(server: Served, receiver: Receiver) -> None:
    busy = runpod.Endpoint("slow").run({"seconds": 60})
    wait_status(busy, {"IN_PROGRESS"})
    expiring = runpod.Endpoint("slow").run({"input": {"seconds": 0}, "policy": {"ttl": 1000}, "webhook": receiver.url})
    body = receiver.wait_for(expiring.job_id)
    assert body["status"] == "TIMED_OUT" and body["reason"] == "queue_ttl_expired"
    deadline = time.monotonic() + 15
    while True:  # past its TTL the job is gone: 404, as on Runpod
        response = httpx.get(f"{server.url}/v2/slow/status/{expiring.job_id}", headers=server.headers)
        if response.status_code == 404:
            assert response.json()["code"] == "not_found"
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    busy.cancel()


def test_purge_retry_and_health_counters(server: Served) -> None:
    slow = runpod.Endpoint("slow")
    busy = slow.run({"seconds": 60})
    wait_status(busy, {"IN_PROGRESS"})
    for _ in range(3):
        slow.run({"seconds": 0})
    assert slow.health()["jobs"]["inQueue"] == 3
    assert slow.purge_queue() == {"removed": 3, "status": "completed"}
    assert slow.health()["jobs"]["inQueue"] == 0
    busy.cancel()

    fail = runpod.Endpoint("fail")
    job = fail.run({"message": "once"})
    wait_status(job, {"FAILED"})
    before = fail.health()["jobs"]
    retried = httpx.post(f"{server.url}/v2/fail/retry/{job.job_id}", headers=server.headers).json()
    assert retried == {"id": job.job_id, "status": "IN_QUEUE"}
    deadline = time.monotonic() + 30
    while (after := fail.health()["jobs"])["failed"] == before["failed"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert after["retried"] == before["retried"] + 1 and after["failed"] == before["failed"] + 1
    finished = httpx.post(f"{server.url}/v2/echo/retry/{job.job_id}", headers=server.headers)
    assert finished.status_code == 404  # another endpoint's job
    workers = fail.health()["workers"]
    assert set(workers) >= {"idle", "running", "initializing", "ready", "throttled", "unhealthy"}


def test_stream_through_the_sync_client(server: Served) -> None:
    job = runpod.Endpoint("count").run({"n": 5, "delay": 0.05})
    assert list(job.stream()) == [{"i": i} for i in range(5)]
    assert job.output(timeout=30) == [{"i": i} for i in range(5)]


def test_wrong_or_missing_key_is_a_json_401(server: Served) -> None:
    runpod.api_key = "wrong"
    with pytest.raises(RuntimeError, match="401 Unauthorized"):
        runpod.Endpoint("echo").run({"x": 1})
    response = httpx.post(f"{server.url}/v2/echo/run", json={"input": {}})
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/json"
    assert response.json()["code"] == "unauthorized"
    raw_key = httpx.get(f"{server.url}/v2/echo/health", headers={"Authorization": server.key})
    assert raw_key.status_code == 200


# ----------------------------------------------------------------------------------------------------------------------
# webhooks


class Receiver:
    """A webhook receiver on 127.0.0.1: answers 500 to the first `failures` posts, then records bodies."""

    def __init__(self, failures: int = 0) -> None:
        import uvicorn
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        self.bodies: list[dict[str, Any]] = []
        self.attempts = 0
        self.failures = failures
        self._event = threading.Event()

        async def hook(request: Request) -> JSONResponse:
            self.attempts += 1
            if self.attempts <= self.failures:
                return JSONResponse({"no": True}, status_code=500)
            self.bodies.append(json.loads(await request.body()))
            self._event.set()
            return JSONResponse({"ok": True})

        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        config = uvicorn.Config(Starlette(routes=[Route("/hook", hook, methods=["POST"])]), log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True)
        self.thread.start()

    def wait_for(self, job_id: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for body in self.bodies:
                if body["id"] == job_id:
                    return body
            assert self._event.wait(max(0.0, deadline - time.monotonic())), f"no webhook for {job_id}"
            self._event.clear()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hook = Receiver(failures=1)
    yield hook
    hook.close()


def test_webhook_is_posted_on_completion_and_retried(server: Served, receiver: Receiver) -> None:
    job = runpod.Endpoint("echo").run({"input": {"n": 7}, "webhook": receiver.url})
    body = receiver.wait_for(job.job_id)
    assert body["status"] == "COMPLETED" and body["output"]["payload"] == {"n": 7}
    assert receiver.attempts == 2  # the first attempt got a 500 and was retried


def test_s3_config_reaches_the_handler(server: Served) -> None:
    s3 = {"accessId": "a", "accessSecret": "s", "bucketName": "b", "endpointUrl": "http://127.0.0.1:9"}
    job = runpod.Endpoint("passthrough").run({"input": {"key": "s3Config"}, "s3Config": s3})
    assert job.output(timeout=60) == s3
