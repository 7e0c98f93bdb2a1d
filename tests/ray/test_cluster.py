"""The Ray backend on a real local Ray cluster: workers are Ray actors on nodes labelled with their GPU model."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from tests.conftest import eventually, snapshot
from tests.ray.conftest import RayCluster

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(180)]

A100 = "NVIDIA-A100-80GB-PCIe"
H200 = "NVIDIA-H200"
H100 = "NVIDIA-H100-80GB-HBM3"


async def becomes(job: Any, status: str, timeout: float = 60) -> None:
    """Poll a job handle until it reports ``status`` (bounded by ``timeout``)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while await job.status() != status:
        assert asyncio.get_running_loop().time() < deadline, f"job {job.id} never became {status}: {job.view}"
        await asyncio.sleep(0.05)


def where() -> dict[str, Any]:
    """Where the calling worker runs: its model, its Ray node and the GPU ids Ray gave it (run inside a worker)."""
    import os

    keys = ("FLASHPOINT_GPU_MODEL", "FLASHPOINT_RAY_NODE_ID", "CUDA_VISIBLE_DEVICES", "FLASHPOINT_GPU_SIMULATED")
    return {k: os.environ.get(k) for k in keys}


async def test_each_worker_lands_on_a_node_of_its_model(ray_cluster: RayCluster, ray_embedded) -> None:
    ray_embedded(ray_cluster)

    @Endpoint(name="on-a100", gpu=GpuType.NVIDIA_A100_80GB_PCIe)
    async def on_a100() -> dict:
        print("hello from a Ray node")  # the job's log lines travel back through the actor
        return where()

    @Endpoint(name="on-h200", gpu=GpuType.NVIDIA_H200)
    async def on_h200() -> dict:
        return where()

    @Endpoint(name="on-h100", gpu=GpuType.NVIDIA_H100_80GB_HBM3)
    async def on_h100() -> dict:
        return where()

    for fn, label, model in (
        (on_a100, A100, "NVIDIA A100 80GB PCIe"),
        (on_h200, H200, "NVIDIA H200"),
        (on_h100, H100, "NVIDIA H100 80GB HBM3"),
    ):
        job = await fn.run()
        assert await job.wait(timeout=60) == "COMPLETED", job.view
        out = job.output
        assert out["FLASHPOINT_RAY_NODE_ID"] == ray_cluster.node_id(label)
        assert out["FLASHPOINT_GPU_MODEL"] == model
        assert out["FLASHPOINT_GPU_SIMULATED"] == "1"
        placement = job.view.placement
        assert placement is not None and placement.gpu_model == model and placement.simulated
        assert placement.node.endswith(ray_cluster.node_id(label)[:8])
        # the job records the GPU id Ray gave the actor, which is the one the worker sees
        assert placement.device_ids == (int(out["CUDA_VISIBLE_DEVICES"]),)
        if fn is on_a100:  # the line may reach the plane (through Ray) just after the result (over HTTP)
            for _ in range(200):
                if job.view.logs:
                    break
                await job.status()
                await asyncio.sleep(0.05)
            assert job.view.logs == ("hello from a Ray node",)


async def test_fallback_keeps_declared_order_over_fleet_order(ray_cluster: RayCluster, ray_embedded, tmp_path) -> None:
    ray_embedded(ray_cluster)
    gate = tmp_path / "gate"

    # The A100 node comes first in the fleet; the declared order (L4: absent, then H100, then A100) wins.
    @Endpoint(name="ordered", gpu=[GpuType.NVIDIA_L4, GpuType.NVIDIA_H100_80GB_HBM3, GpuType.NVIDIA_A100_80GB_PCIe])
    async def ordered() -> dict:
        return where()

    out = await ordered()
    assert out["FLASHPOINT_RAY_NODE_ID"] == ray_cluster.node_id(H100)

    # First choice busy: the H200 is held by another endpoint's running job, so the next candidate is taken.
    @Endpoint(name="holder", gpu=GpuType.NVIDIA_H200)
    async def holder(gate: str) -> dict:
        import asyncio
        import os

        for _ in range(6000):
            if os.path.exists(gate):
                break
            await asyncio.sleep(0.01)
        return where()

    @Endpoint(name="second", gpu=[GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe])
    async def second() -> dict:
        return where()

    held = await holder.run(str(gate))
    await becomes(held, "IN_PROGRESS")
    out = await second()
    assert out["FLASHPOINT_RAY_NODE_ID"] == ray_cluster.node_id(A100)
    gate.touch()
    assert (await held.wait(timeout=60)) == "COMPLETED"
    assert held.output["FLASHPOINT_RAY_NODE_ID"] == ray_cluster.node_id(H200)


