"""flashpoint's scalers at run time (declared by ``flashpoint/scaling.py``): the signals they read, kept per endpoint
(``Signals``: request times, load samples, the scheduled minimum, the user scaler's last answer), the workers each
rule wants (pure: ``wanted``), and the plane's turn that samples and calls (``Scalers.step``, once a tick).

The planner reads ``wanted`` where Flash's scaler would decide, and ``minimum`` (the scheduled one) wherever
``workers_min`` counts; every answer is clamped to ``workers=(min, max)`` there, and idle yield and the sharing
rules apply as to any want.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from flashpoint.errors import InvalidEndpointError
from flashpoint.scheduler.cron import check_cron, latest_at_or_before
from flashpoint.scheduler.records import EndpointState
from flashpoint.scheduler.signals import Signals

if TYPE_CHECKING:
    from flashpoint.spec import EndpointSpec

log = logging.getLogger("flashpoint.plane")

#: the user scaler is called at most this often per endpoint ...
USER_PERIOD_S = 5.0
#: ... and its answer waited for this long (it runs in a thread: a slow one never blocks the plane)
USER_TIMEOUT_S = 2.0
#: an error of the user scaler is kept (and shown) to this many characters
ERROR_CHARS = 300


def wanted(spec: EndpointSpec, signals: Signals, *, live: int, starting: int, demand: int) -> int | None:
    """The workers the endpoint's flashpoint scaler wants (before the clamp to ``workers``), or None when Flash's
    ``scaler_type`` rules. ``live``/``starting``: its workers; ``demand``: requests or jobs running and waiting."""
    rule = spec.scaling.rule
    if rule is None:
        return None
    if rule == "user":
        return signals.user_want if signals.user_want is not None else (1 if demand and not live else live)
    if rule == "concurrency":
        target = spec.scaling.target_concurrency or 1
        return math.ceil(max(float(demand), signals.mean_load or 0.0) / target)
    # latency: one more while the p95 is over the target and none is starting; the first at once for any demand
    target_s = (spec.scaling.target_latency_ms or 1) / 1000
    if not live:
        return 1 if demand else 0
    if demand and not starting and signals.p95_s is not None and signals.p95_s > target_s:
        return live + 1
    return live


def schedule_minimum(entries: tuple[tuple[str, int], ...], wall: float) -> tuple[int | None, str]:
    """The minimum a ``workers_schedule`` sets at ``wall`` (the entry that fired last), and why in words."""
    latest: tuple[float, int, str] | None = None
    for cron, count in entries:
        fired = latest_at_or_before(cron, wall)
        if latest is None or fired > latest[0]:
            latest = (fired, count, cron)
    if latest is None:
        return None, ""
    return latest[1], f"workers_schedule: {latest[1]} warm since {latest[2]!r} fired"


def check_scaling(spec: EndpointSpec, *, runs_user_code: bool) -> None:
    """Refuse, at registration, a scaling option this endpoint or this plane cannot honour.

    Raises:
        InvalidEndpointError: saying what to write instead.
    """
    scaling = spec.scaling
    for cron, _ in scaling.workers_schedule:
        problem = check_cron(cron)
        if problem is not None:
            raise InvalidEndpointError(f"endpoint {spec.key!r}: workers_schedule {cron!r}: {problem}")
    if scaling.target_latency_ms is not None and not spec.serves_routes:
        raise InvalidEndpointError(
            f"endpoint {spec.key!r}: target_latency_ms scales an HTTP-route endpoint by its requests' time; a queue "
            "endpoint scales by its queue: use scaler_type=QUEUE_DELAY or target_concurrency instead"
        )
    if scaling.scaler is not None and not runs_user_code:
        raise InvalidEndpointError(
            f"endpoint {spec.key!r}: scaler= runs a function in the plane's process, which only the embedded plane "
            "(your own program, flashpoint dev) does; on a server use target_latency_ms, target_concurrency, "
            "workers_schedule or scaler_type"
        )


def metrics(ep: EndpointState, wall: float) -> dict[str, Any]:
    """What a user scaler is given: the endpoint's recent figures, as plain values."""
    census = ep.workers.census
    signals = ep.signals
    return {
        "endpoint": ep.spec.key,
        "time": wall,
        "queued": ep.queued,
        "running": census.jobs + ep.in_flight,
        "workers": len(census.live),
        "idle": len(census.idle),
        "starting": census.starting,
        "workers_min": ep.spec.workers_min,
        "workers_max": ep.spec.workers_max,
        "p95_latency_ms": None if signals.p95_s is None else signals.p95_s * 1000,
        "mean_load": signals.mean_load,
    }


