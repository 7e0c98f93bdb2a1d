"""Cron schedules' pure rules (``scheduler/cron.py``), by table: expressions checked with their errors, next and
latest fire times across month and year ends, days of the week and steps, and the catch-up rule for gaps of minutes,
hours and days (decision 0109). Times are UTC."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from flashpoint.scheduler.cron import (
    MAX_COUNTED,
    CatchUp,
    catch_up,
    check_cron,
    count_between,
    iso,
    latest_at_or_before,
    next_after,
    normalise,
)


def t(text: str) -> float:
    """``"2027-01-31 23:59"`` (UTC) as epoch seconds."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=timezone.utc).timestamp()


def at(value: float | None) -> str | None:
    return None if value is None else iso(value)[:16].replace("T", " ")


# ------------------------------------------------------------------------------------------------------------------
# checking


@pytest.mark.parametrize(
    "expr",
    [
        "* * * * *",
        "*/5 * * * *",
        "0 * * * *",
        "0 9 * * mon-fri",
        "30 2 1,15 * *",
        "0 0 1 jan,jul *",
        "0 12 * * 7",  # 7 is Sunday, as 0
        "0 0 29 2 *",  # leap days exist
        "0 0 L * *",
        "0 0 * * 5#3",
        "  0   *  * * *  ",
        "@hourly",
        "@Daily",
        "@annually",
    ],
)
def test_good_expressions_pass(expr: str) -> None:
    assert check_cron(expr) is None


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("* * * *", "five fields (minute hour day-of-month month day-of-week), got 4"),
        ("* * * * * *", "got 6"),  # seconds are not cron's
        ("61 * * * *", "the minute field '61' is not valid: it takes 0-59"),
        ("* 24 * * *", "the hour field '24' is not valid: it takes 0-23"),
        ("* * 0 * *", "the day-of-month field '0' is not valid"),
        ("* * * 13 *", "the month field '13' is not valid: it takes 1-12 or jan-dec"),
        ("* * * * 8", "the day-of-week field '8' is not valid"),
        ("*/0 * * * *", "the minute field '*/0' is not valid"),
        ("5-1 * * * *", "the minute field '5-1' is not valid"),
        ("x * * * *", "the minute field 'x' is not valid"),
        ("0 0 30 2 *", "the day-of-month '30' never comes in month '2'"),
        ("0 0 31 4,6 *", "never comes"),
        ("@every 5m", "unknown macro '@every 5m'"),
        ("@reboot", "unknown macro"),
    ],
)
def test_bad_expressions_say_what_is_wrong_and_show_an_example(expr: str, says: str) -> None:
    problem = check_cron(expr)
    assert problem is not None and says in problem
    assert "e.g." in problem and "UTC" in problem


def test_a_non_string_and_a_huge_string_are_refused() -> None:
    assert "a cron expression is a string" in (check_cron(5) or "")
    assert "at most 200 characters" in (check_cron("* " * 500) or "")


def test_the_next_and_latest_times_refuse_a_bad_expression() -> None:
    with pytest.raises(ValueError, match="minute field '61'"):
        next_after("61 * * * *", 0.0)
    with pytest.raises(ValueError, match="five fields"):
        latest_at_or_before("* *", 0.0)


def test_macros_stand_for_their_five_fields() -> None:
    assert normalise("@hourly") == "0 * * * *"
    assert normalise("@WEEKLY") == "0 0 * * 0"
    assert normalise("  */5   *  * * * ") == "*/5 * * * *"


# ------------------------------------------------------------------------------------------------------------------
# next and latest fire times


