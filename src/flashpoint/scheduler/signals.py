"""What an endpoint's flashpoint scalers read (``scheduler/scalers.py``), kept on its record
(``EndpointState.signals``): its route requests' times, its load sampled once a tick, the minimum its
``workers_schedule`` sets now, and its user scaler's last answer or error. Data and the windows' arithmetic only."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

#: the latency target reads the p95 of the requests answered in this window
LATENCY_WINDOW_S = 60.0
#: the concurrency target reads the mean load sampled (once a tick) over this window
LOAD_WINDOW_S = 60.0
#: samples kept per endpoint and signal, whatever the window (bounded memory under any load)
MAX_SAMPLES = 4096


@dataclass(slots=True)
class Signals:
    """What an endpoint's scalers read, on the plane's monotonic clock."""

    #: (when answered, seconds) of its route requests, oldest first
    latencies: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    #: (when sampled, requests or jobs running and waiting)
    load: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    #: the p95 request time and the mean load as the last tick computed them (None: no sample in the window)
    p95_s: float | None = None
    mean_load: float | None = None
    #: the minimum its ``workers_schedule`` sets now (None: none has fired, or it has no schedule)
    schedule_min: int | None = None
    schedule_because: str = ""
    #: the user scaler: when it may be called next, its last good answer, its last error, and a call in flight
    user_due_at: float = 0.0
    user_want: int | None = None
    user_error: str | None = None
    user_calling: bool = False

    def answered(self, now: float, seconds: float) -> None:
        """A route request was answered ``seconds`` after it arrived (its wait for a worker included)."""
        if math.isfinite(seconds) and seconds >= 0:
            self.latencies.append((now, seconds))

    def sample(self, now: float, load: float) -> None:
        """The tick's sample of the load, and the windows' figures recomputed."""
        self.load.append((now, load))
        for samples, window in ((self.latencies, LATENCY_WINDOW_S), (self.load, LOAD_WINDOW_S)):
            while samples and samples[0][0] < now - window:
                samples.popleft()
        times = sorted(s for _, s in self.latencies)
        self.p95_s = times[max(0, math.ceil(0.95 * len(times)) - 1)] if times else None
        self.mean_load = sum(v for _, v in self.load) / len(self.load) if self.load else None
