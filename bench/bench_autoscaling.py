"""Autoscaling that knows its costs (issue 25, point 5): keep-warm policies compared on invocation traces, and a
burst on a real server.

1. *Policies on traces.* ``flashpoint.simulation.invocations`` replays seeded invocation traces through the real
   control plane (stub backend, fake clock, simulated H200s), one endpoint per traffic pattern, under each policy:
   ``idle_timeout`` fixed at 60 s, fixed at 600 s, and ``"auto"``. The patterns (``--hours`` of each, ``--seed``):
   periodic (every 5 minutes, +-5 s, 2 s runs), hourly (every hour +-30 s, 10 s runs), bursty (bursts of 5-20 calls
   about 3 s apart, bursts about 20 minutes apart, 1 s runs), rare (Poisson, a call every 2 hours on average, 5 s runs)
   and openb (the arrival times of openb's default trace in its busiest ``--hours`` window, as they are, 5 s runs).
   A worker's cold start is drawn per start as process start + imports, sampled from this machine (``python -c
   "import flashpoint.worker.runtime"`` timed ``--samples`` times), plus a model load drawn from a lognormal with a
   median of 6 s (sigma 0.5): a stand-in for a model's ``__init__``, as the GPUs are simulated.
   Reported per policy: cold starts and their rate, the p99 wait they add, warm-idle GPU-seconds, and the GPU-seconds
   workers spent starting (a pre-warm's start is GPU time too). Target: ``auto`` has at least 30% fewer cold starts
   than fixed 60 s with no more warm-idle GPU-seconds.
2. *A burst on a real server* (``--no-burst`` skips it): ``flashpoint serve bench/burst_app.py`` on 4 simulated GPUs,
   an HTTP-route endpoint at zero workers with ``workers=(0, 4)`` and ``target_concurrency=4``; 50 requests at once
   (``GET /bench-burst/work``, 0.2 s of work each); the time until all are answered, and the workers at the end.

Run: ``python bench/bench_autoscaling.py [--hours 24] [--seed 0] [--json]``. A script, never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_routes import start_target
from benchlib import text_table

from flashpoint.simulation.invocations import POLICIES, Invocation, bursty, periodic, rare, run_invocations, spaced

BENCH = Path(__file__).resolve().parent
OPENB = BENCH.parent.parent / "shared" / "traces" / "openb" / "openb_pod_list_default.csv"
#: a model load's seconds: lognormal, median 6 s
INIT_MEDIAN_S, INIT_SIGMA = 6.0, 0.5
BURST = 50
API_KEY = "bench-key"


def measured_starts(samples: int) -> list[float]:
    """Seconds for a fresh interpreter to import the worker's runtime, on this machine."""
    found = []
    for _ in range(samples):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import flashpoint.worker.runtime"], check=True, timeout=60)
        found.append(time.perf_counter() - began)
    return found


def openb_window(hours: float) -> list[float]:
    """openb's default trace's arrival times in its busiest ``hours``-long window, from 0."""
    with OPENB.open() as f:
        times = sorted(float(row["creation_time"]) for row in csv.DictReader(f))
    span = hours * 3600
    best, lo = (0, 0), 0
    for hi, t in enumerate(times):
        while times[lo] < t - span:
            lo += 1
        best = max(best, (hi - lo + 1, lo))
    start = times[best[1]]
    return spaced([t for t in times if start <= t < start + span], hours=hours)


def traces(hours: float, seed: int) -> list[Invocation]:
    rng = random.Random(seed)
    calls = [Invocation("periodic", t, 2.0) for t in periodic(rng, hours=hours, period_s=300, jitter_s=5)]
    calls += [Invocation("hourly", t, 10.0) for t in periodic(rng, hours=hours, period_s=3600, jitter_s=30)]
    calls += [Invocation("bursty", t, 1.0) for t in bursty(rng, hours=hours, between_s=1200, size=(5, 20), within_s=3)]
    calls += [Invocation("rare", t, 5.0) for t in rare(rng, hours=hours, mean_s=7200)]
    if OPENB.exists():
        calls += [Invocation("openb", t, 5.0) for t in openb_window(hours)]
    return calls


