"""Keep-warm sized from traffic (``idle_timeout="auto"``): how long an endpoint's idle workers stay warm, and whether
one is started again shortly before a predicted arrival, from the endpoint's own idle gaps and cold-start times.

An *idle gap* is the time from the end of the endpoint's last job (or request) to the next arrival that finds it with
no work (arrivals while it is busy are not gaps: a warm worker is there anyway). The policy is the shape of the
hybrid histogram policy of "Serverless in the Wild" (USENIX ATC '20): keep alive through the likely next arrival, and
for predictable traffic let the worker go after its job and warm one again just before the next arrival is due. It
chooses over the gaps seen rather than by fixed percentiles, within a budget: of the windows ``(prewarm, keep)`` that
would have kept workers idle no longer in all than the fixed window it replaces (Flash's 60 s) on the same gaps, the
one with the fewest cold starts, then the least idle. A pre-warm's start-up (the measured cold start) counts as idle
time, and the measured cold start sets how early a pre-warm starts and the margin past the longest gap a keep covers.
With rare or unpredictable arrivals nothing beats the budget on cold starts, and the least idle is "let go at once".

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


def _outcomes(
    ordered: Sequence[float], prefix: Sequence[float], prewarm: float, keeps: Sequence[float], cold_s: float
) -> list[tuple[int, float]]:
    """Over the sorted gaps (``prefix``: their running sums), the (cold starts, idle GPU-seconds) of pre-warming to be
    ready at ``prewarm`` and keeping to each of ``keeps``: a gap before the pre-warm is a cold start; one within the
    window costs its idle time past the pre-warm; one after it the whole window and a cold start; each pre-warm
    costs its start-up (``cold_s``) as idle time."""
    n = len(ordered)
    early = bisect.bisect_left(ordered, prewarm)
    start_up = cold_s * n if prewarm > 0 else 0.0
    found = []
    for keep in keeps:
        inside = bisect.bisect_right(ordered, keep)  # gaps <= keep
        within = inside - early
        late = n - inside
        idle = (prefix[inside] - prefix[early]) - within * prewarm + late * (keep - prewarm) + start_up
        found.append((early + late, idle))
    return found


def window(gaps: Sequence[float], cold_start_s: float, default_s: float) -> Window:
    """The keep-warm window for an endpoint whose recent idle gaps are ``gaps`` and whose cold start takes
    ``cold_start_s`` (``default_s``: the fixed window it replaces, Flash's 60 s): of the windows that keep workers
    idle no longer in all than ``default_s`` would have on the same gaps, the one with the fewest cold starts, and
    of those the least idle."""
    n = len(gaps)
    if n < MIN_GAPS:
        return Window(default_s, None, f"{n} idle gap(s) seen, fewer than {MIN_GAPS}: the default {default_s:g}s")
    ordered = sorted(gaps)
    prefix = [0.0, *itertools.accumulate(ordered)]
    margin = lead_s(cold_start_s)  # a keep covers a gap and a little more: a little later next time is not cold
    keeps = sorted({0.0, default_s, *(g + margin for g in ordered if g + margin <= MAX_KEEP_S)})
    ((default_cold, budget),) = _outcomes(ordered, prefix, 0.0, [default_s], cold_start_s)
    best = (default_cold, budget, 0.0, default_s)
    for prewarm in [0.0, *sorted({_percentile(ordered, q) for q in PREWARM_PERCENTILES})]:
        usable = [keep for keep in keeps if keep > prewarm or keep == prewarm == 0.0]
        for keep, (cold, idle) in zip(usable, _outcomes(ordered, prefix, prewarm, usable, cold_start_s), strict=True):
            if idle <= budget + 1e-9 and (cold, idle) < best[:2]:
                best = (cold, idle, prewarm, keep)
    cold, idle, prewarm, keep = best
    saved = default_cold - cold
    terms = (
        f"{cold} of {n} idle gaps would cold-start ({saved} fewer than {default_s:g}s) at {idle / n:.0f} idle "
        f"GPU-seconds a gap ({budget / n:.0f} with {default_s:g}s; a cold start ~{cold_start_s:.1f}s)"
    )
    if keep == 0:
        return Window(0.0, None, f"let go at once (arrivals are rare or unpredictable): {terms}", idle / n)
    if prewarm > 0:
        why = f"let go after the last job, warm one again to be ready {prewarm:.0f}s after it, keep it to {keep:.0f}s"
        return Window(keep, prewarm, f"{why}: {terms}", idle / n)
    return Window(keep, None, f"keep warm {keep:.0f}s after the last job: {terms}", idle / n)


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
