"""Fleet-scale placement: decisions per second on a FleetIndex, and one reconcile pass with 200 endpoints waiting.

Run it with ``python bench/bench_fleet.py`` (``--quick`` for a short run, ``--json`` for machine-readable output).
Simulated fleets of 128, 1,000 and 10,000 GPUs (``fleetspec.bench_fleet``: nodes of 8, every catalog model
round-robin by node), 200 endpoints with varied requests (single types, pools, fallback lists, some ending in ANY;
gpu_count 1, 2, 4 or 8) and 70% of the devices held by their workers (first fit, then churn, so the free devices
are scattered; one worker in ten may yield).

Measured at each size, side by side, so how the cost grows with the fleet is visible:

- placement decisions: ``place`` on the index for requests of those endpoints, the holders that may yield named by a
  ``Yielders`` (decisions/s over untimed loops, best of three; p50/p99 per call); the same with a plain predicate;
  and the anchor in the same run: the straightforward scan (tests/scheduler/reference_placement.py, what ``place``
  did before the index) on the same decisions, with the same answers checked;
- filtered decisions: the same decisions for endpoints whose node filters (``datacenter=``, ``min_cuda_version``)
  leave them half the nodes (every other node), the index's slower path, checked against the scan on those nodes;
- index upkeep: one ``hold`` + ``release`` pair;
- one full reconcile pass of a ``ControlPlane`` (StubBackend, MemoryJobStore) with 200 endpoints waiting: their
  workers hold 70% of the fleet and run jobs, a filler endpoint's workers hold the rest, and each endpoint has one
  more job queued than workers, so every pass asks placement for all 200 and every answer is "busy". The engine
  decides what predicate it passes: with a plain function, every busy candidate asks it about each holder of its
  devices; with a ``Yielders`` built once per plan, only about the few that may yield.

Targets (DESIGN.md section 7 and issue 10): >= 50,000 decisions/s at 10,000 GPUs, a 200-endpoint reconcile under
20 ms. These machines are noisy: compare figures from one run. A script, never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import percentiles, text_table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the reference lives with the tests

from tests.scheduler.reference_placement import reference_place

from flashpoint.backends.stub import StubBackend
from flashpoint.clock import FakeClock
from flashpoint.fleet.inventory import Device, Holder
from flashpoint.fleet.simulated import bench_fleet
from flashpoint.gpus import Candidate, GpuGroup, GpuType, candidates
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.placement.fit import Fit, NoFit, Yielders, place
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.spec import EndpointSpec, WorkerTarget, build_spec
from flashpoint.store.memory import MemoryJobStore

SIZES = (128, 1_000, 10_000)
ENDPOINTS = 200
HELD = 0.7
SEED = 10
TARGET_DECISIONS_PER_S = 50_000
TARGET_RECONCILE_MS = 20.0
TYPES = tuple(m for m in GpuType if m is not GpuType.ANY)
GROUPS = tuple(g for g in GpuGroup if g is not GpuGroup.ANY)


@dataclass(frozen=True)
class Request:
    name: str
    gpu: tuple[GpuType | GpuGroup, ...]
    cands: tuple[Candidate, ...]
    gpu_count: int


def make_requests(rng: random.Random, count: int = ENDPOINTS) -> list[Request]:
    """Varied requests: single types, pools, fallback lists of two or three, a fifth ending in ANY."""
    requests = []
    for i in range(count):
        shape = i % 5
        gpu: list[GpuType | GpuGroup]
        if shape == 0:
            gpu = [rng.choice(TYPES)]
        elif shape == 1:
            gpu = [rng.choice(GROUPS)]
        elif shape in (2, 3):
            gpu = [rng.choice(TYPES + GROUPS) for _ in range(rng.choice((2, 3)))]
        else:
            gpu = [rng.choice(TYPES + GROUPS), GpuGroup.ANY]
        gpu_count = rng.choice((1, 1, 1, 2, 2, 4, 8))
        requests.append(Request(f"ep{i:03d}", tuple(gpu), candidates(gpu), gpu_count))
    return requests


# --------------------------------------------------------------------------------------------------------------------
# the index alone: decisions, upkeep, and the scanning reference beside it


@dataclass
class Held:
    index: FleetIndex
    workers: list[tuple[Holder, tuple[Device, ...]]]
    may_yield: frozenset[str]


def fill(gpus: int, requests: Sequence[Request], rng: random.Random) -> Held:
    """Workers of the endpoints take 70% of the fleet by first fit; then as many workers again leave and are
    replaced, so the free devices end up scattered as they would after a while."""
    index = FleetIndex(bench_fleet(gpus))
    workers: list[tuple[Holder, tuple[Device, ...]]] = []
    held = 0
    serial = 0

    def top_up() -> None:
        nonlocal held, serial
        misses = 0
        while held < HELD * gpus and misses < 4 * len(requests):
            request = rng.choice(requests)
            fit = place(request.cands, request.gpu_count, index)
            if isinstance(fit, NoFit):
                misses += 1
                continue
            holder = Holder(f"{request.name}-w{serial}", request.name)
            serial += 1
            index.hold(fit.devices, holder)
            workers.append((holder, fit.devices))
            held += len(fit.devices)

    top_up()
    for _ in range(len(workers)):
        j = rng.randrange(len(workers))
        _, devices = workers[j]
        index.release(devices)
        held -= len(devices)
        workers[j] = workers[-1]
        workers.pop()
        top_up()
    may_yield = frozenset(h.worker_id for h, _ in workers if rng.random() < 0.1)
    return Held(index, workers, may_yield)


def best_rate(items: Sequence[Request], call: Callable[[Request], object], runs: int = 3) -> float:
    """Calls per second over ``items``: the best of ``runs`` passes."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for item in items:
            call(item)
        best = min(best, time.perf_counter() - start)
    return len(items) / best


