"""Core benchmark: warm call latency, 10,000-job throughput and cold start, beside Ray in the same run.

Run it with ``python bench/bench_core.py`` (``--quick`` for a short run, ``--json`` for machine-readable output).
flashpoint runs on simulated GPUs (``NVIDIA_A100_80GB_PCIe:2``) with real worker processes. When ``import ray``
works (``pip install -e '.[bench]'``), the same three measurements run on Ray and the ratios are printed next to the
targets of DESIGN.md section 7. These machines are noisy: compare ratios from one run, not absolute figures.
A script, never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from typing import Any

from benchlib import percentiles, text_table

# Everything that reads the environment at import time must see these first.
FLEET = "NVIDIA_A100_80GB_PCIe:2"
os.environ["FLASHPOINT_SIMULATED_GPUS"] = FLEET
os.environ.setdefault("FLASHPOINT_STATE_DIR", tempfile.mkdtemp(prefix="flashpoint-bench-"))
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
os.environ.update(RAY_ENV)

from flashpoint import Endpoint, GpuGroup  # noqa: E402
from flashpoint.sdk import default_connection  # noqa: E402

#: DESIGN.md section 7: (metric, comparison, target ratio flashpoint/ray)
TARGETS = {"warm_p50": ("<=", 1.0), "throughput": (">=", 1.0), "cold": ("<=", 0.2)}


# --------------------------------------------------------------------------------------------------------------------
# helpers


def timed_subprocess(code: str, env: dict[str, str], expect: str, timeout: float) -> float:
    """Seconds from starting a fresh interpreter to the line ``expect`` on its stdout (shutdown not counted)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        deadline = start + timeout
        while time.perf_counter() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.strip() == expect:
                elapsed = time.perf_counter() - start
                proc.wait(timeout)
                return elapsed
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise RuntimeError(f"cold start did not print {expect!r} within {timeout}s; stderr:\n{err[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def median_of(repeats: int, run: Callable[[], float]) -> dict[str, Any]:
    runs = [run() for _ in range(repeats)]
    return {"median_s": statistics.median(runs), "runs_s": runs}


# --------------------------------------------------------------------------------------------------------------------
# flashpoint


@Endpoint(name="bench-noop", gpu=GpuGroup.AMPERE_80, workers=1)
async def noop(x: int) -> int:
    return x


# workers=2 with REQUEST_COUNT/1 asks for a second worker as soon as two jobs are queued or running. With the default
# scaler (QUEUE_DELAY, 4 s) the second worker would only start once the oldest job had waited 4 s, so most of a
# 10,000-job batch would run on one worker and the figure would measure the scaler's patience, not the system.
@Endpoint(name="bench-many", gpu=GpuGroup.AMPERE_80, workers=2, scaler_type="REQUEST_COUNT", scaler_value=1)
async def many(x: int) -> int:
    return x


async def flashpoint_warm(calls: int, warmup: int) -> dict[str, Any]:
    for i in range(warmup):
        await noop(i)
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        await noop(i)
        samples.append(time.perf_counter() - start)
    return percentiles(samples)


async def flashpoint_throughput(jobs: int, per_job_s: float, overall_s: float) -> dict[str, Any]:
    # Warm-up: enough concurrent jobs that the scaler starts both workers (one per A100) before the clock starts.
    await asyncio.gather(*(many(i) for i in range(200)))

    async def batch() -> list[str]:
        handles = await asyncio.gather(*(many.run(i) for i in range(jobs)))
        submitted.append(time.perf_counter())
        statuses: list[str] = await asyncio.gather(*(h.wait(timeout=per_job_s) for h in handles))
        return statuses

    submitted: list[float] = []
    start = time.perf_counter()
    statuses = await asyncio.wait_for(batch(), overall_s)
    elapsed = time.perf_counter() - start
    failed = sum(1 for s in statuses if s != "COMPLETED")
    if failed:
        raise RuntimeError(f"{failed} of {jobs} jobs did not complete")
    return {"jobs": jobs, "seconds": elapsed, "per_s": jobs / elapsed, "submit_s": submitted[0] - start}


FLASHPOINT_COLD = textwrap.dedent(
    """
    import asyncio
    from flashpoint import Endpoint, GpuGroup

    @Endpoint(name="cold", gpu=GpuGroup.ANY)
    async def f(x: int) -> int:
        return x

    print("result", asyncio.run(f(1)), flush=True)
    """
)


def flashpoint_cold(repeats: int) -> dict[str, Any]:
    def once() -> float:
        env = {**os.environ, "FLASHPOINT_STATE_DIR": tempfile.mkdtemp(prefix="flashpoint-bench-cold-")}
        return timed_subprocess(FLASHPOINT_COLD, env, "result 1", timeout=120)

    return median_of(repeats, once)


def run_flashpoint(args: argparse.Namespace) -> dict[str, Any]:
    async def measure() -> dict[str, Any]:
        warm = await flashpoint_warm(args.calls, args.warmup)
        throughput = await flashpoint_throughput(args.jobs, per_job_s=120, overall_s=args.overall_timeout)
        return {"warm": warm, "throughput": throughput}

    results = asyncio.run(measure())
    plane = default_connection.connect()
    close = getattr(plane, "close", None)
    if close is not None:  # stop the workers so that Ray gets the CPUs to itself
        close()
    default_connection.use(None)
    results["cold"] = flashpoint_cold(args.repeats)
    return results


# --------------------------------------------------------------------------------------------------------------------
# ray (imported only when present; started without dashboard or usage reporting)


RAY_COLD = textwrap.dedent(
    """
    import ray

    ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False, configure_logging=False)

    @ray.remote
    class Noop:
        def call(self, x):
            return x

    actor = Noop.remote()
    print("result", ray.get(actor.call.remote(1)), flush=True)
    ray.shutdown()
    """
)


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def run_ray(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False, configure_logging=False)
    try:

        @ray.remote
        class Noop:
            def call(self, x: int) -> int:
                return x

        @ray.remote
        def task(x: int) -> int:
            return x

        actor = Noop.remote()  # type: ignore[attr-defined]
        for i in range(args.warmup):
            ray.get(actor.call.remote(i))
        samples = []
        for i in range(args.calls):
            start = time.perf_counter()
            ray.get(actor.call.remote(i))
            samples.append(time.perf_counter() - start)
        warm = percentiles(samples)
        ray.kill(actor)

        ray.get([task.remote(i) for i in range(200)], timeout=120)  # warm-up: start the task workers
        start = time.perf_counter()
        refs = [task.remote(i) for i in range(args.jobs)]
        submit_s = time.perf_counter() - start
        ray.get(refs, timeout=args.overall_timeout)
        elapsed = time.perf_counter() - start
        throughput = {"jobs": args.jobs, "seconds": elapsed, "per_s": args.jobs / elapsed, "submit_s": submit_s}
    finally:
        ray.shutdown()
    env = {**os.environ, **RAY_ENV}
    cold = median_of(args.repeats, lambda: timed_subprocess(RAY_COLD, env, "result 1", timeout=180))
    return {"warm": warm, "throughput": throughput, "cold": cold}


# --------------------------------------------------------------------------------------------------------------------
# report


def ratios(fp: dict[str, Any], ray: dict[str, Any]) -> dict[str, float]:
    return {
        "warm_p50": fp["warm"]["p50_ms"] / ray["warm"]["p50_ms"],
        "warm_p99": fp["warm"]["p99_ms"] / ray["warm"]["p99_ms"],
        "throughput": fp["throughput"]["per_s"] / ray["throughput"]["per_s"],
        "cold": fp["cold"]["median_s"] / ray["cold"]["median_s"],
    }


def verdict(metric: str, ratio: float) -> str:
    if metric not in TARGETS:
        return ""
    op, target = TARGETS[metric]
    ok = ratio <= target if op == "<=" else ratio >= target
    return f"{op} {target:.1f}x  {'ok' if ok else 'MISSED'}"


def table(fp: dict[str, Any], ray: dict[str, Any] | None) -> str:
    rows: list[tuple[str, str, str, str, str]] = []
    r = ratios(fp, ray) if ray else {}

    def add(label: str, metric: str, fp_text: str, ray_text: str) -> None:
        known = metric in r
        ratio = f"{r[metric]:.2f}x" if known else "-"
        rows.append((label, fp_text, ray_text if ray else "-", ratio, verdict(metric, r[metric]) if known else ""))

    add("warm call p50", "warm_p50", f"{fp['warm']['p50_ms']:.3f} ms", f"{ray['warm']['p50_ms']:.3f} ms" if ray else "")
    add("warm call p99", "warm_p99", f"{fp['warm']['p99_ms']:.3f} ms", f"{ray['warm']['p99_ms']:.3f} ms" if ray else "")
    add(
        f"{fp['throughput']['jobs']:,} no-op jobs",
        "throughput",
        f"{fp['throughput']['per_s']:,.0f} /s",
        f"{ray['throughput']['per_s']:,.0f} /s" if ray else "",
    )
    add(
        "cold start to first result",
        "cold",
        f"{fp['cold']['median_s']:.2f} s",
        f"{ray['cold']['median_s']:.2f} s" if ray else "",
    )
    header = ("measurement", "flashpoint", "ray", "flashpoint/ray", "target")
    return text_table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short run: fewer calls and jobs, one cold start")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray anchor even when Ray is installed")
    parser.add_argument("--calls", type=int, help="timed warm calls (default 2000; quick 300)")
    parser.add_argument("--jobs", type=int, help="jobs in the throughput batch (default 10000; quick 1000)")
    parser.add_argument("--repeats", type=int, help="cold starts, the median is reported (default 3; quick 1)")
    parser.add_argument("--overall-timeout", type=float, default=600.0, help="seconds allowed for one batch")
    args = parser.parse_args()
    args.calls = args.calls or (300 if args.quick else 2000)
    args.jobs = args.jobs or (1000 if args.quick else 10_000)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.warmup = 50 if args.quick else 200

    with_ray = not args.no_ray and ray_available()
    log = sys.stderr if args.json else sys.stdout
    print(f"flashpoint on simulated GPUs ({FLEET}); {os.cpu_count()} CPUs; Python {sys.version.split()[0]}", file=log)
    fp = run_flashpoint(args)
    ray = None
    if with_ray:
        print("ray anchor: running the same measurements on Ray", file=log)
        ray = run_ray(args)
    elif not args.no_ray:
        print("ray anchor: skipped, `import ray` failed (pip install -e '.[bench]')", file=log)
    if args.json:
        body: dict[str, Any] = {"flashpoint": fp, "ray": ray, "fleet": FLEET, "cpus": os.cpu_count()}
        if ray is not None:
            body["ratios"] = ratios(fp, ray)
            body["targets"] = {k: {"op": op, "ratio": v} for k, (op, v) in TARGETS.items()}
        print(json.dumps(body, indent=2))
        return
    print()
    print(table(fp, ray))


if __name__ == "__main__":
    main()
