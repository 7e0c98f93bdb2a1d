"""A cold start's phases (decision 0118): their names and order, the bounded header a flashpoint worker reports the
phases only it sees in, and the sentence ``flashpoint job`` and ``explain`` print.

Pure. The plane measures ``devices`` (a job's wait in the queue until the worker that ran it was started with its
devices), ``environment`` (an endpoint's environment build or cache hit, where one ran for the start) and
``process`` (launch to ready, less what the worker reports); the worker measures ``imports`` (importing the user's
module) and ``init`` (the init hook) and sends them once, on its first job-take, in ``X-Flashpoint-Phases``
(``imports=2.013,init=35.2``). ``first_job`` is from ready to the first job's start. A class endpoint's ``init`` is
its first instance's constructor, which runs in the worker's first job: the worker reports it with that job's result,
and it is added to the worker's phases and to that job's (whose phases then sum to its wait plus the constructor).
A ``runpod`` worker sends nothing: its ``imports`` and ``init`` are unknown and counted in ``process``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

#: every phase, in the order a start goes through them
PHASES = ("devices", "environment", "process", "imports", "init", "first_job")
#: the phases only the worker sees, which it may report
REPORTED = ("imports", "init")
#: the header a flashpoint worker reports its phases in, on its first job-take
HEADER = "X-Flashpoint-Phases"
#: the longest header value taken (a longer one is ignored whole)
MAX_HEADER_CHARS = 200
#: the largest duration a phase may report (a day): a larger one is ignored
MAX_PHASE_S = 86400.0
#: how each phase reads in the sentence
_WORDS = {
    "devices": "for devices",
    "environment": "environment",
    "process": "process",
    "imports": "imports",
    "init": "init",
    "first_job": "to the first job",
}


def encode(phases: Mapping[str, float]) -> str:
    """The header value for ``phases`` (the reported ones only, in order, to the millisecond)."""
    return ",".join(f"{name}={phases[name]:.3f}" for name in REPORTED if name in phases)


def parse(value: str | None) -> dict[str, float]:
    """The phases a header reports, validated: only ``REPORTED`` names with finite numbers in [0, MAX_PHASE_S]; an
    item that is not so is ignored, and a value longer than ``MAX_HEADER_CHARS`` is ignored whole (never stored
    raw)."""
    if not value or len(value) > MAX_HEADER_CHARS:
        return {}
    phases: dict[str, float] = {}
    for item in value.split(","):
        name, sep, number = item.partition("=")
        name = name.strip()
        if not sep or name not in REPORTED or name in phases:
            continue
        try:
            seconds = float(number)
        except ValueError:
            continue
        if math.isfinite(seconds) and 0.0 <= seconds <= MAX_PHASE_S:
            phases[name] = seconds
    return {name: phases[name] for name in REPORTED if name in phases}


def ordered(phases: Mapping[str, float]) -> dict[str, float]:
    """``phases`` in ``PHASES`` order, unknown names left out."""
    return {name: phases[name] for name in PHASES if name in phases}


def sentence(phases: Mapping[str, float]) -> str:
    """``this job waited 41 s: 3 s for devices, 0.4 s process, 2 s imports, 35 s init`` (no phases: empty)."""
    known = ordered(phases)
    if not known:
        return ""
    parts = ", ".join(f"{_seconds(s)} {_WORDS[name]}" for name, s in known.items())
    return f"this job waited {_seconds(sum(known.values()))} on a cold start: {parts}"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def ready_phases(known: Mapping[str, float], start_to_ready_s: float, header: str | None) -> dict[str, float]:
    """A worker's phases once it is ready, ``start_to_ready_s`` after the plane started it: what the plane ``known``
    already (``environment``), the phases the worker's ``header`` reports, and ``process``, the rest of the start
    (never below zero): so a worker's phases sum to its start-to-ready time, unless it reports more than that."""
    reported = parse(header)
    seen = known.get("environment", 0.0) + sum(reported.values())
    return ordered({**known, "process": max(0.0, start_to_ready_s - seen), **reported})


def first_job(
    phases: Mapping[str, float],
    created_at: float,
    started_at: float,
    ready_at: float,
    now: float,
    built: tuple[float, float] | None = None,
) -> tuple[dict[str, float], dict[str, float] | None]:
    """A worker's first job starts ``now`` (wall clock, as the others): the worker's phases with ``first_job`` (ready
    to now), and the job's cold start: None when the job came after the worker was ready (it waited on no start),
    else the worker's phases with ``devices``, the job's wait before the worker started (never below zero), less
    ``environment``: the part of that wait its endpoint's environment spent building, ``built`` = (began, ready),
    (a cache hit: about nothing; None: the endpoint has no environment of its own). A job that came while the worker
    started waited on part of its phases only: its ``devices`` is 0 and the sum is more than its wait."""
    mine = ordered({**phases, "first_job": max(0.0, now - ready_at)})
    if created_at >= ready_at:
        return mine, None
    waited = max(0.0, started_at - created_at)
    job = {**mine, "devices": waited}
    if built is not None:
        environment = min(waited, max(0.0, min(built[1], started_at) - max(built[0], created_at)))
        job.update(environment=environment, devices=waited - environment)
    return mine, ordered(job)


def from_json(data: object) -> dict[str, float]:
    """The phases a job's or worker's JSON carries (``coldStart``, ``phases``), read defensively: known names with
    finite non-negative numbers only, in order (anything else, say from an older server, is left out)."""
    if not isinstance(data, dict):
        return {}
    return {
        name: float(data[name])
        for name in PHASES
        if isinstance(data.get(name), int | float)
        and not isinstance(data.get(name), bool)
        and math.isfinite(data[name])
        and data[name] >= 0
    }


def reported_late(phases: Mapping[str, float], header: str | None) -> dict[str, float]:
    """A ready worker's ``phases`` with what its ``header`` reports, when it reports after it was made ready (a
    ping came first): taken only before its first job and only once, out of its ``process`` (the start's total is
    unchanged); else ``phases`` as they are."""
    if "first_job" in phases or any(name in phases for name in REPORTED) or "process" not in phases:
        return dict(phases)
    known = {name: phases[name] for name in ("environment",) if name in phases}
    return ready_phases(known, phases.get("environment", 0.0) + phases["process"], header)


def constructed(phases: Mapping[str, float], header: str | None) -> float | None:
    """The ``init`` a class endpoint's worker reports with a result: its first instance's constructor (the model
    load), which runs inside its first job rather than before it. Taken once, from a worker whose first job has
    begun and whose start reported no init; else None."""
    if "first_job" not in phases or "init" in phases:
        return None
    return parse(header).get("init")