def outcome(result: Fit | NoFit) -> str:
    if isinstance(result, NoFit):
        return "busy" if not result.never else "never"
    return "reclaim" if result.reclaim else "free"


def measure_index(gpus: int, decisions: int, reference_decisions: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    requests = make_requests(rng)
    held = fill(gpus, requests, rng)
    index, may_yield = held.index, held.may_yield

    def plain(holder: Holder) -> bool:
        return holder.worker_id in may_yield

    # the engine's way: the holders that may yield, named once per plan (the reclaim path visits only theirs)
    yieldable = Yielders(h for h, _ in held.workers if h.worker_id in may_yield)
    asked = [rng.choice(requests) for _ in range(decisions)]
    gc.collect()
    gc.disable()
    try:
        # decisions per second: untimed loops, the best of three (the least disturbed by the rest of the machine)
        per_s = best_rate(asked, lambda r: place(r.cands, r.gpu_count, index, yieldable))
        # the same with a plain predicate: the reclaim path asks it about every holder of the candidate
        plain_per_s = best_rate(asked, lambda r: place(r.cands, r.gpu_count, index, plain))
        # latency of each decision
        samples: list[float] = []
        clock = time.perf_counter_ns
        for request in asked:
            t0 = clock()
            place(request.cands, request.gpu_count, index, yieldable)
            samples.append((clock() - t0) / 1e9)
        # index upkeep: a worker takes the devices of a free fit, and gives them back
        pairs: list[float] = []
        holder = Holder("bench-upkeep", "bench")
        for request in asked[:5_000]:
            fit = place(request.cands, request.gpu_count, index)
            if isinstance(fit, Fit):
                t0 = clock()
                index.hold(fit.devices, holder)
                index.release(fit.devices)
                pairs.append((clock() - t0) / 1e9)
        # the anchor: the scan on the same decisions (fewer of them: it is slow), and the same answers
        snapshot = index.holders()
        devices = index.devices
        subset = asked[:reference_decisions]
        start = time.perf_counter()
        answers = [reference_place(r.cands, r.gpu_count, devices, snapshot, yieldable) for r in subset]
        reference_per_s = len(subset) / (time.perf_counter() - start)
        # an endpoint with node filters: half the nodes are left to it (the walk over the key's groups)
        nodes = sorted({d.node for d in devices})
        allowed = frozenset(nodes[::2])
        filtered_per_s = best_rate(asked, lambda r: place(r.cands, r.gpu_count, index, yieldable, allowed))
        filtered = [place(r.cands, r.gpu_count, index, yieldable, allowed) for r in subset]
        filtered_agree = filtered == [
            reference_place(r.cands, r.gpu_count, devices, snapshot, yieldable, allowed) for r in subset
        ]
    finally:
        gc.enable()
    results = [place(r.cands, r.gpu_count, index, yieldable) for r in asked]
    agree = all(mine == theirs for mine, theirs in zip(results, answers, strict=False))
    mix: dict[str, int] = {}
    for result in results:
        mix[outcome(result)] = mix.get(outcome(result), 0) + 1
    return {
        "gpus": gpus,
        "nodes": len({d.node for d in index.devices}),
        "held": len(index.holders()) / gpus,
        "decisions": len(asked),
        "per_s": per_s,
        "plain_predicate_per_s": plain_per_s,
        "filtered": {"per_s": filtered_per_s, "same_answers": filtered_agree},
        "latency": percentiles(samples),
        "outcomes": mix,
        "upkeep": percentiles(pairs),
        "reference": {"decisions": len(subset), "per_s": reference_per_s, "same_answers": agree},
    }


# --------------------------------------------------------------------------------------------------------------------
# the engine: one reconcile pass with 200 endpoints waiting

TARGET = WorkerTarget(import_path="bench.noop:handler")


def spec(request: Request) -> EndpointSpec:
    return build_spec(
        {
            "name": request.name,
            "gpu": list(request.gpu),
            "gpu_count": request.gpu_count,
            "workers": (0, 100_000),
            "scaler_type": "REQUEST_COUNT",
            "scaler_value": 1,
        }
    )


async def measure_reconcile(gpus: int, repeats: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    requests = make_requests(rng)
    plane = ControlPlane(MemoryJobStore(), StubBackend(bench_fleet(gpus)), worker_secret="x", clock=FakeClock())
    await plane.start(ticking=False)
    try:
        for request in requests:
            plane.register(spec(request), TARGET)

        async def run_new_workers() -> None:
            """Reconcile, then every worker that has no job yet takes one (it is ready and busy)."""
            plane.reconcile()
            await plane.settled()
            for worker in list(plane.workers.values()):
                if worker.live and not worker.jobs and worker.endpoint != "filler":
                    await plane.take(worker.endpoint, worker.id, 1, hold_s=0)

        # the endpoints' workers take 70% of the fleet: each round, endpoints in turn ask for one more worker
        while len(plane.index.holders()) < HELD * gpus:
            before = len(plane.index.holders())
            budget = HELD * gpus - before
            for request in rng.sample(requests, len(requests)):
                if budget <= 0:
                    break
                plane.submit(request.name, {})
                budget -= request.gpu_count
            await run_new_workers()
            if len(plane.index.holders()) == before:
                break
        held_by_endpoints = len(plane.index.holders())
        # a filler endpoint's workers take every device left, so nothing is free
        free = gpus - held_by_endpoints
        plane.register(spec(Request("filler", (GpuGroup.ANY,), candidates(GpuGroup.ANY), 1)), TARGET)
        for _ in range(free):
            plane.submit("filler", {})
        await run_new_workers()
        # every endpoint wants one worker more than it has
        for request in requests:
            plane.submit(request.name, {})
        workers = len(plane.workers)
        samples: list[float] = []
        gc.collect()
        gc.disable()
        try:
            for _ in range(repeats):
                t0 = time.perf_counter()
                plane.reconcile()
                samples.append(time.perf_counter() - t0)
        finally:
            gc.enable()
        await plane.settled()
        waiting = sum(1 for r in requests if plane.endpoint(r.name).waiting)
        return {
            "gpus": gpus,
            "held_by_endpoints": held_by_endpoints / gpus,
            "held": len(plane.index.holders()) / gpus,
            "workers": len(plane.workers),
            "waiting": waiting,
            "started_while_timed": len(plane.workers) - workers,
            "reconcile": percentiles(samples),
        }
    finally:
        await plane.close()


# --------------------------------------------------------------------------------------------------------------------
# report


def table(index_rows: Sequence[dict[str, Any]], reconcile_rows: Sequence[dict[str, Any]]) -> str:
    by_gpus = {row["gpus"]: row for row in reconcile_rows}
    rows = []
    for row in index_rows:
        ref = row["reference"]
        rec = by_gpus.get(row["gpus"])
        rows.append(
            (
                f"{row['gpus']:,}",
                f"{row['per_s']:,.0f}",
                f"{row['plain_predicate_per_s']:,.0f}",
                f"{row['filtered']['per_s']:,.0f}" + ("" if row["filtered"]["same_answers"] else " DIFFER"),
                f"{row['latency']['p50_ms'] * 1000:.1f} / {row['latency']['p99_ms'] * 1000:.1f}",
                f"{ref['per_s']:,.0f}",
                f"{row['per_s'] / ref['per_s']:,.0f}x" + ("" if ref["same_answers"] else " DIFFER"),
                f"{row['upkeep']['p50_ms'] * 1000:.1f}",
                f"{rec['reconcile']['p50_ms']:.2f} / {rec['reconcile']['p99_ms']:.2f}" if rec else "-",
            )
        )
    header = (
        "GPUs",
        "decisions/s",
        "(plain predicate)",
        "(node filter)",
        "p50 / p99 us",
        "scan decisions/s",
        "speedup",
        "hold+release us",
        "reconcile p50 / p99 ms",
    )
    return text_table(header, rows)


def verdict(index_rows: Sequence[dict[str, Any]], reconcile_rows: Sequence[dict[str, Any]]) -> str:
    biggest = max(index_rows, key=lambda r: r["gpus"])
    smallest = min(index_rows, key=lambda r: r["gpus"])
    growth = (smallest["per_s"] / biggest["per_s"], biggest["gpus"] / smallest["gpus"])
    placement_ok = biggest["per_s"] >= TARGET_DECISIONS_PER_S
    lines = [
        f"placement at {biggest['gpus']:,} GPUs: {biggest['per_s']:,.0f} decisions/s (target >= "
        f"{TARGET_DECISIONS_PER_S:,}): {'ok' if placement_ok else 'MISSED'}; a decision costs {growth[0]:.2f}x "
        f"at {growth[1]:.0f}x the fleet ({smallest['gpus']:,} -> {biggest['gpus']:,} GPUs)"
    ]
    if reconcile_rows:
        big = max(reconcile_rows, key=lambda r: r["gpus"])
        ok = big["reconcile"]["p50_ms"] < TARGET_RECONCILE_MS
        lines.append(
            f"reconcile at {big['gpus']:,} GPUs with {big['waiting']} endpoints waiting: "
            f"{big['reconcile']['p50_ms']:.2f} ms p50 (target < {TARGET_RECONCILE_MS:.0f} ms): "
            f"{'ok' if ok else 'MISSED'}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer decisions and reconcile passes")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument("--no-reconcile", action="store_true", help="measure the index only")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="fleet sizes in GPUs")
    args = parser.parse_args()
    decisions = 5_000 if args.quick else 20_000
    repeats = 10 if args.quick else 50
    log = sys.stderr if args.json else sys.stdout
    logging.getLogger("flashpoint").setLevel(logging.ERROR)  # the "can never run" warnings of the small fleets
    print(
        f"placement on simulated fleets of {', '.join(f'{s:,}' for s in args.sizes)} GPUs (nodes of 8, every "
        f"catalog model), {ENDPOINTS} endpoints, {HELD:.0%} held; {os.cpu_count()} CPUs; "
        f"Python {sys.version.split()[0]}",
        file=log,
    )
    index_rows = []
    reconcile_rows = []
    for gpus in args.sizes:
        reference_decisions = max(50, min(decisions, 2_000_000 // gpus))
        index_rows.append(measure_index(gpus, decisions, reference_decisions))
        if not args.no_reconcile:
            reconcile_rows.append(asyncio.run(measure_reconcile(gpus, repeats)))
    if args.json:
        print(json.dumps({"index": index_rows, "reconcile": reconcile_rows, "cpus": os.cpu_count()}, indent=2))
        return
    print()
    print(table(index_rows, reconcile_rows))
    print()
    for row in index_rows:
        mix = ", ".join(f"{k} {v / row['decisions']:.0%}" for k, v in sorted(row["outcomes"].items()))
        print(f"{row['gpus']:>6,} GPUs: {row['nodes']} nodes, {row['held']:.0%} held; decisions: {mix}")
    for rec in reconcile_rows:
        print(
            f"{rec['gpus']:>6,} GPUs: reconcile with {rec['waiting']} endpoints waiting, {rec['workers']} workers, "
            f"{rec['held_by_endpoints']:.0%} held by the endpoints' workers, {rec['held']:.0%} in all"
        )
    print()
    print(verdict(index_rows, reconcile_rows))


if __name__ == "__main__":
    main()
