"""``flashpoint simulate`` through typer's CliRunner: the JSON keys of each mode (issue 24, point 6) on a small trace,
the table for people, and bad options refused."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from typer.testing import CliRunner

from flashpoint.cli import app

runner = CliRunner()
TRACE = "arrival_s,duration_s,gpus,candidates,class,app\n" + "".join(
    f"{n},{5 + n % 7},{(1, 2, 4)[n % 3]},,{('high', 'normal')[n % 2]},{'ab'[n % 2]}\n" for n in range(30)
)
COMMON = {"policy", "mode", "seed", "tasks", "placed", "fractional_as_whole", "wall_s"}


def simulate(tmp_path: Path, *args: str) -> dict[str, object]:
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    result = runner.invoke(
        app, ["simulate", "--fleet", "a=NVIDIA_H200:4;b=NVIDIA_H200:4", "--trace", str(trace), *args]
    )
    assert result.exit_code == 0, result.output
    if "--json" not in args:
        return {"text": result.output}
    found: dict[str, object] = json.loads(result.output)
    return found


def test_fill_json_has_the_issues_keys(tmp_path: Path) -> None:
    report = simulate(tmp_path, "--json", "--policy", "pack")
    assert COMMON | {"allocated_at", "placed_at", "first_refusal_at"} <= set(report)
    assert report["mode"] == "fill" and report["policy"] == "pack"
    assert set(report["allocated_at"]) == set(report["placed_at"]) == {"50", "80", "90", "100"}  # type: ignore[arg-type]


def test_timed_json_has_the_issues_keys(tmp_path: Path) -> None:
    report = simulate(tmp_path, "--json", "--mode", "timed", "--load", "0.5", "--seed", "3", "--arrivals", "90")
    keys = {"gpu_allocation_mean", "stranded_gpu_fraction_mean", "wait_s", "wait_s_by_gpus", "wait_s_by_class"}
    assert COMMON | keys | {"preemptions"} <= set(report)
    assert report["seed"] == 3 and report["tasks"] == 90
    assert set(report["wait_s"]) == {"p50", "p99", "n"}  # type: ignore[arg-type]


def test_the_table_and_no_priorities(tmp_path: Path) -> None:
    out = simulate(tmp_path, "--mode", "timed", "--arrivals", "30", "--no-priorities")["text"]
    assert "timed replay, policy pack" in str(out) and "class normal" in str(out) and "class high" not in str(out)


def test_the_plane_lines_are_quiet_only_while_it_replays(tmp_path: Path) -> None:
    logger = logging.getLogger("flashpoint")
    before = logger.level
    simulate(tmp_path, "--arrivals", "30")
    assert logger.level == before  # an in-process run leaves the plane's warnings on for what runs next


def test_bad_options_are_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "--fleet", "a=NVIDIA_H200:1", "--trace", "x.csv", "--policy", "best"])
    assert result.exit_code != 0 and "--policy" in result.output