def policies(args: argparse.Namespace, starts: list[float]) -> dict[str, Any]:
    calls = traces(args.hours, args.seed)
    results: dict[str, Any] = {}
    for name, idle in POLICIES.items():
        rng = random.Random(args.seed + 1)  # the same cold starts, drawn in the same order, for every policy

        def cold_start(rng: random.Random = rng) -> float:
            return rng.choice(starts) + rng.lognormvariate(0.0, INIT_SIGMA) * INIT_MEDIAN_S

        began = time.perf_counter()
        results[name] = run_invocations(calls, idle, cold_start)
        results[name]["wall_s"] = round(time.perf_counter() - began, 1)
        print(f"  {name}: {results[name]['cold_starts']} cold starts, {results[name]['idle_gpu_s']:,.0f} idle GPU-s "
              f"({results[name]['wall_s']} s)", file=sys.stderr)  # fmt: skip
    return results


async def burst(tmp: Path) -> dict[str, Any]:
    import httpx

    env = {**os.environ, "FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:4", "FLASHPOINT_API_KEY": API_KEY,
           "FLASHPOINT_STATE_DIR": str(tmp / "state")}  # fmt: skip
    env.pop("FLASHPOINT_URL", None)
    command = [sys.executable, "-m", "flashpoint", "serve", str(BENCH / "burst_app.py"), "--port", "0",
               "--db", str(tmp / "jobs.db")]  # fmt: skip
    target = start_target("flashpoint", command, env, "flashpoint serving", tmp, timeout=60)
    try:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        limits = httpx.Limits(max_connections=BURST)
        async with httpx.AsyncClient(base_url=target.url, headers=headers, timeout=120, limits=limits) as client:
            began = time.perf_counter()
            answers = await asyncio.gather(*(client.get("/bench-burst/work") for _ in range(BURST)))
            took = time.perf_counter() - began
            rows = (await client.get("/v1/endpoints")).json()["endpoints"]
        workers = next(len(r.get("workers", [])) for r in rows if r["name"].endswith("bench-burst"))
        return {
            "requests": BURST,
            "ok": sum(1 for a in answers if a.status_code == 200),
            "all_answered_s": round(took, 2),
            "workers_at_end": workers,
        }
    finally:
        target.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=5, help="cold starts of the worker's runtime measured")
    parser.add_argument("--no-burst", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    starts = measured_starts(args.samples)
    print(f"worker runtime import, {len(starts)} runs: median {statistics.median(starts):.2f} s", file=sys.stderr)
    results: dict[str, Any] = {"measured_start_s": [round(s, 3) for s in starts], "policies": policies(args, starts)}
    fixed, auto = results["policies"]["fixed 60 s"], results["policies"]["auto"]
    fewer = 1 - auto["cold_starts"] / fixed["cold_starts"] if fixed["cold_starts"] else 0.0
    results["target"] = {
        "fewer_cold_starts_than_fixed_60": round(fewer, 3),
        "idle_ratio_to_fixed_60": round(auto["idle_gpu_s"] / fixed["idle_gpu_s"], 3) if fixed["idle_gpu_s"] else None,
        "met": fewer >= 0.3 and auto["idle_gpu_s"] <= fixed["idle_gpu_s"],
    }
    if not args.no_burst:
        with tempfile.TemporaryDirectory(prefix="bench-burst-") as tmp:
            results["burst"] = asyncio.run(burst(Path(tmp)))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    rows = []
    for name, report in results["policies"].items():
        wait = report["cold_wait_s"] or {}
        rows.append([name, f"{report['calls']:,}", f"{report['cold_starts']:,} ({report['cold_start_rate']:.1%})",
                     f"{wait.get('p99') or 0:.1f}", f"{report['idle_gpu_s']:,.0f}", f"{report['starting_gpu_s']:,.0f}",
                     f"{report['starts']:,}"])  # fmt: skip
    print(text_table(["policy", "calls", "cold starts", "p99 wait s", "idle GPU-s", "starting GPU-s", "starts"], rows))
    for name, report in results["policies"].items():
        per = ", ".join(f"{e} {f['cold_starts']}/{f['calls']} cold, {f['idle_gpu_s']:,.0f} idle"
                        for e, f in report["endpoints"].items())  # fmt: skip
        print(f"  {name}: {per}")
    target = results["target"]
    print(f"target: auto {target['fewer_cold_starts_than_fixed_60']:.0%} fewer cold starts than fixed 60 s at "
          f"{target['idle_ratio_to_fixed_60']}x its idle GPU-s: {'MET' if target['met'] else 'MISSED'}")  # fmt: skip
    if "burst" in results:
        b = results["burst"]
        print(f"burst: {b['ok']}/{b['requests']} answered in {b['all_answered_s']} s from zero workers "
              f"(workers=(0, 4)); {b['workers_at_end']} worker(s) at the end")  # fmt: skip


if __name__ == "__main__":
    main()