class Scalers:
    """The plane's turn for flashpoint's scalers, once a tick: each endpoint's load sampled, its scheduled minimum
    found, and its user scaler called when due (in a thread, at most ``USER_TIMEOUT_S``, one call at a time)."""

    def __init__(self, endpoints: Mapping[str, EndpointState], kick: Callable[[], None]) -> None:
        self._endpoints = endpoints
        self._kick = kick
        self._tasks: set[asyncio.Task[None]] = set()

    def step(self, now: float, wall: float) -> None:
        for ep in self._endpoints.values():
            spec, signals = ep.spec, ep.signals
            scaling = spec.scaling
            if scaling.rule is not None:
                signals.sample(now, float(ep.queued + ep.in_flight + ep.workers.census.jobs))
            if scaling.workers_schedule:
                signals.schedule_min, signals.schedule_because = schedule_minimum(scaling.workers_schedule, wall)
            if scaling.scaler is not None and not signals.user_calling and now >= signals.user_due_at:
                signals.user_due_at = now + USER_PERIOD_S
                signals.user_calling = True
                task = asyncio.get_running_loop().create_task(self._call(ep, scaling.scaler, metrics(ep, wall)))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _call(self, ep: EndpointState, fn: Callable[[Mapping[str, Any]], int], figures: dict[str, Any]) -> None:
        signals = ep.signals
        try:
            answer = await asyncio.wait_for(asyncio.to_thread(fn, figures), USER_TIMEOUT_S)
            if isinstance(answer, bool) or not isinstance(answer, int):
                raise TypeError(f"it returned {answer!r}, not a whole number of workers")
        except Exception as exc:  # the user's code: contained, shown, and the last good answer holds
            text = f"took over {USER_TIMEOUT_S:g}s" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            text = text[:ERROR_CHARS]
            if text != signals.user_error:
                log.warning("scaler of %s failed (%s); its last answer holds", ep.spec.key, text)
            signals.user_error = text
        else:
            signals.user_error = None
            if answer != signals.user_want:
                signals.user_want = answer
                self._kick()
        finally:
            signals.user_calling = False

    async def answered(self) -> None:
        """Return once the user scalers' calls under way have ended (answered, failed or timed out)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def notes(ep: EndpointState) -> tuple[str, ...]:
    """What ``explain`` says of the endpoint's flashpoint scalers: the rule in force with its figures, the scheduled
    minimum, the user scaler's last answer or error."""
    spec, signals = ep.spec, ep.signals
    scaling = spec.scaling
    found: list[str] = []
    if scaling.rule == "latency":
        p95 = (
            "no request answered in the last minute" if signals.p95_s is None else f"p95 {signals.p95_s * 1000:.0f} ms"
        )
        found.append(f"target_latency_ms {scaling.target_latency_ms}: {p95} (one more worker while it is over)")
    elif scaling.rule == "concurrency":
        mean = "-" if signals.mean_load is None else f"{signals.mean_load:.1f}"
        found.append(f"target_concurrency {scaling.target_concurrency} per worker: mean load over a minute {mean}")
    elif scaling.rule == "user":
        answer = "not answered yet" if signals.user_want is None else f"last answer {signals.user_want} worker(s)"
        error = f"; its last call failed: {signals.user_error}" if signals.user_error else ""
        found.append(f"scaler {getattr(scaling.scaler, '__name__', 'fn')}: {answer}{error}")
    if signals.schedule_because:
        found.append(signals.schedule_because)
    return tuple(found)
