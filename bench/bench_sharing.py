"""Sharing a fleet: the openb trace replayed through the real control plane under each placement policy, side by side.

Run it with ``python bench/bench_sharing.py`` (``--json`` for machine-readable output; ``--modes fill`` or
``--traces default`` for a part; ``--arrivals N`` for shorter timed replays, which judge no target but speed).
What ``flashpoint simulate`` does (flashpoint.simulation, decision 0114), for:

- the ``default`` and ``gpuspec33`` openb traces in ``fill`` and ``timed`` (``--load 0.9``, 30,000 arrivals, seed 0)
  modes, and ``multigpu50`` in ``fill`` mode (it has no times), on openb's 1,213-node, 6,212-GPU fleet;
- under the plane's ``first``, ``pack`` and ``spread`` policies, with the trace's qos classes as priorities and
  without (multigpu50 has no classes: once).

The traces are in ``../shared/traces/openb/`` beside the repository (``--traces-dir`` elsewhere). Targets (issue 24,
point 7), each printed with whether it is met: each replay under 60 s; in fill mode ``pack`` allocates at least as
much of the fleet at 100% asked as ``first`` on every trace, and more than ``spread`` on default and multigpu50; in
timed mode, 8-GPU tasks' p99 wait under ``pack`` at most ``first``'s and below ``spread``'s; with priorities, the high
class's p99 wait under 60 s of simulated time while the lower classes wait longer. The simulator is never tuned to
them. A script, never a test.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib import text_table

from flashpoint.simulation import ReplayOptions, load_sim_fleet, read_trace, run_replay
from flashpoint.simulation.replay import MIN_ARRIVALS, POLICIES

TRACES_DIR = Path(__file__).resolve().parents[2] / "shared" / "traces" / "openb"
FLEET = "openb_node_list_gpu_node.csv"
#: trace -> its file and the modes it is replayed in
TRACES = {
    "default": ("openb_pod_list_default.csv", ("fill", "timed")),
    "gpuspec33": ("openb_pod_list_gpuspec33.csv", ("fill", "timed")),
    "multigpu50": ("openb_pod_list_multigpu50.csv", ("fill",)),
}
#: traces without classes are replayed once (with and without priorities are the same replay)
NO_CLASSES = {"multigpu50"}
LOAD = 0.9
TARGET_WALL_S = 60.0
TARGET_HIGH_P99_S = 60.0


def replays(args: argparse.Namespace) -> list[dict[str, Any]]:
    fleet = load_sim_fleet(str(args.traces_dir / FLEET))
    rows: list[dict[str, Any]] = []
    for name in args.traces:
        file, modes = TRACES[name]
        for priorities in (True, False):
            if not priorities and name in NO_CLASSES:
                continue
            trace = read_trace(args.traces_dir / file, priorities=priorities)
            for mode in modes:
                if mode not in args.modes:
                    continue
                for policy in args.policies:
                    options = ReplayOptions(
                        mode=mode,
                        policy=policy,
                        load=LOAD,
                        seed=args.seed,
                        arrivals=args.arrivals,
                        priorities=priorities,
                    )
                    began = time.perf_counter()
                    try:
                        report = run_replay(fleet, trace, options)
                    except Exception as exc:  # a stuck or broken plane: the row says so, the bench goes on
                        report = {"error": f"{type(exc).__name__}: {exc}"[:300], "wall_s": time.perf_counter() - began}
                    report.update(trace=name, mode=mode, policy=policy, priorities=priorities)
                    rows.append(report)
                    print(f"  {name} {mode} {policy} priorities={priorities}: {progress(report)}", file=sys.stderr)
    return rows


def progress(report: dict[str, Any]) -> str:
    """One replay's figures in a line, as it ends (a long run's partial results survive an interruption)."""
    if "error" in report:
        return f"{report['wall_s']:.1f} s, {report['error']}"
    if report["mode"] == "fill":
        return f"{report['wall_s']:.1f} s, allocated at 100% asked {_fmt(report['allocated_at']['100'], '%')}"
    by_class = {c: _p99(w) for c, w in report["wait_s_by_class"].items()}
    eight = _fmt(_p99(report["wait_s_by_gpus"].get("8")))
    return (
        f"{report['wall_s']:.1f} s, allocation {_fmt(report['gpu_allocation_mean'], '%')}, stranded "
        f"{_fmt(report['stranded_gpu_fraction_mean'], '%')}, 8-GPU p99 {eight} s, p99 by class {by_class}, "
        f"preemptions {report['preemptions']}"
    )


def _p99(waits: Any) -> float | None:
    return None if not waits else waits.get("p99")


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and unit == "%":
        return f"{value:.1%}"
    return f"{value:,.0f}{unit}"


def table(rows: Sequence[dict[str, Any]]) -> str:
    header = (
        "trace",
        "mode",
        "prio",
        "policy",
        "wall s",
        "alloc@100%",
        "placed@100%",
        "1st refusal",
        "alloc mean",
        "stranded",
        "p99 wait s",
        "8-GPU p99 s",
        "high / normal / low p99 s",
        "preempt",
    )
    lines = []
    for row in rows:
        if "error" in row:
            lines.append(
                (row["trace"], row["mode"], "yes" if row["priorities"] else "no", row["policy"], "-", row["error"])
            )
            continue
        timed = row["mode"] == "timed"
        by_class = row.get("wait_s_by_class", {})
        lines.append(
            (
                row["trace"],
                row["mode"],
                "yes" if row["priorities"] else "no",
                row["policy"],
                f"{row['wall_s']:.1f}",
                "-" if timed else _fmt(row["allocated_at"]["100"], "%"),
                "-" if timed else _fmt(row["placed_at"]["100"], "%"),
                "-" if timed else _fmt(row["first_refusal_at"], "%"),
                _fmt(row.get("gpu_allocation_mean"), "%") if timed else "-",
                _fmt(row.get("stranded_gpu_fraction_mean"), "%") if timed else "-",
                _fmt(_p99(row.get("wait_s"))) if timed else "-",
                _fmt(_p99(row.get("wait_s_by_gpus", {}).get("8"))) if timed else "-",
                " / ".join(_fmt(_p99(by_class.get(c))) for c in ("high", "normal", "low")) if timed else "-",
                str(row.get("preemptions", "-")),
            )
        )
    width = len(header)
    return text_table(header, [tuple(line) + ("",) * (width - len(line)) for line in lines])


def _find(rows: Sequence[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    for row in rows:
        if "error" not in row and all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def verdicts(rows: Sequence[dict[str, Any]], full: bool) -> list[str]:
    """Each target of issue 24, point 7, met or missed (by how much), on the rows there are."""
    lines = []
    slow = [r for r in rows if r.get("wall_s", 0) >= TARGET_WALL_S or "error" in r]
    lines.append(
        f"each replay under {TARGET_WALL_S:.0f} s: {'ok' if not slow else 'MISSED'} "
        f"(slowest {max((r['wall_s'] for r in rows), default=0):.1f} s; {len(slow)} of {len(rows)} over or failed)"
    )
    for priorities in (True, False):
        tag = "with priorities" if priorities else "without priorities"
        for name in TRACES:
            prio = priorities if name not in NO_CLASSES else True
            at = {p: _find(rows, trace=name, mode="fill", policy=p, priorities=prio) for p in POLICIES}
            if any(v is None for v in at.values()):
                continue
            pack, first, spread = (at[p]["allocated_at"]["100"] for p in ("pack", "first", "spread"))  # type: ignore[index]
            ok = pack >= first
            line = f"fill {name} ({tag}): pack allocates {pack:.1%} at 100% asked, first {first:.1%}"
            if name in ("default", "multigpu50"):
                ok = ok and pack > spread
                line += f", spread {spread:.1%} (pack must be >= first and > spread)"
            else:
                line += " (pack must be >= first)"
            lines.append(f"{line}: {'ok' if ok else 'MISSED'}")
            if name in NO_CLASSES and not priorities:
                lines.pop()
        for name in ("default", "gpuspec33"):
            got = {p: _find(rows, trace=name, mode="timed", policy=p, priorities=priorities) for p in POLICIES}
            if any(v is None for v in got.values()):
                continue
            p99 = {p: _p99(got[p]["wait_s_by_gpus"].get("8")) for p in POLICIES}  # type: ignore[index]
            if any(v is None for v in p99.values()):
                lines.append(f"timed {name} ({tag}): no 8-GPU task measured")
                continue
            ok = p99["pack"] <= p99["first"] and p99["pack"] < p99["spread"]  # type: ignore[operator]
            lines.append(
                f"timed {name} ({tag}): 8-GPU p99 wait pack {p99['pack']:,.0f} s, first {p99['first']:,.0f} s, spread "
                f"{p99['spread']:,.0f} s (pack <= first and < spread): {'ok' if ok else 'MISSED'}"
                + ("" if full else " [short replays: not the target's 30,000 arrivals]")
            )
            if priorities:
                for policy in POLICIES:
                    by_class = got[policy]["wait_s_by_class"]  # type: ignore[index]
                    high, others = (
                        _p99(by_class.get("high")),
                        [_p99(by_class.get(c)) for c in ("normal", "low") if by_class.get(c)],
                    )
                    ok = (
                        high is not None
                        and high < TARGET_HIGH_P99_S
                        and all(o is not None and o >= high for o in others)
                    )
                    lines.append(
                        f"timed {name} {policy}: high class p99 wait {_fmt(high)} s (< {TARGET_HIGH_P99_S:.0f} s), "
                        f"lower classes {', '.join(_fmt(o) for o in others)} s: {'ok' if ok else 'MISSED'}"
                    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument("--traces", nargs="+", default=list(TRACES), choices=list(TRACES))
    parser.add_argument("--modes", nargs="+", default=["fill", "timed"], choices=["fill", "timed"])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument("--arrivals", type=int, default=MIN_ARRIVALS, help="timed replays' arrivals")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--traces-dir", type=Path, default=TRACES_DIR)
    args = parser.parse_args()
    logging.getLogger("flashpoint").setLevel(logging.CRITICAL)
    log = sys.stderr if args.json else sys.stdout
    print(
        f"openb replays through flashpoint's control plane: {', '.join(args.traces)}; modes {', '.join(args.modes)}; "
        f"policies {', '.join(args.policies)}; timed at load {LOAD} with {args.arrivals:,} arrivals; "
        f"{os.cpu_count()} CPUs; Python {sys.version.split()[0]}",
        file=log,
    )
    rows = replays(args)
    full = args.arrivals >= MIN_ARRIVALS
    if args.json:
        print(json.dumps({"replays": rows, "targets": verdicts(rows, full), "cpus": os.cpu_count()}, indent=2))
        return
    print()
    print(table(rows))
    print()
    for line in verdicts(rows, full):
        print(line)


if __name__ == "__main__":
    main()