async def test_two_gpus_only_on_a_node_with_two_free_devices(ray_cluster: RayCluster, ray_embedded) -> None:
    embedded = ray_embedded(ray_cluster)

    # One H200 on its node: not enough for gpu_count=2, so the A100 node (two) takes it.
    @Endpoint(name="pair", gpu=[GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe], gpu_count=2)
    async def pair() -> dict:
        return where()

    out = await pair()
    assert out["FLASHPOINT_RAY_NODE_ID"] == ray_cluster.node_id(A100)
    assert sorted(out["CUDA_VISIBLE_DEVICES"].split(",")) == ["0", "1"]

    # Two workers of two H100 each share the four-H100 node without sharing a device.
    @Endpoint(name="h100-pairs", gpu=GpuType.NVIDIA_H100_80GB_HBM3, gpu_count=2, workers=(2, 2))
    async def h100_pairs(i: int) -> dict:
        import asyncio

        await asyncio.sleep(0.3)
        return {"i": i, **where()}

    outs = await asyncio.gather(*(h100_pairs(i) for i in range(6)))
    assert {o["FLASHPOINT_RAY_NODE_ID"] for o in outs} == {ray_cluster.node_id(H100)}
    seen = {o["CUDA_VISIBLE_DEVICES"] for o in outs}
    assert len(seen) == 2, seen
    ids = [i for pair_ids in seen for i in pair_ids.split(",")]
    assert sorted(ids) == ["0", "1", "2", "3"]

    # gpu_count=2 of H200 can never be: explained as not_in_fleet, with the most on one node.
    @Endpoint(name="h200-pair", gpu=GpuType.NVIDIA_H200, gpu_count=2)
    async def h200_pair() -> dict:
        return where()

    job = await h200_pair.run()
    explanation = await job.explain()
    assert explanation.never
    assert [r.code.value for r in explanation.reasons] == ["not_in_fleet"]
    assert "no node has 2 x NVIDIA H200 (the most on one node is 1)" in explanation.reasons[0].detail
    await job.cancel()
    assert snapshot(embedded, "h200-pair")["workers"] == []


