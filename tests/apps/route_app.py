"""Route endpoints served by the stand-in worker (``route_stub_worker.py``, an unmodified Runpod load-balanced worker),
for ``flashpoint serve`` in the route proxy's end-to-end tests. Each test uses endpoints of its own, so their order does
not matter. Fleet: ``FLEET`` (the tests set it as FLASHPOINT_SIMULATED_GPUS)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from flashpoint import Endpoint, GpuType
from flashpoint.sdk.endpoint import EndpointCommand
from flashpoint.spec import RouteSpec, ServerlessScalerType

FLEET = "NVIDIA_H200:8,NVIDIA_A100_80GB_PCIe:1"
STUB = str(Path(__file__).with_name("route_stub_worker.py"))
ROUTES = (
    RouteSpec("GET", "/echo", "echo"),
    RouteSpec("POST", "/echo", "echo"),
    RouteSpec("PUT", "/items/{item_id}", "update"),
    RouteSpec("PATCH", "/items/{item_id}", "patch"),
    RouteSpec("DELETE", "/items/{item_id}", "delete"),
    RouteSpec("GET", "/stream", "stream"),
    RouteSpec("GET", "/slow", "slow"),
)


def route_endpoint(name: str, **options: Any) -> EndpointCommand:
    """An endpoint whose workers are the stand-in: a command endpoint's spec, made a route endpoint's."""
    command = Endpoint(name=name, worker_command=["python", STUB], **options)
    assert isinstance(command, EndpointCommand)
    spec = dataclasses.replace(command.spec, kind="routes", routes=ROUTES)
    return EndpointCommand(spec, command.worker_target())


#: methods, query, body, headers, auth, streaming, 413, metrics
api = route_endpoint("api", gpu=GpuType.NVIDIA_H200, workers=(0, 1), idle_timeout=300)
#: scale from zero: nothing else calls it, so its first request finds no worker
cold = route_endpoint("cold", gpu=GpuType.NVIDIA_H200, workers=(0, 1), idle_timeout=300)
#: a GPU no node has: 503 at once, with the explanation
nowhere = route_endpoint("nowhere", gpu=GpuType.NVIDIA_B200)
#: holds the one A100 for good (its minimum), so ``blocked`` waits busy
holder = route_endpoint("holder", gpu=GpuType.NVIDIA_A100_80GB_PCIe, workers=(1, 1))
blocked = route_endpoint("blocked", gpu=GpuType.NVIDIA_A100_80GB_PCIe)
#: its worker is killed mid-request
fragile = route_endpoint("fragile", gpu=GpuType.NVIDIA_H200, workers=(0, 1), idle_timeout=300)
#: two workers at all times: requests spread by fewest in flight
pair = route_endpoint("pair", gpu=GpuType.NVIDIA_H200, workers=(2, 2))
#: REQUEST_COUNT, one request per worker: concurrent requests start workers; idle ones stop after a second
burst = route_endpoint(
    "burst",
    gpu=GpuType.NVIDIA_H200,
    workers=(0, 3),
    idle_timeout=1,
    scaler_type=ServerlessScalerType.REQUEST_COUNT,
    scaler_value=1,
)
