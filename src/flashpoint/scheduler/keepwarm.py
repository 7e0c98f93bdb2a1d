"""Keep-warm sized from traffic (``idle_timeout="auto"``): how long an endpoint's idle workers stay warm, and whether
one is started again shortly before a predicted arrival, from the endpoint's own idle gaps and cold-start times.

An *idle gap* is the time from the end of the endpoint's last job (or request) to the next arrival that finds it with
no work (arrivals while it is busy are not gaps: a warm worker is there anyway). The policy is the shape of the
hybrid histogram policy of "Serverless in the Wild" (USENIX ATC '20): keep alive through the likely next arrival, and
for predictable traffic let the worker go after its job and warm one again just before the next arrival is due. It
chooses by cost over the gaps seen rather than by fixed percentiles: a window ``(prewarm, keep)`` costs, summed over
the recent gaps, the idle GPU-seconds it keeps warm plus, for each gap it misses, one cold start valued at
``cold_start_value`` GPU-seconds (``COLD_START_WORTH`` times the measured cold start, never less than the default
window: a cold start is worth at least what Flash's 60 s default pays to avoid one), plus the start-up time of each
pre-warm. The cheapest window wins; with rare or unpredictable arrivals it is "let go at once".

Pure: ``Traffic`` is the record the plane keeps per endpoint (fed by ``arrived``, ``ended`` and ``cold_start``),
``window`` the decision, ``stops_idle``/``prewarm_due`` what the planner asks of it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

#: idle gaps kept per endpoint (the most recent): bounded memory, and a window that follows changing traffic
GAPS_KEPT = 128
#: cold starts kept per endpoint (their mean is the cost of one, and a pre-warm's lead time)
COLD_STARTS_KEPT = 16
#: fewer gaps than this: the default window (nothing to size it from yet)
MIN_GAPS = 5
#: one cold start is worth this many times its duration in idle GPU-seconds (never less than the default window)
COLD_START_WORTH = 10.0
#: the cold start assumed before one is measured
DEFAULT_COLD_START_S = 5.0
#: no window keeps a worker warm longer than this after the last job (beyond it arrivals are "rare")
MAX_KEEP_S = 3600.0
#: a pre-warmed worker is started this long before it is needed: its cold start times this, plus a second
LEAD_FACTOR = 1.5
#: the pre-warm points tried: these percentiles of the gaps (the worker must be ready before most arrivals)
PREWARM_PERCENTILES = (1, 2, 5, 10, 25)


@dataclass(frozen=True, slots=True)
class Window:
    """How long idle workers stay warm after the endpoint's last job ends (``keep_s``), and when one is warmed again
    (``prewarm_s``, ready that long after the last job; None: no pre-warm, the workers are simply kept). ``why`` is
    the reason in words, for ``explain``."""

    keep_s: float
    prewarm_s: float | None
    why: str
    #: the window's expected cost per gap (idle GPU-seconds plus valued cold starts), and that of the default
    cost: float | None = None


@dataclass(slots=True)
class Traffic:
    """An endpoint's recent traffic as keep-warm reads it, on the plane's monotonic clock."""

    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=GAPS_KEPT))
    cold_starts: deque[float] = field(default_factory=lambda: deque(maxlen=COLD_STARTS_KEPT))
    #: when its last job or request ended (None: none has yet)
    last_end: float | None = None
    #: gaps and cold starts recorded so far (the cached window's key: recomputed when either is added to)
    seen: int = 0
    cached: Window | None = None
    cached_key: tuple[int, float] | None = None

    def arrived(self, now: float, busy: bool) -> None:
        """A job or request arrived; ``busy``: the endpoint had work queued or running when it came."""
        if busy or self.last_end is None:
            return
        gap = now - self.last_end
        if math.isfinite(gap) and gap >= 0:  # a clock that went backwards gives no gap
            self.gaps.append(gap)
            self.seen += 1

    def ended(self, now: float) -> None:
        """A job or request of the endpoint ended."""
        self.last_end = now

    def cold_start(self, seconds: float) -> None:
        """A worker became ready ``seconds`` after it was started."""
        if math.isfinite(seconds) and seconds >= 0:
            self.cold_starts.append(seconds)
            self.seen += 1

    def cold_start_s(self) -> float:
        """The cold start expected: the mean of those measured, else ``DEFAULT_COLD_START_S``."""
        return sum(self.cold_starts) / len(self.cold_starts) if self.cold_starts else DEFAULT_COLD_START_S

    def window(self, default_s: float) -> Window:
        key = (self.seen, default_s)
        if self.cached is None or self.cached_key != key:
            self.cached = window(list(self.gaps), self.cold_start_s(), default_s)
            self.cached_key = key
        return self.cached


def _percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of sorted values (nearest rank)."""
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _costs(
    ordered: Sequence[float],
    prefix: Sequence[float],
    prewarm: float,
    keeps: Sequence[float],
    cold: float,
    cold_s: float,
) -> list[float]:
    """The total cost over the sorted gaps (``prefix``: their running sums) of pre-warming at ``prewarm`` and keeping
    to each of ``keeps`` (sorted): a gap before the pre-warm is a cold start (valued ``cold``); one within the window
    costs its idle time past the pre-warm; one after it the whole window and a cold start; each pre-warm costs its
    start-up (``cold_s``)."""
    n = len(ordered)
    early = bisect.bisect_left(ordered, prewarm)
    base = early * cold + (cold_s * n if prewarm > 0 else 0.0)
    costs = []
    for keep in keeps:
        inside = bisect.bisect_right(ordered, keep)  # gaps <= keep
        within = inside - early
        idle_within = (prefix[inside] - prefix[early]) - within * prewarm
        late = n - inside
        costs.append(base + idle_within + late * ((keep - prewarm) + cold))
    return costs


