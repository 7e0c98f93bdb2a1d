"""``flashpoint explain``: why jobs wait, from the running flashpoint processes or, with ``--app``, offline; with
``--app`` and ``--fleet``, where every worker would go on a described fleet (the what-if).

``--app`` names a file or module to explain offline, as it always has; a value that names nothing to load here and
can be an app's name (``shop``), or any ``--app`` beside ``--env``, filters the running processes' explanations to
that deployed app instead (decision 0102).

Edge module: may import anything in flashpoint, plus typer and httpx (through ``cli.live``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NoReturn
from urllib.parse import quote

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from flashpoint.cli.appfilter import AppFilter, EnvFilterOption, app_env
from flashpoint.cli.holders import held_devices, holders_note
from flashpoint.cli.live import LivePlane, describe, no_plane_message
from flashpoint.cli.output import (
    CountOption,
    IntervalOption,
    WatchOption,
    check_watch,
    console,
    print_json,
    watch as watch_view,
)
from flashpoint.cli.target import KeyOption, UrlOption, ask, planes, where
from flashpoint.config import Settings
from flashpoint.errors import ConfigError, ConflictError, Error, NotFoundError
from flashpoint.explain import Code, Explanation, OtherProcess, WaitReason
from flashpoint.fleet.discovery import discover_fleet, host_node
from flashpoint.fleet.inventory import Fleet, fleet_summary, nodes_summary
from flashpoint.fleet.simulated import SimulatedFleet, is_file_reference, load_fleet, read_fleet
from flashpoint.gpus import describe as describe_gpu
from flashpoint.hosting.discovery import load_endpoints, split_target
from flashpoint.scheduler.optionnotes import host_option_notes
from flashpoint.scheduler.placement.fit import CpuFit, NoFit, endpoint_notes, never_candidates, place_endpoint
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.views import never_summary
from flashpoint.scheduler.whatif import Row, Verdict, what_if
from flashpoint.spec import APP_NAME, EndpointSpec, endpoint_id, split_endpoint_id
from flashpoint.terminal import inert
from flashpoint.wire import coldstart

#: what ``explain`` adds when no process runs
_OFFLINE_HINT = ", or pass --app app.py to explain its endpoints against this machine's fleet"


@dataclass(frozen=True, slots=True)
class Item:
    """One explanation and where it came from, with the extra facts worth printing next to it."""

    explanation: Explanation
    #: "flashpoint process 123 (http://...)" or "app.py (offline)"
    source: str
    pid: int | None = None
    #: what the endpoint asks for, e.g. "NVIDIA H200 > NVIDIA A100 80GB PCIe (x2)"
    asks: str | None = None
    placement: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the cold start a job waited on (its ``coldStart``), in the sentence form; empty when none
    cold_start: str = ""

    def to_json(self) -> dict[str, Any]:
        body = self.explanation.to_json()
        body.update({"source": self.source, "pid": self.pid, "gpu": self.asks, "placement": self.placement})
        body["app"], body["env"] = app_env(self.explanation.endpoint)
        return body

    def __str__(self) -> str:
        lines = str(self.explanation).split("\n")
        app, env = app_env(self.explanation.endpoint)
        if app is not None:
            lines.insert(1, f"  app {app}, environment {env}")
        if self.asks:
            lines.insert(1, f"  asks for {self.asks}")
        if self.placement:
            p = self.placement
            devices = ", ".join(str(i) for i in p.get("deviceIds", []))
            kind = "simulated" if p.get("simulated") else "real"
            lines.insert(1, f"  ran on {p.get('gpuModel') or 'CPU'} on {p.get('node')} (device {devices}, {kind})")
        if self.cold_start:
            lines.insert(1, f"  {self.cold_start}")
        return "\n".join(lines)


def explain(
    target: Annotated[
        str | None,
        typer.Argument(
            metavar="[JOB_ID | ENDPOINT]",
            help="A job id or an endpoint name; without it, every endpoint is explained.",
            show_default=False,
        ),
    ] = None,
    app_path: Annotated[
        str | None,
        typer.Option(
            "--app",
            "-a",
            metavar="APP",
            help="Explain the endpoints of app.py (or package.module) against this machine's fleet, starting nothing. "
            "A name that is no file or module here (or any with --env) is a deployed app's: only its endpoints and "
            "jobs are explained, by the running processes.",
            show_default=False,
        ),
    ] = None,
    env: EnvFilterOption = None,
    fleet: Annotated[
        str | None,
        typer.Option(
            "--fleet",
            metavar="FLEET",
            help="With --app: say where every endpoint's workers would go on this fleet, or that they never can. "
            "A fleet file (fleet.toml or @path) or the one-line syntax, e.g. 'a=NVIDIA_H200:8;b*4=NVIDIA_L40S:4'.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    url: UrlOption = None,
    key: KeyOption = None,
    watch: WatchOption = False,
    interval: IntervalOption = 2.0,
    count: CountOption = None,
) -> None:
    """Say why jobs wait IN_QUEUE (or that they don't), per GPU candidate.

    Without --app, asks the flashpoint processes running on this machine (servers and scripts), or the server at
    --url, about a job, an endpoint, or all endpoints.

    With --app, loads the endpoints of a file or module and says, starting nothing, which GPUs a worker would get now.

    With --app and --fleet, says for each endpoint where its workers would go on that fleet (minimums first, then a
    first worker each, then up to each maximum in turn), or that they never can, and why.

    With --app NAME of a deployed app or --env ENV, asks the running processes about that app's or environment's
    endpoints only; ENDPOINT may then be a bare name.
    """
    shown = AppFilter(None, env)
    if app_path is not None and (env is not None or names_an_app(app_path)) and fleet is None:
        if env is not None and not APP_NAME.fullmatch(app_path):
            _usage(f"--env filters the running processes; --app {app_path} explains a file offline: leave one out")
        shown, app_path = AppFilter(app_path, env), None
    elif env is not None and app_path is not None:
        _usage("--env filters the running processes; --app with --fleet explains a file offline: leave one out")
    if watch and app_path is not None:
        _usage("--watch follows running processes; --app starts nothing and would not change: leave one out")
    check_watch(watch, as_json)
    if watch:

        def draw() -> RenderableType:
            notes: list[str] = []
            items = _live(target, Settings.load(), url, key, notes, shown)
            return Group(render_items(items), *(Text(note) for note in notes))

        watch_view(draw, interval=interval, count=count, out=console())
        return
    if fleet is not None:
        if app_path is None:
            _usage(
                "--fleet needs --app APP: the endpoints to place, e.g. flashpoint explain --app app.py --fleet f.toml"
            )
        what_if_command(app_path, fleet, target, as_json)
        return
    if app_path is not None:
        items = _offline(app_path, target)
    else:
        items = _live(target, Settings.load(), url, key, shown=shown)
    if as_json:
        print_json({"explanations": [item.to_json() for item in items]})
        return
    print(render_items(items).plain, end="")


def names_an_app(value: str) -> bool:
    """Whether ``--app value`` is a deployed app's name: one an app may have that names no file, folder or module
    to load from the current folder (``app.py``, ``pkg.module`` and ``shop`` beside ``shop.py`` are loaded)."""
    return APP_NAME.fullmatch(value) is not None and not (Path(value).exists() or Path(value + ".py").exists())


def render_items(items: list[Item]) -> Text:
    """The explanations as text, under a ``== source`` line per process (what ``--watch`` redraws); inert, since
    they quote other processes' lease records and the planes' answers."""
    lines: list[str] = []
    source = None
    for item in items:
        if item.source != source:
            lines.append(f"== {item.source}\n")
            source = item.source
        lines.append(f"{item}\n\n")
    return Text(inert("".join(lines)))


# ----------------------------------------------------------------------------------------------------------------
# offline: an app file against the local fleet


def explain_offline(
    spec: EndpointSpec, fleet: Fleet, held: Mapping[tuple[str, int], OtherProcess] | None = None
) -> Explanation:
    """What a control plane on ``fleet`` would do for ``spec`` with nothing of its own running: place a worker, wait
    for the devices other processes hold (``held``: ``Device.key`` -> holder, every user's), or never."""
    index = FleetIndex(fleet.devices, fleet.nodes)
    for device in fleet.devices:
        if held and device.key in held:
            index.hold_foreign(device, held[device.key])
    summary_of_fleet = fleet_summary(fleet.devices) if spec.uses_gpu else nodes_summary(fleet.nodes)
    notes = endpoint_notes(spec, index) + host_option_notes(spec)
    result = place_endpoint(spec, index)
    if isinstance(result, NoFit) and not result.never:
        return Explanation(
            spec.name,
            "a worker would wait now: the devices it could use are held by other processes (the reasons name them)",
            reasons=result.reasons,
            fleet=summary_of_fleet,
            notes=notes,
        )
    if isinstance(result, NoFit):
        return Explanation(
            spec.name,
            f"{never_summary(result)}; its jobs would wait IN_QUEUE until such a node joins",
            reasons=result.reasons,
            never=True,
            fleet=summary_of_fleet,
            notes=notes,
        )
    # The candidates before the one that fits were skipped; on an idle fleet that can only mean they never fit.
    fitted = result.request.name if isinstance(result, CpuFit) else describe_gpu(result.candidate)
    skipped = []
    for reason in never_candidates(spec, index):
        if reason.candidate == fitted:
            break
        skipped.append(reason)
    if isinstance(result, CpuFit):
        cores = ", ".join(str(c) for c in result.slot.cores)
        summary = f"a worker would start now on {result.node} as {fitted} (cores {cores})"
    else:
        first = result.devices[0]
        ids = ", ".join(str(d.index) for d in result.devices)
        plural = "s" if len(result.devices) > 1 else ""
        summary = (
            f"a worker would start now on {len(result.devices)} x {first.model_name} on {result.node} "
            f"(device{plural} {ids}, {'simulated' if first.simulated else 'real'})"
        )
    if skipped:
        summary += f", after falling back past {', '.join(r.candidate for r in skipped)}"
    return Explanation(spec.name, summary, reasons=tuple(skipped), fleet=summary_of_fleet, notes=notes)


def _offline(app_path: str, target: str | None) -> list[Item]:
    if target is not None and split_target(app_path)[1] is not None:
        raise ConfigError("name the endpoint once: either --app app.py:attr or the ENDPOINT argument, not both")
    # What the app prints while it is imported goes to stderr, so that --json output stays parseable.
    with contextlib.redirect_stdout(sys.stderr):
        endpoints = load_endpoints(app_path if target is None else f"{app_path}:{target}")
    # Settings are read after the import: an app may set FLASHPOINT_* variables at import time (the examples
    # simulate GPUs when NVML finds none), and the explanation should see the fleet the app would run on.
    settings = Settings.load()
    fleet = discover_fleet(settings, settings.simulated_gpus)
    held = held_devices(fleet.devices)  # every user's processes, from the lease directory
    source = f"{app_path} against this machine's fleet (nothing started)"
    return [
        Item(explain_offline(ep.spec, fleet, held), source, asks=ep.spec.describe_gpu()) for ep in endpoints.values()
    ]


# ----------------------------------------------------------------------------------------------------------------
# what-if: an app file against a described fleet


def _usage(message: str) -> NoReturn:
    """A bad command line: one line on stderr and exit code 2, as click's usage errors."""
    print(f"Error: {message}", file=sys.stderr)
    raise typer.Exit(2)


def _described_fleet(value: str, settings: Settings) -> SimulatedFleet:
    """``--fleet``: an existing file by any name, ``@path``, ``*.toml``, or the one-line syntax; its nodes take what
    they do not declare from this machine (``fleet.host_node``)."""
    try:
        host = host_node(settings, cuda=settings.simulated_cuda, simulated=True)
        if not is_file_reference(value) and Path(value).expanduser().is_file():
            return load_fleet(value, host=host)
        return read_fleet(value, node=settings.node, where="--fleet", host=host)
    except ConfigError as exc:
        text = str(exc)
        _usage(text if text.startswith("--fleet") else f"--fleet: {text}")


def what_if_command(app_path: str, fleet_value: str, target: str | None, as_json: bool) -> None:
    """Place the workers of the app's endpoints on the described fleet (``whatif.what_if``) and print the rows.

    Every endpoint of the app takes part (they share the fleet); ``target`` only narrows what is shown, while
    ``app.py:attr`` puts that one endpoint alone on the fleet. A bad ``--fleet`` is a usage error (exit code 2).
    """
    if target is not None and split_target(app_path)[1] is not None:
        raise ConfigError("name the endpoint once: either --app app.py:attr or the ENDPOINT argument, not both")
    fleet = _described_fleet(fleet_value, Settings.load())
    # What the app prints while it is imported goes to stderr, so that --json output stays parseable.
    with contextlib.redirect_stdout(sys.stderr):
        endpoints = load_endpoints(app_path)
        shown = set(load_endpoints(f"{app_path}:{target}")) if target is not None else set(endpoints)
    specs = [ep.spec for ep in endpoints.values()]
    rows = [r for r in what_if(specs, fleet.devices, fleet.node_facts) if r.endpoint in shown]
    if as_json:
        print_json(
            {"app": app_path, "fleet": _fleet_json(fleet, fleet_value), "endpoints": [r.to_json() for r in rows]}
        )
        return
    out = console()
    nodes, gpus = len(fleet.nodes), len(fleet.devices)
    out.print(
        f"What-if: {app_path} on the fleet {fleet_value}: {nodes} node{'s' if nodes != 1 else ''}, {gpus} GPU"
        f"{'s' if gpus != 1 else ''}, all simulated (nothing started; no running flashpoint process is asked)",
        markup=False,
    )
    out.print(_fleet_table(fleet))
    for row in rows:
        out.print()
        for line in _row_lines(row):
            out.print(line, markup=False)
        if row.workers:
            out.print(_workers_table(row, fleet))
        for title, reasons in _row_reasons(row):
            out.print(f"  {title}:", markup=False)
            for reason in reasons:
                out.print(f"    {reason}", markup=False)
        for note in row.notes:
            out.print(f"  note: {note}", markup=False)
    if fleet.labels:
        out.print()
        out.print(
            "Node labels: datacenter is matched by datacenter=; the others are shown for reference.", markup=False
        )


def _models(fleet: SimulatedFleet) -> dict[str, dict[str, Any]]:
    models: dict[str, dict[str, Any]] = {}
    for device in fleet.devices:
        entry = models.setdefault(device.model_name, {"model": device.model_name, "gpus": 0, "nodes": []})
        entry["gpus"] += 1
        if not entry["nodes"] or entry["nodes"][-1] != device.node:
            entry["nodes"].append(device.node)
    return models


def _fleet_json(fleet: SimulatedFleet, source: str) -> dict[str, Any]:
    return {
        "source": source,
        "nodes": len(fleet.nodes),
        "gpus": len(fleet.devices),
        "simulated": all(d.simulated for d in fleet.devices),
        "models": [{**m, "nodes": len(m["nodes"])} for m in _models(fleet).values()],
        "labels": {node: dict(labels) for node, labels in fleet.labels.items()},
        "nodeFacts": [n.to_json() for n in fleet.node_facts],
    }


def _fleet_table(fleet: SimulatedFleet) -> Table:
    table = Table(title="Fleet (simulated)", title_justify="left")
    table.add_column("model")
    table.add_column("GPUs", justify="right")
    table.add_column("nodes")
    for entry in _models(fleet).values():
        names: list[str] = entry["nodes"]
        more = f", ... ({len(names) - 3} more)" if len(names) > 4 else ""
        table.add_row(entry["model"], str(entry["gpus"]), ", ".join(names[:3] if more else names) + more)
    return table


def _row_lines(row: Row) -> list[str]:
    placed = len(row.workers)
    cpu = row.asks.startswith("cpu=")
    if row.verdict is Verdict.NEVER:
        if all(r.code is Code.NOT_IN_FLEET for r in row.reasons):
            why = "no candidate can ever fit on this fleet (not enough devices of one model on one node)"
        else:  # a CPU instance too large, or node filters that leave nothing: say which
            why = never_summary(NoFit(row.reasons)).removeprefix("can never run on this fleet: ")
        verdict = f"never: {why}; its jobs would wait IN_QUEUE until such a node joins"
    elif row.verdict is Verdict.WAITS:
        taken = "vCPUs and memory" if cpu else "GPUs"
        verdict = (
            f"waits: busy: gets {placed} of the {row.needed} worker{'s' if row.needed > 1 else ''} its jobs need "
            f"(the {taken} it could use are taken by the workers placed before it)"
        )
    elif placed == row.workers_max:
        verdict = f"runs: gets all {placed} of its workers"
    else:
        verdict = f"runs: gets {placed} of its {row.workers_max} workers; a worker more would wait: busy"
    return [
        f"endpoint {row.endpoint}: {verdict}",
        f"  asks for {row.asks}, workers {row.workers_min}..{row.workers_max}",
    ]


def _row_reasons(row: Row) -> list[tuple[str, tuple[WaitReason, ...]]]:
    parts: list[tuple[str, tuple[WaitReason, ...]]] = []
    if row.reasons:
        title = "why" if row.verdict is Verdict.NEVER else f"why worker {len(row.workers) + 1} finds no room"
        parts.append((title, row.reasons))
    if row.skipped and row.verdict is not Verdict.NEVER:
        parts.append(("candidates that never fit on this fleet (its fallback skips them)", row.skipped))
    return parts


def _workers_table(row: Row, fleet: SimulatedFleet) -> Table:
    table = Table(title_justify="left", padding=(0, 1))
    for column in ("worker", "for", "model", "node", "devices", "kind", "node labels"):
        table.add_column(column)
    why = {"min": "its minimum", "first": "its first job", "scale": "scaling up"}
    for worker in row.workers:
        labels = fleet.labels.get(worker.node, {})
        where = (
            ", ".join(str(d.index) for d in worker.devices)
            if worker.cpu is None
            else "cores " + ", ".join(str(c) for c in worker.cpu.cores)
        )
        table.add_row(
            worker.worker_id,
            why[worker.phase],
            worker.model,
            worker.node,
            where,
            "simulated" if worker.simulated else "real",
            Text(", ".join(f"{k}={v}" for k, v in labels.items()) or "-"),
        )
    return table


# ----------------------------------------------------------------------------------------------------------------
# live: the running flashpoint processes


def _endpoint_items(plane: LivePlane, body: dict[str, Any]) -> list[Item]:
    return [
        Item(Explanation.from_json(ep["explanation"]), describe(plane), plane.pid, asks=ep.get("gpu"))
        for ep in body["endpoints"]
    ]


def _held_here(settings: Settings) -> str:
    """A line naming who holds this machine's devices (every user's processes, from the lease directory; another
    user's processes announce nothing to this user): empty when nobody does, or the fleet cannot be read."""
    try:
        local = discover_fleet(settings, settings.simulated_gpus).devices
    except Error:
        return ""
    held = holders_note(local, held_devices(local))
    return f"\n{held}" if held else ""


def _live(
    target: str | None,
    settings: Settings,
    url: str | None = None,
    key: str | None = None,
    notes: list[str] | None = None,
    shown: AppFilter | None = None,
) -> list[Item]:
    """Ask the planes (this machine's, or the one at ``url``) about ``target`` or, without it, every endpoint of
    ``shown``'s app and environment; what cannot be said goes to ``notes`` (else stderr)."""
    shown = shown or AppFilter()

    def note(text: str) -> None:
        if notes is None:
            print(inert(text), file=sys.stderr)
        else:
            notes.append(text)

    found = planes(url, key, settings)
    if not found:
        message = no_plane_message(settings, _OFFLINE_HINT) + _held_here(settings)
        if target is not None and notes is None:
            raise NotFoundError(message)
        note(message)
        return []
    if target is None:
        items: list[Item] = []
        for plane in found:
            body = ask(plane, "/v1/endpoints", shown.params() or None, notes=notes)
            if body is not None:
                # (a plane older than the filters lists every endpoint: they are applied here too)
                body = {"endpoints": [ep for ep in body["endpoints"] if shown.matches(ep["name"])]}
                if not body["endpoints"]:
                    said = f"no endpoints of {shown}" if shown.active else "no endpoint has been called yet"
                    note(f"{describe(plane)}: {said}")
                items.extend(_endpoint_items(plane, body))
        return items
    names: list[str] = []
    for plane in found:
        job = ask(plane, f"/v1/jobs/{quote(target, safe='')}", notes=notes)
        if job is not None:
            if not shown.matches(job["endpoint"]):
                raise NotFoundError(f"job {target!r} is a job of {job['endpoint']!r}, not of {shown}")
            explanation = Explanation.from_json(job["explanation"])
            cold = coldstart.sentence(coldstart.from_json(job.get("coldStart")))
            return [Item(explanation, describe(plane), plane.pid, placement=job.get("placement"), cold_start=cold)]
    name = _filtered_name(found, target, shown, notes)
    for plane in found:
        endpoint = ask(plane, f"/v1/endpoints/{quote(name, safe='')}/explain", notes=notes)
        if endpoint is not None and shown.matches(endpoint["endpoint"]):
            return [Item(Explanation.from_json(endpoint), describe(plane), plane.pid)]
        body = ask(plane, "/v1/endpoints", notes=notes)
        names.extend(ep["name"] for ep in (body or {}).get("endpoints", []))
    names = [name for name in names if shown.matches(name)]
    known = f"; endpoints: {', '.join(sorted(set(names)))}" if names else ""
    scope = f" of {shown}" if shown.active else ""
    raise NotFoundError(f"no job or endpoint {target!r}{scope} in {where(found)}{known}")


def _filtered_name(found: list[LivePlane], target: str, shown: AppFilter, notes: list[str] | None) -> str:
    """The endpoint a bare name means within ``shown``: ``app.env.name`` when both are given, else the one endpoint
    of that name the filter keeps (several: ``ConflictError`` naming them); an id, or no filter, is asked as it is
    (the planes answer an ambiguous bare name with 409, naming the ids)."""
    if not shown.active or split_endpoint_id(target) is not None:
        return target
    if shown.app is not None and shown.env is not None:
        return endpoint_id(shown.app, shown.env, target)
    ids: set[str] = set()
    for plane in found:
        body = ask(plane, "/v1/endpoints", shown.params(), notes=notes) or {}
        ids.update(
            ep["name"]
            for ep in body.get("endpoints", [])
            if shown.matches(ep["name"]) and (split_endpoint_id(ep["name"]) or ("", "", ""))[2] == target
        )
    if len(ids) > 1:
        raise ConflictError(f"endpoint name {target!r} is ambiguous within {shown}: {', '.join(sorted(ids))}; name one")
    return ids.pop() if ids else target