@pytest.mark.parametrize(
    ("expr", "after", "nexts"),
    [
        # steps, and "strictly after": a fire time is not its own next
        ("*/5 * * * *", "2027-01-15 08:00", ["2027-01-15 08:05", "2027-01-15 08:10"]),
        ("*/5 * * * *", "2027-01-15 08:03", ["2027-01-15 08:05", "2027-01-15 08:10"]),
        ("0 */6 * * *", "2027-01-15 13:00", ["2027-01-15 18:00", "2027-01-16 00:00"]),
        ("10-20/5 * * * *", "2027-01-15 08:11", ["2027-01-15 08:15", "2027-01-15 08:20", "2027-01-15 09:10"]),
        # month and year ends
        ("0 0 1 * *", "2027-01-31 23:59", ["2027-02-01 00:00", "2027-03-01 00:00"]),
        ("0 0 31 * *", "2027-01-31 00:00", ["2027-03-31 00:00", "2027-05-31 00:00"]),  # months without a 31st skip
        ("0 0 L * *", "2027-01-31 00:00", ["2027-02-28 00:00", "2027-03-31 00:00"]),
        ("0 0 29 2 *", "2027-01-01 00:00", ["2028-02-29 00:00", "2032-02-29 00:00"]),  # leap years only
        ("59 23 31 12 *", "2027-12-31 23:59", ["2028-12-31 23:59"]),
        ("0 0 1 1 *", "2027-12-31 23:59", ["2028-01-01 00:00"]),
        # days of the week (2027-01-15 is a Friday)
        ("0 9 * * mon-fri", "2027-01-15 09:00", ["2027-01-18 09:00", "2027-01-19 09:00"]),
        ("0 9 * * 0", "2027-01-15 09:00", ["2027-01-17 09:00", "2027-01-24 09:00"]),
        ("0 9 * * 7", "2027-01-15 09:00", ["2027-01-17 09:00"]),  # 7 is Sunday too
        ("0 0 * * 5#3", "2027-01-01 00:00", ["2027-01-15 00:00", "2027-02-19 00:00"]),  # third Friday
        # day-of-month and day-of-week both restricted: either matches (Vixie cron)
        ("0 0 1 * mon", "2027-01-15 00:00", ["2027-01-18 00:00", "2027-01-25 00:00", "2027-02-01 00:00"]),
    ],
)
def test_next_fire_times(expr: str, after: str, nexts: list[str]) -> None:
    found, moment = [], t(after)
    for _ in nexts:
        moment = next_after(expr, moment)
        found.append(at(moment))
    assert found == nexts


@pytest.mark.parametrize(
    ("expr", "now", "latest"),
    [
        ("*/5 * * * *", "2027-01-15 08:05", "2027-01-15 08:05"),  # at a fire time: that one
        ("*/5 * * * *", "2027-01-15 08:09", "2027-01-15 08:05"),
        ("0 0 1 * *", "2027-03-01 00:00", "2027-03-01 00:00"),
        ("0 0 1 * *", "2027-02-28 23:59", "2027-02-01 00:00"),
        ("0 9 * * mon-fri", "2027-01-18 08:00", "2027-01-15 09:00"),  # Monday morning: Friday's
        ("0 0 1 1 *", "2027-06-01 00:00", "2027-01-01 00:00"),
    ],
)
def test_latest_fire_time_at_or_before(expr: str, now: str, latest: str) -> None:
    assert at(latest_at_or_before(expr, t(now))) == latest
    assert at(latest_at_or_before(expr, t(now) + 59.9)) == latest  # seconds within the minute change nothing


def test_counting_is_bounded() -> None:
    assert count_between("*/5 * * * *", t("2027-01-15 08:00"), t("2027-01-15 09:00")) == 12
    assert count_between("* * * * *", t("2027-01-01 00:00"), t("2028-01-01 00:00")) == MAX_COUNTED
    assert count_between("0 0 1 * *", t("2027-01-01 00:00"), t("2027-01-31 00:00")) == 0


def test_iso_is_utc() -> None:
    assert iso(1_800_000_000.0) == "2027-01-15T08:00:00Z"


# ------------------------------------------------------------------------------------------------------------------
# the catch-up rule


