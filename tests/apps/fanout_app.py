"""Fan-out as Flash's ``03_mixed_workers`` example does it: code in a worker awaiting a queue endpoint.

A route (``fanout-api``) and a queue function (``fanout-pair``) each await the GPU queue function ``classify``; the
plane gave their workers its caller URL and key (``FLASHPOINT_CALLER_URL``, ``FLASHPOINT_CALLER_KEY``), so the call
needs no set-up. ``/probe`` tries that key where it must be refused (``tests/e2e/test_fanout.py``).
Fleet: ``FLEET`` (the tests set it as FLASHPOINT_SIMULATED_GPUS).
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from flashpoint import Endpoint, GpuType

FLEET = "NVIDIA_H200:2"


@Endpoint(name="fanout-classify", gpu=GpuType.NVIDIA_H200, workers=(0, 1), idle_timeout=300)
async def classify(text: str) -> dict[str, Any]:
    return {"label": "long" if len(text) > 5 else "short", "gpu": os.environ.get("FLASHPOINT_GPU_MODEL", "")}


@Endpoint(name="fanout-pair", cpu="cpu3c-1-2", workers=(0, 1), idle_timeout=300)
async def classify_pair(text: str) -> list[dict[str, Any]]:
    """A queue function awaiting another queue function, twice."""
    return [await classify(text), await classify(text * 3)]


api = Endpoint(name="fanout-api", cpu="cpu3c-1-2", workers=(0, 1), idle_timeout=300)


@api.post("/classify")
async def classify_route(text: str) -> dict[str, Any]:
    """A route awaiting a queue function (Flash's pipeline.py)."""
    return {"text": text, "result": await classify(text)}


@api.post("/probe")
async def probe(other_job: str) -> dict[str, int]:
    """What the plane answers this worker's caller key on each kind of route (status codes, by name)."""
    url = os.environ["FLASHPOINT_CALLER_URL"]
    key = os.environ["FLASHPOINT_CALLER_KEY"]
    worker = os.environ["FLASHPOINT_WORKER_ID"]
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=auth, timeout=30) as client:
        mine = (await client.post("/v2/fanout-classify/run", json={"input": {"text": "mine"}})).json()["id"]
        codes = {
            "own_status": await client.get(f"/v2/fanout-classify/status/{mine}"),
            "own_wait": await client.get(f"/v1/jobs/{mine}/wait", params={"timeout": "30"}),
            "other_status": await client.get(f"/v2/fanout-classify/status/{other_job}"),
            "other_cancel": await client.post(f"/v2/fanout-classify/cancel/{other_job}"),
            "other_job": await client.get(f"/v1/jobs/{other_job}"),
            "endpoint_check": await client.get("/v1/endpoints/fanout-classify"),
            "v1_endpoints": await client.get("/v1/endpoints"),
            "v1_explain": await client.get("/v1/endpoints/fanout-classify/explain"),
            "v1_fleet": await client.get("/v1/fleet"),
            "purge": await client.post("/v2/fanout-classify/purge-queue"),
            "health": await client.get("/v2/fanout-classify/health"),
            "worker_take": await client.get(f"/v2/fanout-api/job-take/{worker}"),
            "tampered": await client.get(
                f"/v2/fanout-classify/status/{mine}", headers={"Authorization": f"Bearer {_tampered(key)}"}
            ),
        }
    return {name: response.status_code for name, response in codes.items()}


def _tampered(key: str) -> str:
    """``key`` with its MAC's first character changed: always a different key (never a no-op, whatever the MAC)."""
    head, _, mac = key.rpartition(".")
    return f"{head}.{'B' if mac[0] == 'A' else 'A'}{mac[1:]}"
