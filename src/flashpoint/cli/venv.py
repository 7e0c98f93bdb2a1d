"""``flashpoint venv list|prune``: the cache of per-endpoint environments (flashpoint/environments).

Edge module: may import anything in flashpoint, plus typer and rich.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from flashpoint.cli.output import console, print_json
from flashpoint.environments import CacheEntry, EnvironmentCache
from flashpoint.terminal import inert

app = typer.Typer(
    name="venv",
    help="The per-endpoint environments (an endpoint's dependencies, installed with uv): list and prune them.",
    no_args_is_help=True,
)

DirOption = Annotated[
    Path | None,
    typer.Option("--dir", help="The cache directory (default: $FLASHPOINT_ENV_DIR, else ~/.flashpoint/envs)."),
]


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"


def _entry_json(entry: CacheEntry) -> dict[str, Any]:
    record = entry.record
    return {
        "key": entry.key,
        "path": str(entry.path),
        "requirements": list(record.requirements) if record else None,
        "python": record.python if record else None,
        "size": entry.size,
        "created": record.created if record else None,
        "last_used": record.last_used if record else None,
        "endpoints": list(record.endpoints) if record else None,
        "in_use": entry.in_use,
    }


def _cause(tail: tuple[str, ...]) -> str:
    """The installer's error from an output tail (uv starts it with ``error:``; its cause follows), on one line."""
    starts = [i for i, line in enumerate(tail) if line.startswith("error:")]
    lines = tail[starts[-1] :] if starts else tail[-1:]
    text = " ".join(line.strip() for line in lines)
    return text if len(text) <= 400 else text[:399] + "…"


@app.command("list")
def list_environments(
    directory: DirOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the cached environments (most recently used first), the builds running now and the recorded failures."""
    cache = EnvironmentCache(directory)
    entries = cache.entries()
    building = cache.in_progress()
    failures = cache.failures()
    if as_json:
        print_json(
            {
                "root": str(cache.root),
                "environments": [_entry_json(e) for e in entries],
                "building": [p.to_json() for p in building],
                "failed": [f.to_json() for f in failures],
            }
        )
        return
    out = console()
    now = cache.clock()
    if not entries:
        out.print(f"No environments in {cache.root}.")
    else:
        table = Table(title=f"Environments in {cache.root}")
        for column in ("key", "requirements", "python", "size", "last used", "endpoints", "in use"):
            table.add_column(column, justify="right" if column == "size" else "left")
        for entry in entries:
            record = entry.record
            table.add_row(
                entry.key,
                "\n".join(record.requirements) if record else "(no record)",
                record.python if record else "?",
                _size(entry.size),
                _ago(now - record.last_used) if record else "?",
                ", ".join(record.endpoints) if record else "?",
                "yes" if entry.in_use else "no",
            )
        out.print(table)
        if any(entry.in_use for entry in entries):
            out.print(
                "In use: a running control plane's endpoint runs its workers there; `flashpoint venv prune` leaves it "
                "alone until that plane stops.",
                markup=False,
            )
    for progress in building:
        out.print(
            f"building {progress.key} for {progress.endpoint!r} (process {progress.pid}, "
            f"{progress.elapsed(now):.0f} s): {progress.last_line}",
            markup=False,
        )
    for failure in failures:
        out.print(
            f"failed {failure.key} ({' '.join(failure.requirements)}) for {failure.endpoint!r}, "
            f"{_ago(now - failure.failed_at)}: {_cause(failure.output_tail) or failure.message}",
            markup=False,
        )
    if failures:
        out.print("A failed build is not tried again until `flashpoint venv prune --failed` forgets it.")


@app.command("prune")
def prune(
    days: Annotated[
        float | None, typer.Option("--days", min=0, help="Remove the environments unused for this many days.")
    ] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Remove every environment, and the recorded failures.")
    ] = False,
    failed: Annotated[
        bool, typer.Option("--failed", help="Forget the recorded build failures, so the next use builds again.")
    ] = False,
    directory: DirOption = None,
) -> None:
    """Remove cached environments; one being built right now, or in use by a running plane, is left alone (and
    named)."""
    if days is None and not everything and not failed:
        raise typer.BadParameter("say what to remove: --days N, --all or --failed")
    cache = EnvironmentCache(directory)
    started = time.monotonic()
    if failed and not everything:
        for key in cache.forget_failures():
            print(inert(f"forgot the failed build {key}"))
    if days is None and not everything:
        return
    report = cache.prune(unused_for_s=None if days is None else days * 86400, everything=everything)
    for key in report.removed:
        print(inert(f"removed {key}"))
    for key in report.in_use:
        print(
            inert(
                f"kept {key}: in use by a running control plane (an endpoint's workers run in it); stop the plane "
                "that uses it (its `flashpoint serve`, or the script that embeds it) and prune again"
            )
        )
    for key in report.busy:
        print(inert(f"kept {key}: it is being built (its lock is held); prune again once the build ends"))
    print(
        f"{len(report.removed)} removed, {len(report.busy)} busy, {len(report.in_use)} in use, "
        f"in {time.monotonic() - started:.1f} s"
    )
