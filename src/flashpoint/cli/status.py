"""``flashpoint status``: per running process or server, its endpoints, their workers by state, queue depth and the
GPUs they hold.

Edge module: may import anything in flashpoint, plus typer and rich.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from flashpoint.cli.appfilter import AppFilter, AppFilterOption, EnvFilterOption, app_env, app_env_text
from flashpoint.cli.live import SCRIPT, LivePlane, command_of, describe, no_plane_message
from flashpoint.cli.output import (
    CountOption,
    IntervalOption,
    JsonOption,
    WatchOption,
    check_watch,
    console,
    model_summary,
    print_json,
    watch as watch_view,
)
from flashpoint.cli.quota import quota_table
from flashpoint.cli.target import KeyOption, UrlOption, ask, planes
from flashpoint.config import Settings
from flashpoint.errors import Error
from flashpoint.terminal import inert_data


def status(
    app: AppFilterOption = None,
    env: EnvFilterOption = None,
    url: UrlOption = None,
    key: KeyOption = None,
    as_json: JsonOption = False,
    watch: WatchOption = False,
    interval: IntervalOption = 2.0,
    count: CountOption = None,
) -> None:
    """Show what runs: per flashpoint process or server, its endpoints, their workers by state, queue depth, jobs in
    progress and the GPUs (or vCPUs) they hold; a scheduled endpoint's cron (UTC) and next run.

    Without --url, asks every flashpoint process on this machine: `flashpoint serve` servers and scripts' embedded
    planes alike. With --app or --env, only the endpoints of that app or environment.
    """
    check_watch(watch, as_json)
    shown = AppFilter(app, env)
    if watch:

        def draw() -> RenderableType:
            notes: list[str] = []
            return render(collect(url, key, notes, shown)[0], notes, shown)

        watch_view(draw, interval=interval, count=count, out=console())
        return
    bodies, settings = collect(url, key, None, shown)
    if as_json:
        print_json({"planes": bodies})
        return
    if not bodies:
        print(no_plane_message(settings), file=sys.stderr)
        return
    console().print(render(bodies, [], shown))


def collect(
    url: str | None, key: str | None, notes: list[str] | None, shown: AppFilter | None = None
) -> tuple[list[dict[str, Any]], Settings]:
    """Every plane's status body; planes of this machine that do not answer are skipped (noted in ``notes``)."""
    settings = Settings.load()
    bodies = []
    for plane in planes(url, key, settings):
        body = plane_status(plane, notes, shown)
        if body is not None:
            bodies.append(body)
    return bodies, settings


def plane_status(
    plane: LivePlane, notes: list[str] | None = None, shown: AppFilter | None = None
) -> dict[str, Any] | None:
    """One plane's endpoints (those of ``shown``'s app and environment) and fleet, condensed: what ``--json`` prints
    for it."""
    shown = shown or AppFilter()
    endpoints = ask(plane, "/v1/endpoints", shown.params() or None, notes=notes)
    if endpoints is None:
        return None
    fleet = ask(plane, "/v1/fleet", notes=notes) or {"devices": [], "nodes": []}
    devices: list[dict[str, Any]] = fleet["devices"]
    reservations = [r for node in fleet.get("nodes", []) for r in node.get("reservations", [])]
    # (the plane filters; a plane older than the filters lists every endpoint, so they are applied here too)
    listed = [row for row in endpoints["endpoints"] if shown.matches(row["name"])]
    rows = [endpoint_status(row, devices, reservations) for row in listed]
    held = sum(1 for d in devices if d["worker"] is not None)
    return {
        "source": describe(plane),
        "kind": plane.kind,
        "pid": plane.pid,
        "url": plane.url,
        "app": plane.app,
        "command": command_of(plane.pid) if plane.kind == SCRIPT and plane.pid else None,
        "endpoints": rows,
        "gpus": {"total": len(devices), "held": held, "free": len(devices) - held},
        "models": model_summary(devices),
        # the server's quotas and their use (decision 0113); None where it keeps none or the key may not read them
        "quotas": quotas_of(plane),
    }


def quotas_of(plane: LivePlane) -> list[dict[str, Any]] | None:
    """``GET /v1/quotas`` of a server that keeps quotas (None: a plane without, or a key that may not read them)."""
    try:
        body = plane.get("/v1/quotas")
    except Error:
        return None
    return None if body is None else list(body.get("quotas", []))


