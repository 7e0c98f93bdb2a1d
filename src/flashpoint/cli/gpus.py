"""``flashpoint gpus``: the GPUs of this machine (or of the running flashpoint processes, or of the server at --url),
and the catalog.

Edge module: may import anything in flashpoint, plus typer and rich.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from flashpoint.cli.holders import held_devices, mark_rows
from flashpoint.cli.live import LivePlane, describe
from flashpoint.cli.output import (
    CountOption,
    IntervalOption,
    JsonOption,
    WatchOption,
    check_watch,
    console,
    device_row,
    model_summary,
    print_json,
    watch as watch_view,
)
from flashpoint.cli.target import KeyOption, UrlOption, ask, planes
from flashpoint.config import Settings
from flashpoint.fleet.discovery import discover_fleet
from flashpoint.fleet.inventory import Device, Fleet, Node
from flashpoint.fleet.telemetry import SIMULATED, NvmlReader, sampled_devices
from flashpoint.gpus import MODELS, GpuGroup, pool_models
from flashpoint.scheduler.gpustats import GpuStats
from flashpoint.scheduler.ownership.leases import lease_dir
from flashpoint.terminal import inert_data


def gpus(
    as_json: JsonOption = False,
    catalog: Annotated[
        bool, typer.Option("--catalog", help="Print the GpuType / GpuGroup catalog instead of this machine's GPUs.")
    ] = False,
    url: UrlOption = None,
    key: KeyOption = None,
    watch: WatchOption = False,
    interval: IntervalOption = 2.0,
    count: CountOption = None,
) -> None:
    """Show the GPUs flashpoint would use here, and who holds them; and the nodes, with the vCPUs and memory CPU
    workers may reserve, their CUDA version and labels.

    With flashpoint processes running on this machine (`flashpoint serve` servers and scripts), shows each one's
    fleet and the worker holding each device; with --url, the fleet of the server there.

    Otherwise, with FLASHPOINT_BACKEND=ray and FLASHPOINT_RAY_ADDRESS set, shows the Ray cluster's fleet.

    Otherwise discovers the local fleet: simulated devices when FLASHPOINT_SIMULATED_GPUS is set, else NVML's.
    """
    if catalog:
        _catalog(as_json)
        return
    check_watch(watch, as_json)
    if watch:

        def draw() -> RenderableType:
            notes: list[str] = []
            source, fleets, settings = collect(url, key, notes)
            return Group(*render(source, fleets, settings), *(Text(note) for note in notes))

        watch_view(draw, interval=interval, count=count, out=console())
        return
    source, fleets, settings = collect(url, key, None)
    if as_json:
        print_json({"source": source, "fleets": fleets})
        return
    out = console()
    for part in render(source, fleets, settings):
        out.print(part)


def collect(url: str | None, key: str | None, notes: list[str] | None) -> tuple[str, list[dict[str, Any]], Settings]:
    """Where the fleets come from (``live``, ``url``, ``ray`` or ``local``) and each one's devices, models and nodes.

    Planes of this machine that do not answer are skipped (noted in ``notes``, else on stderr)."""
    settings = Settings.load()
    fleets: list[dict[str, Any]] = []
    for plane in planes(url, key, settings):
        fleet = _plane_fleet(plane, notes)
        if fleet is not None:
            fleets.append(fleet)
    if url:
        return "url", fleets, settings
    source = "live"
    if not fleets and settings.backend == "ray" and settings.ray_address:
        source = "ray"
        fleets.append(_fleet_body(_ray_fleet(settings), settings.ray_address))
    if not fleets:
        source = "local"
        local = discover_fleet(settings, settings.simulated_gpus)
        body = _fleet_body(local, None)
        _add_telemetry(body["devices"], local.devices, settings.node)
        # no plane of this user is announced, but another user's (or an unannounced) process may hold devices here
        held = held_devices(local.devices)
        mark_rows(body["devices"], local.devices, held)
        body["models"] = model_summary(body["devices"])
        body["leaseDir"] = str(lease_dir()) if held else None
        fleets.append(body)
    return source, fleets, settings


def render(source: str, fleets: Sequence[dict[str, Any]], settings: Settings) -> list[RenderableType]:
    """What ``flashpoint gpus`` prints (and redraws with --watch): per fleet, its devices, models and nodes; their
    texts inert (holders, nodes and labels come from the planes)."""
    fleets = inert_data(fleets)
    parts: list[RenderableType] = []
    for fleet in fleets:
        rows = fleet["devices"]
        if source == "ray":
            title = (
                f"GPUs of the Ray cluster at {fleet['url']} (from its nodes' labels; no flashpoint process runs here)"
            )
        elif fleet.get("source") is None:
            origin = "simulated via FLASHPOINT_SIMULATED_GPUS" if settings.simulated_gpus else "NVML"
            if fleet.get("leaseDir"):
                title = (
                    f"GPUs of this machine ({origin}; no flashpoint process of this user is announced here; "
                    f"holders of every user from the lease directory {fleet['leaseDir']})"
                )
            else:
                title = f"GPUs of this machine ({origin}; no flashpoint process holds one, so all are free)"
        else:
            title = f"GPUs of {fleet['source']}"
        if not rows:
            parts.append(Text(f"{title}: none. Set FLASHPOINT_SIMULATED_GPUS=NVIDIA_H200:1 to simulate some."))
        else:
            parts.append(device_table(title, rows))
            if not _telemetry_column(rows):  # every device simulated: one line says what a column would repeat
                parts.append(Text(f"telemetry: {SIMULATED} (every device here is simulated)"))
            parts.append(summary_table(fleet["models"]))
        if fleet.get("nodes"):
            parts.append(node_table(fleet["nodes"]))
    return parts


def _fleet_body(fleet: Fleet, url: str | None) -> dict[str, Any]:
    rows = [device_row(d) for d in fleet.devices]
    return {
        "pid": None,
        "url": url,
        "kind": None,
        "source": None,
        "devices": rows,
        "models": model_summary(rows),
        "nodes": _node_rows(fleet.nodes),
    }


def _add_telemetry(rows: list[dict[str, Any]], devices: Sequence[Device], node: str) -> None:
    """Give each row (``rows[i]`` shows ``devices[i]``) its GPU telemetry: one NVML sample of this machine's real
    devices, read now; "simulated: no telemetry" for simulated ones (nothing is invented for them)."""
    stats = GpuStats()
    readable = sampled_devices(devices, node)
    if readable:
        reader = NvmlReader()
        try:
            stats.record(reader.read(readable), (), time.time())
        finally:
            reader.close()
    for row, device in zip(rows, devices, strict=True):
        row["telemetry"] = stats.telemetry(device)


def telemetry_text(telemetry: dict[str, Any] | None) -> str:
    """A device's telemetry in words: "37% util, 812 / 81559 MiB, 41 °C, 72 W, 1 process", or why there is none
    ("simulated: no telemetry", "unknown: ..."); a figure the device does not report is left out, never shown as 0."""
    if not telemetry:
        return "-"
    if telemetry.get("status") != "sampled":
        return str(telemetry.get("detail") or telemetry.get("status"))
    parts = []
    if telemetry.get("utilizationPct") is not None:
        parts.append(f"{telemetry['utilizationPct']:g}% util")
    if telemetry.get("memoryUsedMb") is not None and telemetry.get("memoryTotalMb") is not None:
        parts.append(f"{telemetry['memoryUsedMb']} / {telemetry['memoryTotalMb']} MiB")
    if telemetry.get("temperatureC") is not None:
        parts.append(f"{telemetry['temperatureC']:g} °C")
    if telemetry.get("powerW") is not None:
        parts.append(f"{telemetry['powerW']:.0f} W")
    processes = telemetry.get("processes") or []
    if processes:
        parts.append(f"{len(processes)} process{'es' if len(processes) > 1 else ''}")
    return ", ".join(parts) or "sampled: no figures reported"


def _node_rows(nodes: Sequence[Node]) -> list[dict[str, Any]]:
    """Nodes as ``GET /v1/fleet`` shows them, with nothing reserved (nothing runs outside a control plane)."""
    rows = []
    for node in nodes:
        row = node.to_json()
        rows.append({**row, "freeCpus": node.cpus, "freeMemoryGb": row["memoryGb"], "reservations": []})
    return rows


def _ray_fleet(settings: Settings) -> Fleet:
    """The devices and nodes of the Ray cluster FLASHPOINT_RAY_ADDRESS names, as the Ray backend would see them."""
    import ray

    from flashpoint.backends.ray import RayBackend

    backend = RayBackend(settings.ray_address)
    backend.connect()
    try:
        return Fleet.of(backend.devices(), backend.nodes())
    finally:
        ray.shutdown()


def ray_flags(
    simulated_gpus: Annotated[
        str | None,
        typer.Option(help="Describe simulated devices instead, e.g. 'NVIDIA_H200:1' (as FLASHPOINT_SIMULATED_GPUS)."),
    ] = None,
) -> None:
    """Print the `ray start` flags that describe this node's GPUs to flashpoint's Ray backend.

    The GPU count and a gpu-model label holding the exact NVML name (spaces as hyphens), read from NVML, or from
    FLASHPOINT_SIMULATED_GPUS; the driver's CUDA version (cuda-version) and FLASHPOINT_DATACENTER (datacenter) as
    labels; and, when FLASHPOINT_CPUS or FLASHPOINT_MEMORY_GB declare them, --num-cpus and --memory.
    Use it as: ray start --address=HEAD:6379 $(flashpoint ray-flags)
    """
    from flashpoint.backends.ray import start_flags

    settings = Settings.load()
    fleet = discover_fleet(settings, simulated_gpus or settings.simulated_gpus)
    node = next((n for n in fleet.nodes if n.name == settings.node), fleet.nodes[0] if fleet.nodes else None)
    declared = settings.cpus is not None or settings.memory_gb is not None
    print(" ".join(start_flags(fleet.devices, node, declared=declared)))


def _plane_fleet(plane: LivePlane, notes: list[str] | None) -> dict[str, Any] | None:
    body = ask(plane, "/v1/fleet", notes=notes)
    if body is None:
        return None
    rows: list[dict[str, Any]] = body["devices"]
    return {
        "pid": plane.pid,
        "url": plane.url,
        "kind": plane.kind,
        "source": describe(plane),
        "devices": rows,
        "models": model_summary(rows),
        "nodes": body.get("nodes", []),
    }


def _model_label(row: dict[str, Any]) -> str:
    label = str(row["model"]) if row["recognised"] else f"{row['name']} - unrecognised (ANY only)"
    if row.get("coarse"):
        label += " (coarse: Ray accelerator type; label the node, see `flashpoint ray-flags`)"
    return label


def _telemetry_column(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether the device table has a telemetry column: some device is real (or its server says nothing of it)."""
    return any((row.get("telemetry") or {}).get("status") != "simulated" for row in rows)


