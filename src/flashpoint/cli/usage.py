"""``flashpoint usage``: workers' device time per plane (``GET /v1/usage``, decision 0112): GPU-hours busy, idle and
starting, vCPU-hours and memory GB-hours, grouped by app, environment, endpoint, key or model.

Edge module: may import anything in flashpoint, plus typer and rich.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from flashpoint.cli.appfilter import AppFilter, AppFilterOption, EnvFilterOption
from flashpoint.cli.live import describe, no_plane_message
from flashpoint.cli.output import JsonOption, console, print_json
from flashpoint.cli.target import KeyOption, UrlOption, ask, planes
from flashpoint.config import Settings
from flashpoint.errors import BadInputError
from flashpoint.scheduler.usage import GROUPS
from flashpoint.terminal import inert_data

SinceOption = Annotated[
    str,
    typer.Option(
        "--since",
        metavar="WHEN",
        help="The window's start: a duration back from now (90s, 30m, 24h, 7d, 2w) or epoch seconds.",
    ),
]
ByOption = Annotated[
    str,
    typer.Option("--by", metavar="GROUP", help=f"Group the time by one of: {', '.join(GROUPS)}."),
]

#: what an empty group name means, per grouping
NONE = {"app": "(no app)", "env": "(no environment)", "key": "(no key)", "endpoint": "(none)", "model": "(none)"}


def usage(
    since: SinceOption = "24h",
    by: ByOption = "endpoint",
    app: AppFilterOption = None,
    env: EnvFilterOption = None,
    url: UrlOption = None,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show workers' device time: GPU-hours busy (running jobs or requests), idle (warm, running nothing) and
    starting (cold starts), vCPU-hours and memory GB-hours, per app, environment, endpoint, key or model.

    Without --url, asks every flashpoint process on this machine. Idle and starting time belongs to no key: by key,
    it is the "(no key)" row's, with the busy time of jobs no key submitted.
    """
    if by not in GROUPS:
        raise BadInputError(f"--by {by!r}: use one of {', '.join(GROUPS)}")
    shown = AppFilter(app, env)
    settings = Settings.load()
    bodies = []
    for plane in planes(url, key, settings):
        body = ask(plane, "/v1/usage", {"since": since, "by": by, **shown.params()})
        if body is not None:
            bodies.append({"source": describe(plane), "url": plane.url, **body})
    if as_json:
        print_json({"planes": bodies})
        return
    if not bodies:
        print(no_plane_message(settings), file=sys.stderr)
        return
    console().print(render(bodies))


def hours(seconds: float) -> str:
    """Seconds as hours: two decimals, four below 0.01 h (36 s) so that short use does not read as none."""
    value = seconds / 3600
    return f"{value:.4f}" if 0 < seconds < 36 else f"{value:.2f}"


def usage_table(body: dict[str, Any]) -> Table:
    """One plane's usage, a row per group, largest GPU time first (the plane's order)."""
    by = str(body.get("by", ""))
    table = Table(title_justify="left", padding=(0, 1))
    table.add_column(by)
    for column in ("GPU-h busy", "GPU-h idle", "GPU-h starting", "GPU-h", "vCPU-h", "memory GB-h"):
        table.add_column(column, justify="right")
    for row in body.get("usage", []):
        table.add_row(
            Text(str(row["name"]) or NONE.get(by, "(none)")),
            hours(row["busy"]["gpuSeconds"]),
            hours(row["idle"]["gpuSeconds"]),
            hours(row["starting"]["gpuSeconds"]),
            hours(row["gpuSeconds"]),
            hours(row["vcpuSeconds"]),
            hours(row["memoryMbSeconds"] / 1024),
        )
    return table


def render(bodies: Sequence[dict[str, Any]]) -> RenderableType:
    """What ``flashpoint usage`` prints, the planes' texts inert."""
    parts: list[RenderableType] = []
    for body in inert_data(list(bodies)):
        span = (float(body["until"]) - float(body["since"])) / 3600
        parts.append(Text(f"{body['source']}: the last {span:g} h, by {body['by']}", style="bold"))
        if body.get("usage"):
            parts.append(usage_table(body))
        else:
            parts.append(Text("  no worker held a device in that time"))
        parts.append(Text(""))
    return Group(*parts)
