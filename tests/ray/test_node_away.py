"""A node that leaves a Ray cluster, on real ``ray start`` processes: a head and two GPU nodes on loopback addresses
(simulated GPUs: an H200 on one, an A100 on the other), and the H200 node's raylet killed with ``kill -9``.

Ray lists a node whose raylet died as alive until it has missed its heartbeats (about 12-15 s). Meanwhile the plane
must not start workers there (each would wait for that, then die, and once counted as a failed start), the fallback
endpoint must take the other node's A100 at once, the lost actor must be said to be lost with its node (no signal was
sent), and a model only that node has is waiting for it to return, not "can never run on this fleet". Also a cluster
that uses Ray's token authentication says so, at once, when flashpoint has no token or another.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.hosting.embedded import EmbeddedServer
from tests.conftest import eventually
from tests.ray.raystart import RayStartCluster, wait_gone

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]

H200_IP, A100_IP = "127.0.0.3", "127.0.0.4"


@pytest.fixture
def ray_start() -> Iterator[Callable[..., RayStartCluster]]:
    clusters: list[RayStartCluster] = []

    def start(**env: str) -> RayStartCluster:
        cluster = RayStartCluster.start(**env)
        clusters.append(cluster)
        return cluster

    yield start
    for cluster in clusters:
        cluster.shutdown()


def where() -> dict[str, Any]:
    """Where the calling worker runs (inside a worker)."""
    import os

    return {k: os.environ.get(k) for k in ("FLASHPOINT_GPU_MODEL", "FLASHPOINT_RAY_NODE_ID")}


async def test_a_node_whose_raylet_dies_is_set_aside_at_once_and_waited_for(
    ray_start: Callable[..., RayStartCluster],
    make_embedded: Callable[..., EmbeddedServer],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="flashpoint")
    cluster = ray_start()
    cluster.add(H200_IP, "NVIDIA-H200")
    cluster.add(A100_IP, "NVIDIA-A100-80GB-PCIe")
    embedded = make_embedded("", FLASHPOINT_BACKEND="ray", FLASHPOINT_RAY_ADDRESS=cluster.address)
    started = tmp_path / "started"

    @Endpoint(name="either", gpu=[GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe])
    async def either(started: str) -> dict[str, Any]:
        import asyncio
        import os

        if os.environ["FLASHPOINT_GPU_MODEL"] == "NVIDIA H200":
            open(started, "w").close()
            await asyncio.sleep(240)  # its node's raylet is killed while this runs
        return where()

    @Endpoint(name="h200-only", gpu=GpuType.NVIDIA_H200)
    async def h200_only() -> dict[str, Any]:
        return where()

    # Given a job running on the H200 node, and another waiting for the H200
    job = await either.run(str(started))
    await eventually(started.exists, timeout=90, what="the job to start on the H200 node")
    waiting = await h200_only.run()

    # When the H200 node's raylet is killed
    raylet = cluster.raylet_pid(H200_IP)
    os.kill(raylet, signal.SIGKILL)
    wait_gone(raylet)

    # Then the job is not lost: it runs again on the A100, once
    assert await job.wait(timeout=120) == "COMPLETED", job.view
    assert job.output["FLASHPOINT_GPU_MODEL"] == "NVIDIA A100 80GB PCIe"
    assert job.view.retries == 1
    # the H200's job waits for its node, not "can never run", in every reading of it
    explanation = await waiting.explain()
    assert await waiting.status() == "IN_QUEUE"
    assert not explanation.never, explanation
    assert [r.code.value for r in explanation.reasons] == ["node_away"], explanation
    assert explanation.summary.startswith("waiting for its node to return: node 127.0.0.3/")
    options = ["--url", embedded.url, "--key", embedded.api_key]
    explained = await _cli("explain", "h200-only", *options)
    assert "waiting for its node to return" in explained and "node_away" in explained
    assert "can never run" not in explained
    status = await _cli("status", *options, "--json")
    assert "waiting for its node to return" in status and "can never run" not in status

    # no start went to the dead node but the one lost there, and nothing counted as a failed start
    starts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("starting worker ")]
    assert sum("on NVIDIA H200" in line for line in starts) == 1, starts

    async def failures() -> dict[str, int]:
        return {name: embedded.plane.endpoint(name).start_failures for name in ("either", "h200-only")}

    assert embedded.run_sync(failures(), timeout=10) == {"either": 0, "h200-only": 0}
    # the lost worker was lost with its node, in true words
    assert f"is away (its raylet at {H200_IP}:" in caplog.text, caplog.text[-3000:]
    assert "SIGHUP" not in caplog.text

    # When an H200 node joins again, the waiting job runs there
    cluster.add(H200_IP, "NVIDIA-H200")
    assert await waiting.wait(timeout=120) == "COMPLETED", waiting.view
    assert waiting.output["FLASHPOINT_GPU_MODEL"] == "NVIDIA H200"


async def _cli(*args: str) -> str:
    """Run ``flashpoint ARGS`` as a real process; its output (it must succeed)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "flashpoint", *args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, out.decode()
    return out.decode()


_CONNECT = """
import json
import sys
from flashpoint.backends.ray import RayBackend
from flashpoint.errors import Error
try:
    backend = RayBackend(sys.argv[1])
    backend.connect()
except Error as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps({"devices": len(backend.devices())}))
"""


def _connect(address: str, **env: str) -> dict[str, Any]:
    """Join the cluster from a fresh process with only ``env``'s Ray settings: what it says."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    done = subprocess.run(
        [sys.executable, "-c", _CONNECT, address],
        env={**clean, "RAY_USAGE_STATS_ENABLED": "0", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_cluster_that_wants_a_token_says_how_to_give_it(ray_start: Callable[..., RayStartCluster]) -> None:
    cluster = ray_start(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="the-clusters-token")

    missing = _connect(cluster.address)
    assert missing["error"] == "ConfigError", missing
    assert "uses Ray's token authentication and flashpoint sent no token" in missing["message"]
    assert "RAY_AUTH_MODE=token" in missing["message"] and "RAY_AUTH_TOKEN" in missing["message"]
    assert "FLASHPOINT_RAY_ADDRESS" not in missing["message"]

    wrong = _connect(cluster.address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="not-the-token")
    assert wrong["error"] == "ConfigError", wrong
    assert "refused flashpoint's Ray token (read from RAY_AUTH_TOKEN)" in wrong["message"]

    assert _connect(cluster.address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="the-clusters-token") == {"devices": 0}