@pytest.mark.parametrize(
    ("expr", "since", "now", "run", "missed", "first", "last", "upcoming"),
    [
        # nothing due yet
        ("*/5 * * * *", "2027-01-15 08:00", "2027-01-15 08:04", None, 0, None, None, "2027-01-15 08:05"),
        # a tick on time: the one due time runs
        ("*/5 * * * *", "2027-01-15 08:00", "2027-01-15 08:05", "2027-01-15 08:05", 0, None, None, "2027-01-15 08:10"),
        # a gap of minutes: the latest runs, the one before is missed
        (
            "*/5 * * * *",
            "2027-01-15 08:00",
            "2027-01-15 08:12",
            "2027-01-15 08:10",
            1,
            "2027-01-15 08:05",
            "2027-01-15 08:05",
            "2027-01-15 08:15",
        ),
        # a gap of hours: one run, never a burst of 35
        (
            "*/5 * * * *",
            "2027-01-15 08:00",
            "2027-01-15 11:02",
            "2027-01-15 11:00",
            35,
            "2027-01-15 08:05",
            "2027-01-15 10:55",
            "2027-01-15 11:05",
        ),
        # an hourly job down for ten minutes over its hour: made up
        ("0 * * * *", "2027-01-15 08:00", "2027-01-15 09:10", "2027-01-15 09:00", 0, None, None, "2027-01-15 10:00"),
        # a gap of days for a daily job: the latest runs (it is less than a day old), the others are missed
        (
            "0 3 * * *",
            "2027-01-10 03:00",
            "2027-01-15 08:00",
            "2027-01-15 03:00",
            4,
            "2027-01-11 03:00",
            "2027-01-14 03:00",
            "2027-01-16 03:00",
        ),
        # a weekday job down over the weekend: Friday's is three days old, more than its period (Thursday to Friday),
        # so Monday morning makes up nothing; it runs at 09:00
        (
            "0 9 * * mon-fri",
            "2027-01-14 09:00",
            "2027-01-18 08:00",
            None,
            1,
            "2027-01-15 09:00",
            "2027-01-15 09:00",
            "2027-01-18 09:00",
        ),
        # ... but Monday 09:30 after a restart makes up Monday's, 30 minutes late
        (
            "0 9 * * mon-fri",
            "2027-01-15 09:00",
            "2027-01-18 09:30",
            "2027-01-18 09:00",
            0,
            None,
            None,
            "2027-01-19 09:00",
        ),
        # a monthly job restarted ten days after the 1st: within its month, made up
        ("0 0 1 * *", "2027-01-01 00:00", "2027-02-11 00:00", "2027-02-01 00:00", 0, None, None, "2027-03-01 00:00"),
    ],
)
def test_catch_up_runs_the_latest_once_and_records_the_rest_as_missed(
    expr: str,
    since: str,
    now: str,
    run: str | None,
    missed: int,
    first: str | None,
    last: str | None,
    upcoming: str,
) -> None:
    plan = catch_up(expr, t(since), t(now))
    assert (at(plan.run), plan.missed, at(plan.first_missed), at(plan.last_missed), at(plan.next)) == (
        run,
        missed,
        first,
        last,
        upcoming,
    )
    assert not plan.missed_more


def test_a_year_of_minutes_is_counted_up_to_the_bound() -> None:
    plan = catch_up("* * * * *", t("2026-01-15 08:00"), t("2027-01-15 08:00"))
    assert at(plan.run) == "2027-01-15 08:00"
    assert plan.missed == MAX_COUNTED and plan.missed_more
    assert at(plan.first_missed) == "2026-01-15 08:01" and at(plan.last_missed) == "2027-01-15 07:59"


def test_what_a_catch_up_settles() -> None:
    assert CatchUp(None, 0, False, None, None, 10.0).considered is None
    assert CatchUp(5.0, 2, False, 1.0, 4.0, 10.0).considered == 5.0
    assert CatchUp(None, 3, False, 1.0, 4.0, 10.0).considered == 4.0