async def test_impossible_request_is_explained_then_runs_when_a_node_joins(
    ray_cluster: RayCluster, ray_embedded, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flashpoint.plane")
    ray_embedded(ray_cluster)

    @Endpoint(name="b200", gpu=GpuType.NVIDIA_B200)
    async def b200() -> dict:
        return where()

    job = await b200.run()
    assert "which no node of this fleet can ever provide" in caplog.text
    explanation = await job.explain()
    assert explanation.never and explanation.status == "IN_QUEUE"
    assert explanation.reasons[0].code.value == "not_in_fleet"
    assert "NVIDIA B200" in explanation.reasons[0].detail
    assert await job.status() == "IN_QUEUE"

    ray_cluster.add("NVIDIA-B200", 1)
    assert await job.wait(timeout=60) == "COMPLETED"
    assert job.output["FLASHPOINT_RAY_NODE_ID"] == ray_cluster.node_id("NVIDIA-B200")
    assert not (await b200.explain()).never  # the verdict was made again when the node joined
    assert "can run now" in caplog.text


async def test_a_cpu_endpoint_reserves_cpus_on_a_node_of_its_datacenter(ray_cluster: RayCluster, ray_embedded) -> None:
    # Given a CPU-only node in EU-RO-1 (2 CPUs); the GPU nodes and the head have 1 CPU each and no datacenter
    eu = ray_cluster.cluster.add_node(num_cpus=2, num_gpus=0, labels={"datacenter": "EU-RO-1"})
    ray_cluster.cluster.wait_for_nodes()
    ray_embedded(ray_cluster)

    @Endpoint(name="eu-cpu", cpu="cpu3c-2-4", datacenter="EU-RO-1")
    async def eu_cpu() -> dict:
        import os

        return {k: os.environ.get(k) for k in ("FLASHPOINT_RAY_NODE_ID", "FLASHPOINT_CPU_CORES")}

    @Endpoint(name="too-big", cpu="cpu3c-4-8", datacenter="EU-RO-1")
    async def too_big() -> dict:
        return {}

    job = await eu_cpu.run()
    assert await job.wait(timeout=60) == "COMPLETED", job.view
    # the actor ran on the EU node, reserving its two CPUs, and the worker was told its cores
    assert job.output == {"FLASHPOINT_RAY_NODE_ID": str(eu.node_id), "FLASHPOINT_CPU_CORES": "0,1"}
    assert job.view.placement is not None and job.view.placement.node.endswith(str(eu.node_id)[:8])
    # an instance larger than every node of the datacenter is reported at once, from Ray's own resources
    explanation = await too_big.explain()
    assert explanation.never
    assert [r.code.value for r in explanation.reasons] == ["cpu_too_large", "datacenter"]
    assert "the largest eligible node has 2 vCPUs" in explanation.reasons[0].detail


async def test_node_lost_mid_job_requeues_it_and_it_completes_elsewhere(fresh_cluster, ray_embedded, tmp_path) -> None:
    cluster = fresh_cluster({A100: 2, H100: 1})
    embedded = ray_embedded(cluster)
    started = tmp_path / "started"

    @Endpoint(name="survivor", gpu=[GpuType.NVIDIA_A100_80GB_PCIe, GpuType.NVIDIA_H100_80GB_HBM3])
    async def survivor(started: str) -> dict:
        import asyncio
        import os

        if os.environ["FLASHPOINT_GPU_MODEL"] == "NVIDIA A100 80GB PCIe":
            open(started, "w").close()
            await asyncio.sleep(120)  # the A100 node is removed while this runs
        return where()

    job = await survivor.run(str(started))
    await eventually(started.exists, timeout=60, what="the job to start on the A100 node")
    assert await job.status() == "IN_PROGRESS"
    a100_node = cluster.node_id(A100)
    cluster.remove(A100)

    assert await job.wait(timeout=90) == "COMPLETED", job.view
    assert job.output["FLASHPOINT_RAY_NODE_ID"] == cluster.node_id(H100)
    view = job.view
    assert view.retries == 1
    assert view.placement is not None and view.placement.gpu_model == "NVIDIA H100 80GB HBM3"
    # the lost node's devices leave the fleet (read from Ray every second)
    await eventually(
        lambda: {row["model"] for row in embedded.run_sync(_fleet(embedded), timeout=10)} == {"NVIDIA H100 80GB HBM3"},
        what="the A100 node to leave the fleet",
    )
    rows = embedded.run_sync(_fleet(embedded), timeout=10)
    assert all(not row["node"].endswith(a100_node[:8]) for row in rows)


async def _fleet(embedded: Any) -> list[dict[str, Any]]:
    return list(embedded.plane.fleet_view())


async def test_actor_not_ready_in_time_is_killed_and_the_next_candidate_tried(
    ray_cluster: RayCluster, ray_embedded
) -> None:
    import ray

    embedded = ray_embedded(ray_cluster, FLASHPOINT_RAY_READY_TIMEOUT_S="3")

    # Something outside flashpoint takes the H200 through Ray: flashpoint's ledger still shows it free.
    @ray.remote(num_gpus=1, num_cpus=0, label_selector={"gpu-model": H200})
    class Squatter:
        def ping(self) -> str:
            return "here"

    squatter = Squatter.remote()  # type: ignore[attr-defined]
    try:
        assert await squatter.ping.remote() == "here"

        @Endpoint(name="patient", gpu=[GpuType.NVIDIA_H200, GpuType.NVIDIA_A100_80GB_PCIe])
        async def patient() -> dict:
            return where()

        out = await patient()
        assert out["FLASHPOINT_RAY_NODE_ID"] == ray_cluster.node_id(A100)
        rows = embedded.run_sync(_fleet(embedded), timeout=10)
        h200 = [row for row in rows if row["model"] == "NVIDIA H200"]
        assert h200 and all("set aside" in (row["endpoint"] or "") for row in h200), h200
    finally:
        ray.kill(squatter)


def test_serve_runs_workers_on_the_ray_cluster(ray_cluster: RayCluster, serve) -> None:
    import httpx

    served = serve("--backend", "ray", "--ray-address", ray_cluster.address, app="tests/apps/ray_app.py")
    response = httpx.post(
        f"{served.url}/v2/where/runsync", json={"input": {"tag": "served"}}, headers=served.headers, timeout=90
    )
    body = response.json()
    assert response.status_code == 200 and body["status"] == "COMPLETED", body
    assert body["output"]["tag"] == "served"
    assert body["output"]["FLASHPOINT_RAY_NODE_ID"] in (ray_cluster.node_id(H200), ray_cluster.node_id(A100))
    job = httpx.get(f"{served.url}/v1/jobs/{body['id']}", headers=served.headers, timeout=30).json()
    assert job["placement"]["gpuModel"] == body["output"]["FLASHPOINT_GPU_MODEL"]
    assert job["placement"]["simulated"] is True

    fleet = httpx.get(f"{served.url}/v1/fleet", headers=served.headers, timeout=30).json()
    models = sorted(row["model"] for row in fleet["devices"])
    assert models.count("NVIDIA H100 80GB HBM3") == 4 and models.count("NVIDIA A100 80GB PCIe") == 2


def test_gpus_command_reads_the_fleet_of_a_ray_cluster(ray_cluster: RayCluster, tmp_path) -> None:
    from typer.testing import CliRunner

    from flashpoint.cli import app

    env = {
        "FLASHPOINT_BACKEND": "ray",
        "FLASHPOINT_RAY_ADDRESS": ray_cluster.address,
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "FLASHPOINT_SIMULATED_GPUS": "",
    }
    result = CliRunner().invoke(app, ["gpus", "--json"], env=env)
    assert result.exit_code == 0, result.output
    import json

    body = json.loads(result.output)
    assert body["source"] == "ray"
    rows = body["fleets"][0]["devices"]
    counts: dict[tuple[str, bool, bool], int] = {}
    for r in rows:
        key = (r["model"], r["simulated"], r["coarse"])
        counts[key] = counts.get(key, 0) + 1
    # the module's fleet (another test may have added a node since)
    assert counts[("NVIDIA A100 80GB PCIe", True, False)] == 2
    assert counts[("NVIDIA H100 80GB HBM3", True, False)] == 4
    assert counts[("NVIDIA H200", True, False)] == 1


async def test_closing_while_a_worker_starts_gives_up_the_start_and_leaves_ray_alone(ray_cluster: RayCluster) -> None:
    import ray

    from flashpoint.backends.base import Launch
    from flashpoint.backends.ray import RayBackend
    from flashpoint.errors import BackendError

    backend = RayBackend(ray_cluster.address, ready_timeout_s=60)
    await asyncio.to_thread(backend.connect)
    try:
        # something outside flashpoint holds the H200, so Ray keeps the worker's actor pending
        squatter = ray.remote(num_gpus=1, num_cpus=0, label_selector={"gpu-model": H200})(_Squatter).remote()
        assert await squatter.ping.remote() == "here"
        (h200,) = [d for d in backend.devices() if d.model_name == "NVIDIA H200"]
        exits: list[tuple[str, int]] = []
        launch = Launch("w-pending", "ep", ["true"], {}, (h200,))
        start = asyncio.ensure_future(backend.start(launch, lambda *line: None, lambda w, c: exits.append((w, c))))
        await eventually(lambda: backend._starting, what="the actor to be created")
    finally:
        await backend.close()
    with pytest.raises(BackendError):
        await asyncio.wait_for(start, 30)
    assert not ray.is_initialized()  # no Ray call after close() started (or joined) a Ray of its own
    assert exits == []


class _Squatter:
    def ping(self) -> str:
        return "here"
