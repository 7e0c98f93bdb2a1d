"""``FLASHPOINT_BACKEND=ray`` with no address: the embedded plane starts a one-node Ray here, labelled from this
machine's GPUs (simulated here), with nothing phoning home."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(180)]

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os
    from flashpoint import Endpoint, GpuType

    @Endpoint(name="here", gpu=[GpuType.NVIDIA_B200, GpuType.NVIDIA_H200])
    async def here() -> dict:
        import os
        return {k: os.environ.get(k) for k in ("FLASHPOINT_GPU_MODEL", "FLASHPOINT_RAY_NODE_ID")}

    async def main():
        job = await here.run()
        await job.wait(timeout=120)
        import ray
        node = ray.nodes()[0]
        print(json.dumps({
            "output": job.output,
            "placement": job.view.placement.to_json(),
            "labels": node["Labels"],
            "gpus": node["Resources"].get("GPU"),
            "env": {k: os.environ.get(k) for k in (
                "RAY_USAGE_STATS_ENABLED", "RAY_USAGE_STATS_REPORT_URL", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")},
            "dashboard": ray.worker.get_dashboard_url(),
        }))

    asyncio.run(main())
    """
)


def test_embedded_ray_starts_a_labelled_local_node_without_phoning_home(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        FLASHPOINT_BACKEND="ray",
        FLASHPOINT_SIMULATED_GPUS="NVIDIA_H200:1",
        FLASHPOINT_STATE_DIR=str(tmp_path / "state"),
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
        HOME=str(tmp_path / "home"),  # where Ray 2.59+ keeps the token of a new local Ray
    )
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=150, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # its token is this user's alone (Ray would write it 0644 in a 0755 ~/.ray: issue 20 point 3)
    token = tmp_path / "home" / ".ray" / "auth_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    # Ray is joined from the plane's thread; its warning about a SIGTERM handler there says nothing to act on
    assert "SIGTERM handler is not set" not in result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["output"]["FLASHPOINT_GPU_MODEL"] == "NVIDIA H200"
    assert report["placement"]["gpuModel"] == "NVIDIA H200" and report["placement"]["simulated"] is True
    assert report["labels"]["gpu-model"] == "NVIDIA-H200" and report["labels"]["flashpoint-simulated"] == "1"
    assert report["gpus"] == 1.0
    assert report["env"] == {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }
    assert not report["dashboard"]


def test_an_address_where_no_cluster_answers_fails_at_once_with_what_to_do() -> None:
    from flashpoint.backends.ray import RayBackend
    from flashpoint.errors import BackendError, ConfigError

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: nothing answers there
        with pytest.raises(BackendError, match="no Ray cluster answers at 127.0.0.1:.*ray start --head"):
            RayBackend(f"127.0.0.1:{port}").connect()
    with pytest.raises(ConfigError, match="is not HOST:PORT"):
        RayBackend("headnode").connect()