def endpoint_status(
    row: dict[str, Any], devices: Sequence[dict[str, Any]], reservations: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """One endpoint of ``GET /v1/endpoints``: workers counted by state, jobs, and what its workers hold."""
    name = row["name"]
    workers = row.get("workers", [])
    states = Counter(str(w["state"]) for w in workers)
    app, env = app_env(name)
    return {
        "name": name,
        "app": app,
        "env": env,
        "kind": row.get("kind"),
        "gpu": row.get("gpu"),
        "cpu": row.get("cpu"),
        "workers": dict(states),
        "workersMin": row.get("workersMin"),
        "workersMax": row.get("workersMax"),
        "queueDepth": row.get("queueDepth", 0),
        "inProgress": sum(len(w.get("jobs", [])) for w in workers) + int(row.get("inFlight") or 0),
        "gpusHeld": [
            {k: d.get(k) for k in ("node", "index", "model", "simulated", "worker")}
            for d in devices
            if d.get("endpoint") == name and d.get("worker") is not None
        ],
        "cpusHeld": [
            {"node": r.get("node"), "worker": r.get("worker"), "cores": r.get("cores", [])}
            for r in reservations
            if r.get("endpoint") == name
        ],
        "summary": (row.get("explanation") or {}).get("summary", ""),
        "counters": row.get("counters", {}),
        # a cron schedule: its expression (UTC) and next fire time (decision 0109); None when it has none
        "schedule": row.get("schedule"),
    }


def _workers_text(row: dict[str, Any]) -> str:
    counts: dict[str, int] = row["workers"]
    order = ("RUNNING", "IDLE", "STARTING", "STOPPING")
    parts = [f"{counts[s]} {s.lower()}" for s in order if counts.get(s)]
    parts += [f"{n} {s.lower()}" for s, n in counts.items() if s not in order and n]
    bounds = f" ({row['workersMin']}..{row['workersMax']})" if row.get("workersMax") is not None else ""
    return (", ".join(parts) or "none") + bounds


def _held_text(row: dict[str, Any]) -> str:
    by_model: dict[str, list[str]] = {}
    for device in row["gpusHeld"]:
        by_model.setdefault(str(device["model"]), []).append(f"{device['node']}:{device['index']}")
    parts = [f"{len(ids)} x {model} ({', '.join(ids)})" for model, ids in by_model.items()]
    cores = sum(len(r["cores"]) for r in row["cpusHeld"])
    if cores:
        parts.append(f"{cores} vCPU{'s' if cores != 1 else ''}")
    return "; ".join(parts) or "-"


def schedule_text(schedule: dict[str, Any] | None) -> str:
    """``0 * * * * UTC, next 2027-01-15 09:00``; ``-`` for none; a plane that runs no schedules says so."""
    if not schedule:
        return "-"
    cron = f"{schedule.get('cron')} UTC"
    nxt = schedule.get("next")
    if not schedule.get("active"):
        return f"{cron} (not run here: flashpoint serve runs schedules)"
    return f"{cron}, next {str(nxt).replace('T', ' ').removesuffix(':00Z')}" if nxt else cron


def endpoints_table(body: dict[str, Any]) -> Table:
    """The endpoints of one plane, one row each; where some are an app's, its app and environment first
    (``shop/production``), the rows of one app and environment together."""
    table = Table(title_justify="left", padding=(0, 1))
    rows: list[dict[str, Any]] = body["endpoints"]
    of_apps = any(app_env_text(row["name"]) for row in rows)
    if of_apps:
        table.add_column("app/env")
        rows = sorted(rows, key=lambda row: app_env_text(row["name"]))  # stable: each group keeps the plane's order
    scheduled = any(row.get("schedule") for row in rows)
    columns = ("endpoint", "asks for", "workers", "queued", "running", "holds", *(("schedule",) if scheduled else ()))
    for column in (*columns, "state"):
        table.add_column(column, justify="right" if column in ("queued", "running") else "left")
    for row in rows:
        asks = row["gpu"] if row.get("cpu") is None else "cpu=" + ",".join(row["cpu"])
        if row.get("kind") == "routes":
            asks += " (HTTP routes)"
        table.add_row(
            *((Text(app_env_text(row["name"])),) if of_apps else ()),
            Text(row["name"]),
            Text(str(asks or "-")),
            _workers_text(row),
            str(row["queueDepth"]),
            str(row["inProgress"]),
            Text(_held_text(row)),
            *((Text(schedule_text(row.get("schedule"))),) if scheduled else ()),
            Text(row["summary"]),
        )
    return table


def header(body: dict[str, Any]) -> Text:
    """``flashpoint serve app.py (pid 12, http://...): 2 endpoints; GPUs: 1 of 3 held``."""
    title = body["source"]
    if body.get("command"):
        title += f" [{body['command']}]"
    gpus = body["gpus"]
    count = len(body["endpoints"])
    line = f"{title}: {count} endpoint{'s' if count != 1 else ''}; "
    if gpus["total"]:
        models = ", ".join(f"{m['model']} {m['free']} of {m['count']} free" for m in body["models"])
        line += f"GPUs: {gpus['held']} of {gpus['total']} held ({models})"
    else:
        line += "no GPUs"
    return Text(line, style="bold")


def render(bodies: Sequence[dict[str, Any]], notes: Sequence[str], shown: AppFilter | None = None) -> RenderableType:
    """What ``flashpoint status`` draws (and redraws with --watch), the planes' texts inert."""
    bodies = inert_data(bodies)
    parts: list[RenderableType] = []
    if not bodies:
        parts.append(Text(no_plane_message(Settings.load())))
    for body in bodies:
        parts.append(header(body))
        if body["endpoints"]:
            parts.append(endpoints_table(body))
        if body.get("quotas"):
            parts.append(quota_table(body["quotas"]))
        else:
            said = "no endpoint has been called yet" if body["kind"] == SCRIPT else "no endpoints"
            if shown is not None and shown.active:
                said = f"no endpoints of {shown}"
            parts.append(Text(f"  {said}"))
        parts.append(Text(""))
    parts.extend(Text(note) for note in notes)
    return Group(*parts)
