"""The ``@schedule`` decorator: a cron expression on a queue or task resource (mirrors ``runpod/apps/schedule.py`` of
``runpod==2.0.0rc2``).

    @app.task(name="hourly", gpu=GpuType.NVIDIA_GEFORCE_RTX_4090)
    @schedule(cron="0 * * * *")
    async def hourly_job(): ...

It may sit above the app decorator (it sets the handle's ``spec.schedule``) or below it (it stamps the function with
``SCHEDULE_ATTR``, which the handle adopts). rc2 refuses to deploy schedules (``ScheduleNotSupported``) until its
backend has them; flashpoint's server runs them (decision 0109), so rc2's ``SCHEDULES_ENABLED`` switch is left out.
The cron string itself is checked where the resource becomes an endpoint.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["SCHEDULE_ATTR", "schedule"]

T = TypeVar("T")

SCHEDULE_ATTR = "__runpod_schedule__"


def schedule(*, cron: str) -> Callable[[T], T]:
    """attach a cron schedule to a queue or task handle.

    decorator order is flexible: @schedule can sit above or below the app decorator.
    """
    if not cron or not isinstance(cron, str):
        raise ValueError("cron must be a non-empty string")

    def decorator(target: T) -> T:
        # works on both raw functions (before app decorator) and handles (after), since handles expose their spec
        # and raw fns get stamped
        spec = getattr(target, "spec", None)
        if spec is not None:
            spec.schedule = cron
        else:
            setattr(target, SCHEDULE_ATTR, cron)
        return target

    return decorator
