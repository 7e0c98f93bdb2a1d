"""Ray backend benchmark: warm call latency and 10,000-job throughput of flashpoint on Ray, beside plain Ray actors.

Run it with ``python bench/bench_ray.py`` (``--quick`` for a short run, ``--json`` for machine-readable output); it
needs Ray (``pip install -e '.[bench]'``). The script starts a local two-node Ray cluster (``ray.cluster_utils``): a
head with 1 CPU and no GPU, and one node with 1 CPU and 2 simulated GPUs labelled ``gpu-model=NVIDIA-A100-80GB-PCIe``
and ``flashpoint-simulated=1``. No dashboard, no usage reporting, no Ray auto-connect (``RAY_ENABLE_AUTO_CONNECT=0``:
a stray Ray call after shutdown fails rather than joining another Ray instance on the machine).

flashpoint runs with ``FLASHPOINT_BACKEND=ray`` against that cluster, so each worker is a ``WorkerHost`` actor on the
GPU node whose worker process pulls jobs from the embedded plane over HTTP. The endpoints match ``bench_core.py``:
``bench-noop`` (``gpu=GpuGroup.AMPERE_80, workers=1``) for the warm calls, and ``bench-many`` (``workers=2,
scaler_type="REQUEST_COUNT", scaler_value=1``) for the throughput batch: 200 warm-up jobs start a worker on each
simulated A100, the clock starts once both pull jobs, and the batch is submitted with ``await many.run(i)`` and then
awaited with ``handle.wait()``. The endpoints live in a small module written to a temporary folder on ``sys.path``, so
workers import them by path.

The plain Ray anchor runs on the same cluster, after flashpoint's workers are gone: actors with ``num_gpus=1``,
``num_cpus=0`` (as ``WorkerHost``) and ``label_selector={"gpu-model": "NVIDIA-A100-80GB-PCIe"}``, one for the warm
calls (sequential ``ray.get(actor.noop.remote(i))``) and two for the throughput batch (all calls submitted round-robin,
then one ``ray.get``). Ratios are flashpoint/Ray; there is no official target. These machines are noisy: compare ratios
from one run, not absolute figures. A script, never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import textwrap
import time
from typing import Any

from benchlib import percentiles, text_table

# Everything that reads the environment at import time (Ray, flashpoint's settings) must see these first.
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # A Ray call made after ray.shutdown() must fail here, not run ray.init() on its own and join whichever Ray
    # instance it finds on this machine (the Ray backend can do that when it is closed while a worker is starting).
    "RAY_ENABLE_AUTO_CONNECT": "0",
}
os.environ.update(RAY_ENV)
STATE_DIR = tempfile.mkdtemp(prefix="flashpoint-bench-ray-")
os.environ["FLASHPOINT_STATE_DIR"] = STATE_DIR
os.environ.pop("FLASHPOINT_URL", None)  # the embedded plane, never a server named in the caller's environment
os.environ.pop("FLASHPOINT_SIMULATED_GPUS", None)  # the fleet is the Ray cluster's

GPU_LABEL = "NVIDIA-A100-80GB-PCIe"
NODE_LABELS = {"gpu-model": GPU_LABEL, "flashpoint-simulated": "1"}
GPUS = 2
MODULE = "flashpoint_bench_ray_app"
APP = textwrap.dedent(
    """
    from flashpoint import Endpoint, GpuGroup


    @Endpoint(name="bench-noop", gpu=GpuGroup.AMPERE_80, workers=1)
    async def noop(x: int) -> int:
        return x


    # as in bench_core.py: REQUEST_COUNT/1 asks for the second worker as soon as two jobs are queued or running
    @Endpoint(name="bench-many", gpu=GpuGroup.AMPERE_80, workers=2, scaler_type="REQUEST_COUNT", scaler_value=1)
    async def many(x: int) -> int:
        return x
    """
)


# --------------------------------------------------------------------------------------------------------------------
# helpers


def start_cluster() -> Any:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, num_gpus=GPUS, labels=dict(NODE_LABELS))
        cluster.wait_for_nodes(timeout=60)
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


# --------------------------------------------------------------------------------------------------------------------
# flashpoint on Ray


async def on_plane(plane: Any, fn: Any) -> Any:
    """``fn()`` computed on the embedded plane's loop (its state is that loop's alone)."""

    async def compute() -> Any:
        return fn()

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(compute(), plane.loop))


def placements(plane: Any, endpoint: str) -> list[dict[str, Any]]:
    return [
        w.to_json()["placement"] | {"state": w.state.value} for w in plane.plane.endpoint(endpoint).workers.values()
    ]


async def flashpoint_measure(args: argparse.Namespace, opened: list[Any]) -> dict[str, Any]:
    from flashpoint.sdk import default_connection

    app = __import__(MODULE)
    start = time.perf_counter()
    plane = await asyncio.to_thread(default_connection.connect)  # starts the plane; the Ray backend joins the cluster
    connect_s = time.perf_counter() - start
    opened.append(plane)

    async def warm() -> dict[str, Any]:
        start = time.perf_counter()
        await app.noop(-1)  # places the worker's actor and starts its process
        first_s = time.perf_counter() - start
        for i in range(args.warmup):
            await app.noop(i)
        samples = []
        for i in range(args.calls):
            start = time.perf_counter()
            await app.noop(i)
            samples.append(time.perf_counter() - start)
        return {**percentiles(samples), "first_call_s": first_s}

    async def throughput() -> dict[str, Any]:
        # Warm-up: enough concurrent jobs that the scaler starts both workers (one per A100) before the clock starts.
        # The 200 jobs can all finish on the first worker while the second one is still starting (its GPU is the one
        # bench-noop's idle worker yields): wait until both pull jobs, so the batch measures two workers throughout.
        await asyncio.gather(*(app.many(i) for i in range(200)))
        start = time.perf_counter()
        while True:
            workers = await on_plane(plane, lambda: placements(plane, "bench-many"))
            ready = sum(1 for w in workers if w["state"] in ("IDLE", "RUNNING"))
            if ready >= GPUS:
                break
            if time.perf_counter() - start > args.overall_timeout:
                raise RuntimeError(f"only {ready} of {GPUS} bench-many workers ready: {workers}")
            await asyncio.sleep(0.05)
        ready_wait_s = time.perf_counter() - start
        submitted: list[float] = []
        start = time.perf_counter()
        handles = await asyncio.gather(*(app.many.run(i) for i in range(args.jobs)))
        submitted.append(time.perf_counter())
        statuses = await asyncio.gather(*(h.wait(timeout=args.overall_timeout) for h in handles))
        elapsed = time.perf_counter() - start
        failed = sum(1 for s in statuses if s != "COMPLETED")
        if failed:
            raise RuntimeError(f"{failed} of {args.jobs} jobs did not complete")
        return {
            "jobs": args.jobs,
            "seconds": elapsed,
            "per_s": args.jobs / elapsed,
            "submit_s": submitted[0] - start,
            "workers": workers,
            "second_worker_wait_s": ready_wait_s,
        }

    warm_result = await asyncio.wait_for(warm(), args.overall_timeout)
    noop_workers = await on_plane(plane, lambda: placements(plane, "bench-noop"))
    throughput_result = await asyncio.wait_for(throughput(), args.overall_timeout)
    return {
        "connect_s": connect_s,
        "warm": {**warm_result, "workers": noop_workers},
        "throughput": throughput_result,
    }


def run_flashpoint(args: argparse.Namespace, address: str) -> dict[str, Any]:
    os.environ["FLASHPOINT_BACKEND"] = "ray"
    os.environ["FLASHPOINT_RAY_ADDRESS"] = address
    from flashpoint.sdk import default_connection

    opened: list[Any] = []
    try:
        return asyncio.run(flashpoint_measure(args, opened))
    finally:
        # Stop the workers (their actors give the simulated GPUs back) and leave Ray, which the backend joined.
        start = time.perf_counter()
        for plane in opened:
            plane.close()
        default_connection.use(None)
        print(f"flashpoint plane closed in {time.perf_counter() - start:.2f} s", file=sys.stderr)


# --------------------------------------------------------------------------------------------------------------------
# plain Ray actors


def run_ray(args: argparse.Namespace, address: str) -> dict[str, Any]:
    import ray

    start = time.perf_counter()
    ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    connect_s = time.perf_counter() - start
    try:

        @ray.remote
        class Noop:
            def noop(self, x: int) -> int:
                return x

        options = {"num_gpus": 1, "num_cpus": 0, "label_selector": {"gpu-model": GPU_LABEL}}
        # flashpoint's actors may still be handing their GPUs back: creation waits for them (bounded by the timeout)
        start = time.perf_counter()
        actor = Noop.options(**options).remote()  # type: ignore[attr-defined]
        ray.get(actor.noop.remote(-1), timeout=120)
        first_s = time.perf_counter() - start
        for i in range(args.warmup):
            ray.get(actor.noop.remote(i), timeout=30)
        samples = []
        for i in range(args.calls):
            start = time.perf_counter()
            ray.get(actor.noop.remote(i), timeout=30)
            samples.append(time.perf_counter() - start)
        warm = {**percentiles(samples), "first_call_s": first_s}

        actors = [actor, Noop.options(**options).remote()]  # type: ignore[attr-defined]
        ray.get([a.noop.remote(i) for a in actors for i in range(100)], timeout=120)  # warm-up, as flashpoint's
        start = time.perf_counter()
        refs = [actors[i % len(actors)].noop.remote(i) for i in range(args.jobs)]
        submit_s = time.perf_counter() - start
        ray.get(refs, timeout=args.overall_timeout)
        elapsed = time.perf_counter() - start
        throughput = {
            "jobs": args.jobs,
            "seconds": elapsed,
            "per_s": args.jobs / elapsed,
            "submit_s": submit_s,
            "actors": len(actors),
        }
        for a in actors:
            ray.kill(a)
    finally:
        ray.shutdown()
    return {"connect_s": connect_s, "warm": warm, "throughput": throughput}


# --------------------------------------------------------------------------------------------------------------------
# report


def ratios(fp: dict[str, Any], ray: dict[str, Any]) -> dict[str, float]:
    return {
        "warm_p50": fp["warm"]["p50_ms"] / ray["warm"]["p50_ms"],
        "warm_p99": fp["warm"]["p99_ms"] / ray["warm"]["p99_ms"],
        "warm_mean": fp["warm"]["mean_ms"] / ray["warm"]["mean_ms"],
        "throughput": fp["throughput"]["per_s"] / ray["throughput"]["per_s"],
        "first_call": fp["warm"]["first_call_s"] / ray["warm"]["first_call_s"],
    }


def table(fp: dict[str, Any], ray: dict[str, Any]) -> str:
    r = ratios(fp, ray)
    rows = [
        ("warm call p50", f"{fp['warm']['p50_ms']:.3f} ms", f"{ray['warm']['p50_ms']:.3f} ms", r["warm_p50"]),
        ("warm call p99", f"{fp['warm']['p99_ms']:.3f} ms", f"{ray['warm']['p99_ms']:.3f} ms", r["warm_p99"]),
        ("warm call mean", f"{fp['warm']['mean_ms']:.3f} ms", f"{ray['warm']['mean_ms']:.3f} ms", r["warm_mean"]),
        (
            f"{fp['throughput']['jobs']:,} no-op jobs",
            f"{fp['throughput']['per_s']:,.0f} /s",
            f"{ray['throughput']['per_s']:,.0f} /s",
            r["throughput"],
        ),
        (
            "first call on a new worker",
            f"{fp['warm']['first_call_s']:.2f} s",
            f"{ray['warm']['first_call_s']:.2f} s",
            r["first_call"],
        ),
    ]
    header = ("measurement", "flashpoint on Ray", "plain Ray actor", "flashpoint/ray")
    return text_table(header, [(label, a, b, f"{ratio:.2f}x") for label, a, b, ratio in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short run: fewer calls and jobs")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument("--calls", type=int, help="timed warm calls (default 2000; quick 200)")
    parser.add_argument("--jobs", type=int, help="jobs in the throughput batch (default 10000; quick 1000)")
    parser.add_argument("--overall-timeout", type=float, default=120.0, help="seconds allowed for one phase")
    args = parser.parse_args()
    args.calls = args.calls or (200 if args.quick else 2000)
    args.jobs = args.jobs or (1000 if args.quick else 10_000)
    args.warmup = 50 if args.quick else 200

    try:
        import ray
    except ImportError:
        sys.exit("bench_ray.py needs Ray: pip install -e '.[bench]'")

    log = sys.stderr if args.json else sys.stdout
    app_dir = tempfile.mkdtemp(prefix="flashpoint-bench-ray-app-")
    with open(os.path.join(app_dir, f"{MODULE}.py"), "w") as handle:
        handle.write(APP)
    sys.path.insert(0, app_dir)  # before the plane starts: its workers get this import path
    cluster = None
    try:
        start = time.perf_counter()
        cluster = start_cluster()
        print(
            f"Ray cluster at {cluster.address} in {time.perf_counter() - start:.1f} s: head (1 CPU) + node (1 CPU, "
            f"{GPUS} simulated {GPU_LABEL}); {os.cpu_count()} CPUs; Python {sys.version.split()[0]}",
            file=log,
        )
        print("flashpoint on Ray: warm calls, then the throughput batch", file=log)
        fp = run_flashpoint(args, cluster.address)
        print("plain Ray actors: the same measurements", file=log)
        ray_results = run_ray(args, cluster.address)
    finally:
        try:
            if ray.is_initialized():  # a phase that failed half-way may leave this driver connected
                ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
        finally:
            shutil.rmtree(app_dir, ignore_errors=True)
            shutil.rmtree(STATE_DIR, ignore_errors=True)
    if args.json:
        body = {
            "flashpoint_on_ray": fp,
            "ray_actor": ray_results,
            "ratios": ratios(fp, ray_results),
            "cluster": {"gpus": GPUS, "labels": NODE_LABELS, "cpus": os.cpu_count()},
        }
        print(json.dumps(body, indent=2))
        return
    print()
    print(table(fp, ray_results))


if __name__ == "__main__":
    main()
