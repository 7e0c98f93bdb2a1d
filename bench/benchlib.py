"""What the bench scripts share: latency percentiles and plain-text tables. No side effects on import."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentiles(samples_s: list[float]) -> dict[str, float]:
    """p50, p99 and mean in milliseconds of samples in seconds (NaN when there are none), and their count."""
    if not samples_s:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "mean_ms": float("nan"), "n": 0}
    ordered = sorted(samples_s)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "mean_ms": statistics.fmean(ordered) * 1000, "n": len(ordered)}


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart, with a rule of dashes under the header."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
