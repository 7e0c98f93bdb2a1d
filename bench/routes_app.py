"""The HTTP-route endpoint ``bench/bench_routes.py`` measures: a no-op route and a stream, as Flash users declare them.

``flashpoint serve bench/routes_app.py`` serves it through the proxy (its workers are ``python -m flashpoint.worker
--routes --import routes_app:api``); the direct row talks to those same workers; Ray Serve's replicas serve the same
app, built by ``build_app`` (the route worker's own ``routeapp.create_app`` over these routes) on each replica.

``BENCH_ROUTES_REPLICAS`` (default 2) sets ``workers=(N, N)``: every worker is started before a request is measured,
and none stops while the direct row bypasses the proxy.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from flashpoint import Endpoint, GpuGroup

#: the stream's chunks after its first, and the pause before each
STREAM_REST = 2
STREAM_PAUSE_S = 0.02

_replicas = int(os.environ.get("BENCH_ROUTES_REPLICAS", "2"))
api = Endpoint(name="bench-routes", gpu=GpuGroup.ANY, workers=(_replicas, _replicas))


@api.get("/noop")
async def noop() -> dict[str, Any]:
    return {"ok": True}


@api.get("/stream")
async def stream() -> AsyncIterator[dict[str, int]]:
    # the first chunk at once, the rest later: the time to the first chunk is the route's, not the generator's
    yield {"chunk": 0}
    for i in range(1, STREAM_REST + 1):
        await asyncio.sleep(STREAM_PAUSE_S)
        yield {"chunk": i}


def build_app() -> Any:
    """The route worker's ASGI app over ``api``'s routes (Ray Serve's ingress builder, called on each replica)."""
    from flashpoint.sdk.routes import route_table
    from flashpoint.worker.routeapp import create_app

    return create_app(route_table(api))
