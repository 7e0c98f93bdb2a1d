"""``flashpoint explain``: why jobs wait, from the running flashpoint processes or, with ``--app``, offline.

Edge module: may import anything in flashpoint, plus typer and httpx (through ``cli.live``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import quote

import typer

from flashpoint.cli.live import LivePlane, Unreachable, describe, live_planes, no_plane_message
from flashpoint.cli.output import print_json
from flashpoint.config import Settings
from flashpoint.discovery import load_endpoints, split_target
from flashpoint.errors import ConfigError, NotFoundError
from flashpoint.explain import Explanation, Reason
from flashpoint.fleet import discover
from flashpoint.scheduler.inventory import Device, Inventory, fleet_summary
from flashpoint.scheduler.placement import NoFit, place
from flashpoint.spec import EndpointSpec


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

    def to_json(self) -> dict[str, Any]:
        body = self.explanation.to_json()
        body.update({"source": self.source, "pid": self.pid, "gpu": self.asks, "placement": self.placement})
        return body

    def __str__(self) -> str:
        lines = str(self.explanation).split("\n")
        if self.asks:
            lines.insert(1, f"  asks for {self.asks}")
        if self.placement:
            p = self.placement
            devices = ", ".join(str(i) for i in p.get("deviceIds", []))
            kind = "simulated" if p.get("simulated") else "real"
            lines.insert(1, f"  ran on {p.get('gpuModel') or 'CPU'} on {p.get('node')} (device {devices}, {kind})")
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
            metavar="APP",
            help="Explain the endpoints of app.py (or package.module) against this machine's fleet, starting nothing.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Say why jobs wait IN_QUEUE (or that they don't), per GPU candidate.

    Without --app, asks the flashpoint processes running on this machine about a job, an endpoint, or all endpoints.

    With --app, loads the endpoints of a file or module and says, starting nothing, which GPUs a worker would get now.
    """
    if app_path is not None:
        items = _offline(app_path, target)
    else:
        items = _live(target, Settings.load())
    if as_json:
        print_json({"explanations": [item.to_json() for item in items]})
        return
    source = None
    for item in items:
        if item.source != source:
            print(f"== {item.source}")
            source = item.source
        print(item, end="\n\n")


# ----------------------------------------------------------------------------------------------------------------
# offline: an app file against the local fleet


def explain_offline(spec: EndpointSpec, devices: Sequence[Device]) -> Explanation:
    """What a control plane on ``devices`` would do for ``spec`` with nothing running: place a worker, or never."""
    fleet = fleet_summary(devices)
    if not spec.uses_gpu:
        return Explanation(spec.name, f"CPU endpoint ({spec.cpu}): needs no GPU; a worker would start now", fleet=fleet)
    inventory = Inventory(tuple(devices))
    result = place(spec.candidates, spec.gpu_count, inventory)
    if isinstance(result, NoFit):
        return Explanation(
            spec.name,
            "can never run on this fleet: no candidate exists in it with enough devices on one node; "
            "its jobs would wait IN_QUEUE until such a device joins",
            reasons=result.reasons,
            never=True,
            fleet=fleet,
        )
    # The candidates before the one that fits were skipped; on an idle fleet that can only mean not_in_fleet.
    skipped: list[Reason] = []
    for candidate in spec.candidates:
        if candidate == result.candidate:
            break
        earlier = place((candidate,), spec.gpu_count, inventory)
        if isinstance(earlier, NoFit):
            skipped.extend(earlier.reasons)
    first = result.devices[0]
    ids = ", ".join(str(d.index) for d in result.devices)
    plural = "s" if len(result.devices) > 1 else ""
    summary = (
        f"a worker would start now on {len(result.devices)} x {first.model_name} on {result.node} "
        f"(device{plural} {ids}, {'simulated' if first.simulated else 'real'})"
    )
    if skipped:
        summary += f", after falling back past {', '.join(r.candidate for r in skipped)}"
    return Explanation(spec.name, summary, reasons=tuple(skipped), fleet=fleet)


def _offline(app_path: str, target: str | None) -> list[Item]:
    if target is not None and split_target(app_path)[1] is not None:
        raise ConfigError("name the endpoint once: either --app app.py:attr or the ENDPOINT argument, not both")
    # What the app prints while it is imported goes to stderr, so that --json output stays parseable.
    with contextlib.redirect_stdout(sys.stderr):
        endpoints = load_endpoints(app_path if target is None else f"{app_path}:{target}")
    # Settings are read after the import: an app may set FLASHPOINT_* variables at import time (the examples
    # simulate GPUs when NVML finds none), and the explanation should see the fleet the app would run on.
    settings = Settings.load()
    devices = discover(settings.simulated_gpus, node=settings.node)
    source = f"{app_path} against this machine's fleet (nothing started)"
    return [Item(explain_offline(ep.spec, devices), source, asks=ep.spec.describe_gpu()) for ep in endpoints.values()]


# ----------------------------------------------------------------------------------------------------------------
# live: the running flashpoint processes


def _get(plane: LivePlane, path: str) -> dict[str, Any] | None:
    try:
        return plane.get(path)
    except Unreachable as exc:
        print(f"warning: {exc}; skipped", file=sys.stderr)
        return None


def _endpoint_items(plane: LivePlane, body: dict[str, Any]) -> list[Item]:
    return [
        Item(Explanation.from_json(ep["explanation"]), describe(plane), plane.pid, asks=ep.get("gpu"))
        for ep in body["endpoints"]
    ]


def _live(target: str | None, settings: Settings) -> list[Item]:
    planes = live_planes(settings)
    if not planes:
        if target is not None:
            raise NotFoundError(no_plane_message(settings))
        print(no_plane_message(settings), file=sys.stderr)
        return []
    if target is None:
        items: list[Item] = []
        for plane in planes:
            body = _get(plane, "/v1/endpoints")
            if body is not None:
                if not body["endpoints"]:
                    print(f"{describe(plane)}: no endpoint has been called yet", file=sys.stderr)
                items.extend(_endpoint_items(plane, body))
        return items
    names: list[str] = []
    for plane in planes:
        job = _get(plane, f"/v1/jobs/{quote(target, safe='')}")
        if job is not None:
            explanation = Explanation.from_json(job["explanation"])
            return [Item(explanation, describe(plane), plane.pid, placement=job.get("placement"))]
    for plane in planes:
        found = _get(plane, f"/v1/endpoints/{quote(target, safe='')}/explain")
        if found is not None:
            return [Item(Explanation.from_json(found), describe(plane), plane.pid)]
        body = _get(plane, "/v1/endpoints")
        names.extend(ep["name"] for ep in (body or {}).get("endpoints", []))
    pids = ", ".join(str(p.pid) for p in planes)
    known = f"; endpoints: {', '.join(sorted(set(names)))}" if names else ""
    raise NotFoundError(f"no job or endpoint {target!r} in the flashpoint process(es) running here (pid {pids}){known}")
