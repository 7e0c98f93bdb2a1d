"""Cron schedules as pure functions: a five-field expression checked, its next and latest fire times, and what a
schedule does about the fire times nobody saw (the server was down, the clock jumped): the catch-up rule.

Times are epoch seconds, and cron's fields are read in UTC: ``0 3 * * *`` is 03:00 UTC, whatever the server's zone.
The expression is cron's five fields, minute hour day-of-month month day-of-week, with names (``mon``, ``jan``), ranges,
lists and steps, and cronsim's extensions (``L``, ``W``, ``#``); a day-of-month and a day-of-week both restricted
match either (Vixie cron's rule), and a date that never comes (``0 0 30 2 *``) is refused. The macros ``@hourly``,
``@daily`` (``@midnight``), ``@weekly``, ``@monthly`` and ``@yearly`` (``@annually``) stand for their expressions.
No state, no clock, no I/O: ``scheduler/schedules.py`` calls these with the plane's clock (decision 0109).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from cronsim import CronSim, CronSimError

__all__ = [
    "FIELDS",
    "MACROS",
    "MAX_COUNTED",
    "CatchUp",
    "catch_up",
    "check_cron",
    "count_between",
    "iso",
    "latest_at_or_before",
    "next_after",
    "normalise",
]

#: the five fields, in order, with the values each takes
FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("day-of-week", "0-7 or sun-sat, 0 and 7 both Sunday"),
)
#: the macros cron knows, as their five fields
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: missed fire times are counted up to this many (a minutely schedule down for a year would be half a million)
MAX_COUNTED = 1000
#: what an error message shows a user
EXAMPLE = "'0 * * * *' (every hour, on the hour; fields: minute hour day-of-month month day-of-week, in UTC)"

_UTC = timezone.utc
#: the longest expression taken: cron lines are short, and the parser should not be handed a megabyte
_MAX_LENGTH = 200


def normalise(expr: str) -> str:
    """The five fields ``expr`` stands for (a macro's expansion, single spaces). Does not check them."""
    text = " ".join(expr.split())
    return MACROS.get(text.lower(), text)


def check_cron(expr: object) -> str | None:
    """What is wrong with ``expr`` as a schedule, in words that say what to write; None when it is a good one.

    Example:
        ``check_cron("61 * * * *")`` says the minute field ``61`` is out of its range, 0-59.
    """
    if not isinstance(expr, str):
        return f"a cron expression is a string, e.g. {EXAMPLE}; got {type(expr).__name__}"
    if len(expr) > _MAX_LENGTH:
        return f"a cron expression is at most {_MAX_LENGTH} characters; got {len(expr)}"
    text = normalise(expr)
    fields = text.split()
    if not fields:
        return f"the cron expression is empty; write five fields, e.g. {EXAMPLE}"
    if text.startswith("@"):
        return f"unknown macro {text!r}; cron's are {', '.join(MACROS)}, or write five fields, e.g. {EXAMPLE}"
    if len(fields) != 5:
        return (
            f"a cron expression has five fields (minute hour day-of-month month day-of-week), got {len(fields)} in "
            f"{expr!r}; e.g. {EXAMPLE}"
        )
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=_UTC))
    except CronSimError as exc:
        return _explain(str(exc), fields)
    return None


def _explain(message: str, fields: list[str]) -> str:
    """cronsim's terse "Bad minute" as the field, its value and the values it takes."""
    for index, (name, values) in enumerate(FIELDS):
        if message == f"Bad {name}":
            if name == "day-of-month" and _fits(fields[index], 31):
                return (
                    f"the day-of-month {fields[index]!r} never comes in month {fields[3]!r} (a date that does not "
                    f"exist never fires); e.g. {EXAMPLE}"
                )
            return (
                f"the {name} field {fields[index]!r} is not valid: it takes {values}, as numbers, ranges (1-5), "
                f"lists (1,3) or steps (*/15); e.g. {EXAMPLE}"
            )
    return f"{message} in {' '.join(fields)!r}; e.g. {EXAMPLE}"


def _fits(field: str, top: int) -> bool:
    """Whether a day-of-month field is plain numbers within 1..top (then the month made it impossible)."""
    try:
        return all(1 <= int(part) <= top for part in field.replace("-", ",").split(","))
    except ValueError:
        return False


def _checked(expr: str) -> str:
    problem = check_cron(expr)
    if problem is not None:
        raise ValueError(problem)
    return normalise(expr)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=_UTC)


def next_after(expr: str, t: float) -> float:
    """The first fire time strictly after ``t``.

    Raises:
        ValueError: ``expr`` is not a good cron expression (``check_cron`` says why).
    """
    return next(CronSim(_checked(expr), _dt(t))).timestamp()


def latest_at_or_before(expr: str, t: float) -> float:
    """The latest fire time at or before ``t`` (fire times are whole minutes).

    Raises:
        ValueError: ``expr`` is not a good cron expression.
    """
    minute = _dt(t).replace(second=0, microsecond=0)
    # cronsim goes back from a time strictly: a microsecond past the minute finds that minute itself
    return next(CronSim(_checked(expr), minute + timedelta(microseconds=1), reverse=True)).timestamp()


def count_between(expr: str, start: float, end: float, limit: int = MAX_COUNTED) -> int:
    """How many fire times lie in ``(start, end]``, counted up to ``limit``."""
    count, at = 0, start
    times = CronSim(_checked(expr), _dt(at))
    while count < limit:
        at = next(times).timestamp()
        if at > end:
            break
        count += 1
    return count


def iso(t: float) -> str:
    """``t`` as ISO 8601 in UTC, to the second: ``2027-01-15T08:05:00Z``."""
    return _dt(t).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class CatchUp:
    """What a schedule does at ``now`` about its fire times after ``since``: run one, record the rest as missed."""

    #: the due time to run now, or None (nothing due, or what was due is too old to run: see ``catch_up``)
    run: float | None
    #: fire times not run: how many (counted up to ``MAX_COUNTED``; ``missed_more``: there were more), the first and
    #: the latest of them (None when none)
    missed: int
    missed_more: bool
    first_missed: float | None
    last_missed: float | None
    #: the next fire time after ``now``
    next: float

    @property
    def considered(self) -> float | None:
        """The latest due time this settles (run or missed): the next catch-up starts after it."""
        return self.run if self.run is not None else self.last_missed


def catch_up(expr: str, since: float, now: float) -> CatchUp:
    """The catch-up rule for the fire times in ``(since, now]`` (decision 0109).

    The latest of them runs once, late, when it is no older than one period of the schedule there (the time from the
    fire before it to it: a weekday job's Friday run is not made up on Monday morning, an hourly one missed ten minutes
    ago is); every other one is recorded as missed, never run: a schedule down for a day does not come back as a
    burst of 288 five-minute jobs. In a plane that ticks on time, the one due time of each tick is "the latest" and
    runs at once.

    Raises:
        ValueError: ``expr`` is not a good cron expression.
    """
    upcoming = next_after(expr, now)
    first = next_after(expr, since)
    if first > now:
        return CatchUp(None, 0, False, None, None, upcoming)
    latest = latest_at_or_before(expr, now)
    before = latest_at_or_before(expr, latest - 60)  # the fire time before the latest one
    if now - latest <= latest - before:
        run: float | None = latest
        missed = count_between(expr, since, latest - 60)
        last_missed = before if missed else None
    else:
        run, missed, last_missed = None, count_between(expr, since, now), latest
    return CatchUp(
        run=run,
        missed=missed,
        missed_more=missed >= MAX_COUNTED,
        first_missed=first if missed else None,
        last_missed=last_missed,
        next=upcoming,
    )
