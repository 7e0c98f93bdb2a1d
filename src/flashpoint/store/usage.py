"""Workers' device time as the job store keeps it: ``UsageRecord``, one time bucket of one (endpoint, app,
environment, key, model, kind) series, and the pure helpers both stores share (decision 0112).

A record's amounts are added to, never overwritten: ``JobStore.add_usage`` adds each record to the row of its
``cell`` (the bucket and the series), so a plane that flushes what accrued since its last flush loses nothing and
counts nothing twice. Old minute buckets are folded into hour buckets (``fold``), so history stays bounded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

#: what a row is keyed by: (start, span, endpoint, app, env, key, model, kind)
Cell = tuple[float, float, str, str, str, str, str, str]


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """Device time of one series in one time bucket.

    ``start`` is the bucket's start (wall time, epoch seconds, a multiple of ``span``: 60 for a minute, 3600 for an
    hour); ``kind`` is ``busy``, ``idle`` or ``starting``; ``key`` the name of the key that submitted the jobs the
    time was busy with ("" for idle and starting time, route requests and jobs no key submitted); ``model`` the GPU
    model, or a CPU worker's instance type. ``first`` and ``last`` are the earliest and latest wall times of the use
    the bucket holds: a window that cuts a bucket counts the share of its amounts that ``[first, last]`` has inside
    the window."""

    start: float
    span: float
    endpoint: str
    app: str
    env: str
    key: str
    model: str
    kind: str
    gpu_s: float
    vcpu_s: float
    memory_mb_s: float
    first: float
    last: float

    @property
    def cell(self) -> Cell:
        return (self.start, self.span, self.endpoint, self.app, self.env, self.key, self.model, self.kind)


def merge(a: UsageRecord, b: UsageRecord) -> UsageRecord:
    """Two records of one cell as one: amounts added, the use's span widened."""
    return replace(
        a,
        gpu_s=a.gpu_s + b.gpu_s,
        vcpu_s=a.vcpu_s + b.vcpu_s,
        memory_mb_s=a.memory_mb_s + b.memory_mb_s,
        first=min(a.first, b.first),
        last=max(a.last, b.last),
    )


def fold(records: Iterable[UsageRecord], before: float, span: float) -> list[UsageRecord]:
    """``records`` with every one shorter than ``span`` that starts before ``before`` merged into the ``span``-long
    bucket it falls in (``before`` is a multiple of ``span``, so no bucket is half folded). Order: by cell."""
    out: dict[Cell, UsageRecord] = {}
    for record in records:
        if record.span < span and record.start < before:
            record = replace(record, start=record.start // span * span, span=span)
        known = out.get(record.cell)
        out[record.cell] = record if known is None else merge(known, record)
    return [out[cell] for cell in sorted(out)]