def device_table(title: str, rows: Sequence[dict[str, Any]]) -> Table:
    """The devices, who holds each, and (when some device is real) each one's GPU telemetry in words."""
    table = Table(title=title, title_justify="left")
    telemetry = _telemetry_column(rows)
    for column in ("node", "index", "model", "pool", "VRAM", "kind", "status", *(("telemetry",) if telemetry else ())):
        table.add_column(column, justify="right" if column in ("index", "VRAM") else "left")
    for row in rows:
        if row.get("process"):  # another process (its label names its worker), or what keeps this user out
            status = f"held by {row['endpoint']}"
        elif row["worker"] is None:
            status = "free"
        else:
            status = f"held by {row['endpoint']} (worker {row['worker']})"
        table.add_row(
            str(row["node"]),
            str(row["index"]),
            _model_label(row),
            row["pool"] or "-",
            f"{row['vramGb']} GB",
            "simulated" if row["simulated"] else "real",
            status,
            *((telemetry_text(row.get("telemetry")),) if telemetry else ()),
        )
    return table


def node_table(rows: Sequence[dict[str, Any]]) -> Table:
    """The nodes: what CPU workers may reserve there and what is free, the driver's CUDA version, the labels."""
    table = Table(title="Nodes (CPU workers reserve vCPUs and memory here)", title_justify="left")
    for column in ("node", "vCPUs", "memory", "CUDA", "labels", "kind", "CPU workers"):
        table.add_column(column, justify="right" if column in ("vCPUs", "memory") else "left")
    for row in rows:
        held = [
            f"{r['endpoint']} (worker {r['worker']}, cores {','.join(map(str, r['cores']))})"
            for r in row["reservations"]
        ]
        table.add_row(
            str(row["name"]),
            f"{row['freeCpus']} of {row['cpus']} free",
            f"{row['freeMemoryGb']:g} of {row['memoryGb']:g} GB free",
            row["cuda"] or "unknown",
            ", ".join(f"{k}={v}" for k, v in row["labels"].items()) or "-",
            "simulated" if row["simulated"] else "real",
            "; ".join(held) or "-",
        )
    return table


