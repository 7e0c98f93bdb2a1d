"""Output helpers shared by the commands: a rich console sized for pipes, JSON printing, fleet rows.

Edge module: may import anything in flashpoint, plus rich.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from flashpoint.scheduler.inventory import Device


def console() -> Console:
    """A console on the current stdout; when stdout is not a terminal, wide enough that tables never wrap."""
    out = Console(highlight=False, emoji=False)
    if not out.is_terminal:
        out = Console(highlight=False, emoji=False, width=200)
    return out


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False))


def device_row(device: Device) -> dict[str, Any]:
    """A device as ``GET /v1/fleet`` shows it, with no holder (nothing runs outside a control plane)."""
    model = device.model
    return {
        "node": device.node,
        "index": device.index,
        "name": device.name,
        "model": device.model_name,
        "pool": model.pool.value if model is not None and model.pool is not None else None,
        "vramGb": model.vram_gb if model is not None else round(device.memory_mb / 1024),
        "recognised": model is not None,
        "simulated": device.simulated,
        "worker": None,
        "endpoint": None,
    }


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


def fleet_summary(devices: Sequence[Device]) -> str:
    """The fleet in one line, as the control plane words it in explanations."""
    if not devices:
        return "no GPUs (set FLASHPOINT_SIMULATED_GPUS=NVIDIA_H200:1 to simulate some)"
    counts: dict[tuple[str, str, bool], int] = {}
    for d in devices:
        key = (d.node, d.model_name, d.simulated)
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(
        f"{n} x {model}{' (simulated)' if sim else ''} on {node}" for (node, model, sim), n in counts.items()
    )
