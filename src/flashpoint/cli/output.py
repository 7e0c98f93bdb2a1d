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
