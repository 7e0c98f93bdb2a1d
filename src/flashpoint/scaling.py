"""flashpoint's scalers beside Flash's two (``scaler_type``), as ``Endpoint`` options: a p95 latency target for
HTTP-route endpoints, a concurrency target per worker, a minimum of warm workers that changes on a cron schedule,
and a user scaler (a plain function from the endpoint's recent metrics to a worker count). Validated here, at
decoration time; the plane applies them (``scheduler/scalers.py``).

- ``target_latency_ms=N``: an HTTP-route endpoint adds a worker while the p95 of its requests' time (waiting for a
  worker included) over the last minute exceeds ``N`` ms, and lets one go (idle timeout) when it is under half.
- ``target_concurrency=N``: about ``N`` requests or jobs (running and waiting) per worker, from the mean over the last
  minute (up at once when the load now is higher: up fast, down slowly).
- ``workers_schedule={"0 9 * * 1-5": 2, "0 18 * * 1-5": 0}``: from each cron time (UTC) on, the minimum is that many
  warm workers (the most recent fire time wins); ``workers=(min, max)``'s minimum holds until one has fired.
- ``scaler=fn``: ``fn(metrics) -> int``, called by the plane at most every 5 s; its errors are contained (the last
  good answer holds) and shown by ``explain``. It runs in the plane's process, so only a plane that runs the user's
  own code (the embedded one, ``flashpoint dev``) takes it; a server refuses it at deploy.

At most one of ``target_latency_ms``, ``target_concurrency`` and ``scaler`` (each replaces ``scaler_type``'s rule);
``workers_schedule`` goes with any of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flashpoint.errors import InvalidEndpointError

OPTIONS = ("target_latency_ms", "target_concurrency", "workers_schedule", "scaler")
#: the most entries a ``workers_schedule`` may have
MAX_SCHEDULE_ENTRIES = 32


@dataclass(frozen=True, slots=True)
class Scaling:
    """An endpoint's flashpoint scalers (None/empty: not used)."""

    target_latency_ms: int | None = None
    target_concurrency: int | None = None
    #: (cron expression, minimum) pairs, in the order given
    workers_schedule: tuple[tuple[str, int], ...] = ()
    #: the user scaler: ``fn(metrics: dict) -> int``
    scaler: Callable[[Mapping[str, Any]], int] | None = None

    @property
    def rule(self) -> str | None:
        """The scaler in force instead of ``scaler_type``'s: "latency", "concurrency", "user", or None."""
        if self.scaler is not None:
            return "user"
        if self.target_latency_ms is not None:
            return "latency"
        if self.target_concurrency is not None:
            return "concurrency"
        return None


def _error(name: str | None, message: str) -> InvalidEndpointError:
    return InvalidEndpointError(f"Endpoint {name!r}: {message}" if name else f"Endpoint: {message}")


def _positive(name: str | None, option: str, value: Any, example: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _error(name, f"{option} must be a whole number >= 1, got {value!r}; e.g. {example}")
    return value


def scaling(name: str | None, options: Mapping[str, Any], workers_max: int) -> Scaling:
    """``Endpoint``'s scaling options, checked (the cron expressions are checked when the endpoint registers)."""
    latency = _positive(name, "target_latency_ms", options.get("target_latency_ms"), "target_latency_ms=500")
    concurrency = _positive(name, "target_concurrency", options.get("target_concurrency"), "target_concurrency=4")
    user = options.get("scaler")
    if user is not None and not callable(user):
        raise _error(
            name, f"scaler must be a function of the endpoint's metrics returning a worker count, got {user!r}"
        )
    given = [o for o, v in (("target_latency_ms", latency), ("target_concurrency", concurrency), ("scaler", user)) if v]
    if len(given) > 1:
        raise _error(name, f"{' and '.join(given)} are each a scaler: give one of them")
    schedule = options.get("workers_schedule")
    entries: tuple[tuple[str, int], ...] = ()
    if schedule is not None:
        if not isinstance(schedule, Mapping) or not schedule or len(schedule) > MAX_SCHEDULE_ENTRIES:
            raise _error(
                name,
                f"workers_schedule must map cron expressions to minimum workers (1 to {MAX_SCHEDULE_ENTRIES} entries), "
                f'got {schedule!r}; e.g. workers_schedule={{"0 9 * * 1-5": 2, "0 18 * * 1-5": 0}}',
            )
        checked = []
        for cron, count in schedule.items():
            if not isinstance(cron, str) or not cron.strip():
                raise _error(name, f"workers_schedule's keys are cron expressions (strings), got {cron!r}")
            if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= workers_max:
                raise _error(
                    name,
                    f"workers_schedule[{cron!r}] must be a whole number of workers from 0 to workers max "
                    f"({workers_max}), got {count!r}",
                )
            checked.append((cron.strip(), count))
        entries = tuple(checked)
    return Scaling(latency, concurrency, entries, user)
