"""``@schedule`` (rc2's ``runpod/apps/schedule.py``): above or below the app decorator, on queues and tasks."""

from __future__ import annotations

import pytest

from flashpoint.runpodapps import App, schedule
from flashpoint.runpodapps.schedule import SCHEDULE_ATTR


def test_schedule_above_the_app_decorator() -> None:
    app = App("s")

    @schedule(cron="0 * * * *")
    @app.queue(name="hourly")
    def hourly() -> None: ...

    assert hourly.spec.schedule == "0 * * * *"
    assert not hasattr(hourly._fn, SCHEDULE_ATTR)


def test_schedule_below_the_app_decorator() -> None:
    app = App("s")

    @app.task(name="nightly")
    @schedule(cron="0 3 * * *")
    def nightly() -> None: ...

    assert nightly.spec.schedule == "0 3 * * *"
    assert getattr(nightly._fn, SCHEDULE_ATTR) == "0 3 * * *"


def test_the_stamp_on_a_bare_function() -> None:
    def job() -> None: ...

    assert schedule(cron="*/5 * * * *")(job) is job
    assert getattr(job, SCHEDULE_ATTR) == "*/5 * * * *"


@pytest.mark.parametrize("cron", ["", None, 5])
def test_bad_cron(cron: object) -> None:
    with pytest.raises(ValueError) as raised:
        schedule(cron=cron)  # type: ignore[arg-type]
    assert str(raised.value) == "cron must be a non-empty string"


def test_cron_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        schedule("0 * * * *")  # type: ignore[call-arg]