def summary_table(models: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="Per model", title_justify="left")
    table.add_column("model")
    table.add_column("count", justify="right")
    table.add_column("free", justify="right")
    for entry in models:
        label = entry["model"] if entry["recognised"] else f"{entry['model']} - unrecognised (ANY only)"
        table.add_row(label, str(entry["count"]), str(entry["free"]))
    return table


def _catalog(as_json: bool) -> None:
    models: list[dict[str, Any]] = [
        {
            "member": m.member.name if m.member is not None else None,
            "name": m.name,
            "vramGb": m.vram_gb,
            "architecture": m.architecture,
            "pool": m.pool.value if m.pool is not None else None,
        }
        for m in MODELS
    ]
    groups: list[dict[str, Any]] = [
        {"group": g.name, "models": [m.name for m in pool_models(g)] if g is not GpuGroup.ANY else ["ANY"]}
        for g in GpuGroup
    ]
    if as_json:
        print_json({"models": models, "groups": groups})
        return
    out = console()
    table = Table(
        title="GPU models (GpuType)",
        title_justify="left",
        caption="(none): no GpuType member, but recognised on real hardware and in its pool",
        caption_justify="left",
    )
    for column in ("GpuType member", "model (NVML name)", "VRAM", "architecture", "pool (GpuGroup)"):
        table.add_column(column, justify="right" if column == "VRAM" else "left")
    for entry in models:
        table.add_row(
            entry["member"] or "(none)",
            entry["name"],
            f"{entry['vramGb']} GB",
            entry["architecture"],
            entry["pool"] or "-",
        )
    out.print(table)
    pools = Table(title="Pools (GpuGroup), models in fallback order", title_justify="left")
    pools.add_column("GpuGroup member")
    pools.add_column("models")
    for group in groups:
        if group["group"] == GpuGroup.ANY.name:
            pools.add_row(group["group"], "every device, recognised or not (GpuType.ANY is the same)")
        else:
            pools.add_row(group["group"], " > ".join(group["models"]))
    out.print(pools)
