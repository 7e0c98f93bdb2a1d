"""A schedule's history: one ``ScheduleRun`` per fire time settled (run, skipped, missed, failed) and one when a
schedule stops, kept by the job store beside the jobs (decision 0109)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

#: runs kept per endpoint; older ones are dropped as new ones are added (a minutely schedule adds 1440 a day)
MAX_RUNS_KEPT = 1000


class Outcome(str, enum.Enum):
    """What became of one fire time of a schedule."""

    #: a job was submitted for it (``job_id``); its own status says how it went
    SUBMITTED = "submitted"
    #: not run: the run before it was still queued or running (cron's overlap rule, Kubernetes' ``Forbid``)
    SKIPPED = "skipped"
    #: not run: nobody was there at the time (the server was down, the clock jumped); ``count`` fire times, from
    #: ``detail``'s first to ``due``
    MISSED = "missed"
    #: the submit was refused (``detail`` says why: the queues were full, ...)
    FAILED = "failed"
    #: the schedule stopped (its endpoint was taken away, its cron changed): the next start begins afresh, no catch-up
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class ScheduleRun:
    """One line of a schedule's history."""

    #: the endpoint's key (its id ``app.env.name`` when deployed)
    endpoint: str
    cron: str
    #: the fire time it settles, epoch seconds (UTC); a ``MISSED`` line's latest missed time; a ``STOPPED`` line's
    #: time of stopping
    due: float
    outcome: Outcome
    #: when it was recorded, epoch seconds
    recorded_at: float
    job_id: str | None = None
    detail: str = ""
    #: how many fire times the line stands for (more than one for ``MISSED`` only)
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "cron": self.cron,
            "due": self.due,
            "outcome": self.outcome.value,
            "recordedAt": self.recorded_at,
            "jobId": self.job_id,
            "detail": self.detail,
            "count": self.count,
        }
