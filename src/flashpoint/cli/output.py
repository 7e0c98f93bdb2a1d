"""Output helpers shared by the commands: a rich console sized for pipes that prints text inert, JSON printing, fleet
rows, times, and ``--watch`` (a view redrawn with rich's Live).

Human output is inert (``flashpoint.terminal``): the console escapes every string it is given (cells, titles, lines)
and reads no markup in them, and the commands build their ``Text`` from bodies made inert (``inert_data``). JSON output
(``--json``, ``print_json``) is the exact data: its ASCII-only encoding escapes every control character itself.

Edge module: may import anything in flashpoint, plus typer and rich.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from flashpoint.errors import Error
from flashpoint.fleet.inventory import Device
from flashpoint.terminal import inert

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
WatchOption = Annotated[
    bool, typer.Option("--watch", "-w", help="Redraw the view every --interval seconds until Ctrl-C.")
]
IntervalOption = Annotated[
    float, typer.Option("--interval", metavar="SECONDS", help="With --watch: seconds between redraws.")
]
CountOption = Annotated[
    int | None,
    typer.Option("--count", metavar="N", show_default=False, help="With --watch: stop after N drawings."),
]


class InertConsole(Console):
    """A console that takes every string as plain text made ``inert``: no markup (``[link=...]`` in a job's output
    stays text) and no control character reaches the terminal. Our own styles come as ``Text`` and ``Style``."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(inert(text), **{**options, "markup": False})


def console() -> Console:
    """A console on the current stdout that prints text inert; when stdout is not a terminal, wide enough that tables
    never wrap."""
    out = InertConsole(highlight=False, emoji=False, markup=False)
    if not out.is_terminal:
        out = InertConsole(highlight=False, emoji=False, markup=False, width=200)
    return out


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False))


def device_row(device: Device) -> dict[str, Any]:
    """A device as ``GET /v1/fleet`` shows it, with no holder (nothing runs outside a control plane)."""
    return {**device.to_json(), "worker": None, "endpoint": None}


def model_summary(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per model, in fleet order: how many devices, how many free."""
    summary: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = summary.setdefault(
            row["model"], {"model": row["model"], "recognised": row["recognised"], "count": 0, "free": 0}
        )
        entry["count"] += 1
        entry["free"] += 1 if row["worker"] is None else 0
    return list(summary.values())


def clock(epoch: float | None) -> str:
    """A wall time as this machine's local time of day, to the millisecond, its date first when not today (``-`` when
    unknown)."""
    if not epoch:
        return "-"
    when = datetime.fromtimestamp(epoch)
    day = "" if when.date() == datetime.now().date() else when.strftime("%Y-%m-%d ")
    return day + when.strftime("%H:%M:%S.%f")[:-3]


def duration_ms(ms: float | None) -> str:
    """Milliseconds for people: ``840 ms``, ``1.25 s``, ``3 min 4 s`` (``-`` when unknown)."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 90:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 90:
        return f"{minutes} min {rest} s"
    return f"{minutes // 60} h {minutes % 60} min"


def check_watch(watch: bool, as_json: bool) -> None:
    """``--watch`` redraws tables: with ``--json`` it is a usage error."""
    if watch and as_json:
        raise typer.BadParameter("--watch redraws tables for people; leave out --json", param_hint="--watch")


def watch(render: Callable[[], RenderableType], *, interval: float, count: int | None, out: Console) -> None:
    """Draw ``render()`` and redraw it every ``interval`` seconds until Ctrl-C, or ``count`` drawings in all.

    A flashpoint ``Error`` while drawing (the server at --url went away, say) is shown in place of the view, and the
    next drawing tries again.
    """
    if not interval > 0:
        raise typer.BadParameter(f"must be a positive number of seconds, got {interval}", param_hint="--interval")
    if count is not None and count < 1:
        raise typer.BadParameter(f"must be 1 or more, got {count}", param_hint="--count")

    def frame() -> RenderableType:
        try:
            view = render()
        except Error as exc:
            view = Text(inert(f"Error: {exc}"))
        footer = Text(f"every {interval:g} s, Ctrl-C to stop; drawn at {datetime.now():%H:%M:%S}", style="dim")
        return Group(view, footer)

    drawn = 0
    try:
        with Live(frame(), console=out, auto_refresh=False, transient=False) as live:
            drawn = 1
            while count is None or drawn < count:
                time.sleep(interval)  # the redraw period the user asked for
                live.update(frame(), refresh=True)
                drawn += 1
    except KeyboardInterrupt:
        pass