def window(gaps: Sequence[float], cold_start_s: float, default_s: float) -> Window:
    """The keep-warm window for an endpoint whose recent idle gaps are ``gaps`` and whose cold start takes
    ``cold_start_s`` (``default_s``: the window used until enough gaps are seen, Flash's 60 s)."""
    n = len(gaps)
    if n < MIN_GAPS:
        return Window(default_s, None, f"{n} idle gap(s) seen, fewer than {MIN_GAPS}: the default {default_s:g}s")
    ordered = sorted(gaps)
    prefix = [0.0, *itertools.accumulate(ordered)]
    cold = max(default_s, COLD_START_WORTH * cold_start_s)
    keeps = sorted({0.0, min(default_s, MAX_KEEP_S), *(g for g in ordered if g <= MAX_KEEP_S)})
    best = (math.inf, 0.0, 0.0)
    for prewarm in [0.0, *sorted({_percentile(ordered, q) for q in PREWARM_PERCENTILES})]:
        usable = [keep for keep in keeps if keep >= prewarm]
        for keep, cost in zip(usable, _costs(ordered, prefix, prewarm, usable, cold, cold_start_s), strict=True):
            if cost < best[0] - 1e-9:
                best = (cost, prewarm, keep)
    cost, prewarm, keep = best
    per_gap = cost / n
    covered = sum(1 for g in ordered if prewarm <= g <= keep)
    if keep > 0:  # the longest gap it covers, and a margin: a little later next time is not a cold start
        keep += lead_s(cold_start_s)
    value = f"a cold start (~{cold_start_s:.1f}s) valued at {cold:.0f} idle GPU-seconds"
    if keep == 0:
        why = (
            f"let go at once: over {n} idle gaps (median {_percentile(ordered, 50):.0f}s) keeping a worker warm costs "
            f"more than the cold starts it saves ({value})"
        )
        return Window(0.0, None, why, per_gap)
    if prewarm > 0:
        why = (
            f"let go after the last job, warm one again to be ready {prewarm:.0f}s after it and keep it to "
            f"{keep:.0f}s: {covered} of {n} idle gaps fall in between ({value})"
        )
        return Window(keep, prewarm, why, per_gap)
    why = f"keep warm {keep:.0f}s after the last job: {covered} of {n} idle gaps are shorter ({value})"
    return Window(keep, None, why, per_gap)


def stops_idle(window: Window, since_end: float, lead_s: float) -> bool:
    """An idle worker above the minimum stops ``since_end`` seconds after the endpoint's last job ended: past the
    window, or (pre-warming) before the pre-warm is due, ``lead_s`` ahead of when it must be ready."""
    if since_end >= window.keep_s:
        return True
    return window.prewarm_s is not None and since_end < window.prewarm_s - lead_s


def prewarm_due(window: Window, since_end: float, lead_s: float) -> bool:
    """A pre-warmed worker is wanted now: from ``lead_s`` before it must be ready until the window closes."""
    return window.prewarm_s is not None and window.prewarm_s - lead_s <= since_end < window.keep_s


def lead_s(cold_start_s: float) -> float:
    """How long before a pre-warmed worker must be ready it is started."""
    return cold_start_s * LEAD_FACTOR + 1.0
