"""``flashpoint simulate``: a job trace replayed through the real control plane on a simulated fleet
(``flashpoint.simulation``; decision 0114).

Edge module: may import anything in flashpoint, plus typer and rich.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer
from rich.table import Table

from flashpoint.cli.output import JsonOption, console, print_json
from flashpoint.simulation import ReplayOptions, load_sim_fleet, read_trace, run_replay
from flashpoint.simulation.replay import MIN_ARRIVALS, MODES, POLICIES


def simulate(
    fleet: Annotated[
        str,
        typer.Option(
            "--fleet",
            help="The fleet: openb's node list (CSV), a fleet file (.toml) or the one-line NODE=MODEL:COUNT;... form.",
        ),
    ],
    trace: Annotated[
        str, typer.Option("--trace", help="The trace: an openb pod list (CSV) or flashpoint's trace format (CSV).")
    ],
    policy: Annotated[
        str,
        typer.Option("--policy", help=f"The plane's node choice: {', '.join(POLICIES)} (pack: the plane's default)."),
    ] = "pack",
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="fill: tasks arrive in trace order and never leave until the fleet is asked for whole; timed: "
            "Poisson arrivals at --load with the trace's durations.",
        ),
    ] = "fill",
    load: Annotated[
        float, typer.Option("--load", help="timed: the offered demand as a share of the fleet's GPUs.")
    ] = 0.9,
    seed: Annotated[int, typer.Option("--seed", help="timed: the seed of the draws and arrivals.")] = 0,
    arrivals: Annotated[
        int, typer.Option("--arrivals", help="timed: how many tasks arrive (the first third is a warm-up).")
    ] = MIN_ARRIVALS,
    skip_fractional: Annotated[
        bool,
        typer.Option("--skip-fractional", help="Leave out tasks asking a share of one GPU (else: one whole GPU)."),
    ] = False,
    no_priorities: Annotated[
        bool, typer.Option("--no-priorities", help="Every task in the class normal (else: from the trace's qos).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Replay a job trace through flashpoint's planner and control plane (stub workers, a fake clock), checking every
    placement against the fleet and each request's candidates.

    Example: flashpoint simulate --fleet ../shared/traces/openb/openb_node_list_gpu_node.csv
    --trace ../shared/traces/openb/openb_pod_list_default.csv --policy pack --mode timed --load 0.9
    """
    if mode not in MODES:
        raise typer.BadParameter(f"must be one of {', '.join(MODES)}", param_hint="--mode")
    if policy not in POLICIES:
        raise typer.BadParameter(f"must be one of {', '.join(POLICIES)}", param_hint="--policy")
    options = ReplayOptions(
        mode=mode, policy=policy, load=load, seed=seed, arrivals=arrivals, priorities=not no_priorities
    )
    options.check()
    sim_fleet = load_sim_fleet(fleet)
    tasks = read_trace(trace, skip_fractional=skip_fractional, priorities=not no_priorities)
    # the plane's own lines (workers starting and stopping, by the thousand) are not this command's output
    # (the level is put back after: a command run in-process, as the tests run it, leaves no state behind)
    logger = logging.getLogger("flashpoint")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        report = run_replay(sim_fleet, tasks, options)
    finally:
        logger.setLevel(level)
    if as_json:
        print_json(report)
        return
    console().print(summary(report))


def _share(value: Any) -> str:
    return "-" if value is None else f"{value:.1%}"


def _seconds(summary: Any) -> str:
    if not summary or summary.get("p50") is None:
        return "-"
    return f"{summary['p50']:,.0f} / {summary['p99']:,.0f} (n={summary['n']:,})"


def summary(report: dict[str, Any]) -> Table:
    """The report as a two-column table for people."""
    table = Table(title=f"{report['mode']} replay, policy {report['policy']}", show_header=False)
    table.add_column("what")
    table.add_column("value")
    left = report["left_out"]
    table.add_row("fleet", f"{report['gpus']:,} GPUs on {report['nodes']:,} nodes")
    table.add_row("tasks", f"{report['tasks']:,} ({report['placed']:,} placed)")
    table.add_row(
        "left out",
        f"{left['cpu_only']:,} without GPUs, {left['fractional']:,} fractional, "
        f"{left['never_fits']:,} that fit no node",
    )
    table.add_row("fractional as whole GPUs", f"{report['fractional_as_whole']:,}")
    if report["mode"] == "fill":
        for point, allocated in report["allocated_at"].items():
            table.add_row(
                f"at {point}% asked", f"allocated {_share(allocated)}, placed {_share(report['placed_at'][point])}"
            )
        table.add_row("first request left waiting at", _share(report["first_refusal_at"]) + " asked")
    else:
        table.add_row("load", f"{report['load']:g} ({report['rate_per_s']:.4f} arrivals/s)")
        table.add_row("GPUs allocated (mean)", _share(report["gpu_allocation_mean"]))
        table.add_row("GPUs stranded (mean)", _share(report["stranded_gpu_fraction_mean"]))
        table.add_row("wait p50 / p99 s", _seconds(report["wait_s"]))
        for gpus, waits in report["wait_s_by_gpus"].items():
            table.add_row(f"  {gpus} GPU(s)", _seconds(waits))
        for name, waits in report["wait_s_by_class"].items():
            table.add_row(f"  class {name}", _seconds(waits))
        for app, hours in report["usage_gpu_hours_by_app"].items():
            table.add_row(f"  app {app}", f"{hours:,.1f} GPU-hours")
    table.add_row("preemptions", f"{report['preemptions']:,}")
    table.add_row("placements checked", f"{report['checked_starts']:,}")
    table.add_row("wall time", f"{report['wall_s']:.1f} s ({report['reconciles']:,} reconciles)")
    return table
