"""What the clock finds wrong with running workers, as pure decisions the plane applies on each tick: jobs past
their execution timeout, and jobs a worker holds but its heartbeats stopped naming."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flashpoint.jobs import Job, JobStatus
from flashpoint.scheduler.records import Worker


def overdue(worker: Worker, find: Callable[[str], Job | None], wall: float) -> list[Job]:
    """The worker's running jobs past their execution timeout (``wall`` is epoch time)."""
    late = []
    for job_id in sorted(worker.jobs):
        job = find(job_id)
        if job is None or job.status is not JobStatus.IN_PROGRESS or not job.execution_timeout_ms:
            continue
        if job.started_at is not None and (wall - job.started_at) * 1000 >= job.execution_timeout_ms:
            late.append(job)
    return late


@dataclass(frozen=True, slots=True)
class Dropped:
    """Jobs a worker holds that its pings have left out for the grace period (it neither runs them nor posted their
    results), and whether the worker is ``wedged``: it has taken and posted nothing since."""

    jobs: tuple[str, ...]
    since: float
    wedged: bool


def dropped(worker: Worker, now: float, grace_s: float) -> Dropped | None:
    """The watchdog's evidence against one worker (``now`` is monotonic), or None when there is none.

    Only a ping that omits a job counts: a worker that sends nothing at all (a long job whose handler blocks the
    worker's loop) is left alone.
    """
    jobs = tuple(j for j, since in worker.unnamed.items() if j in worker.jobs and now - since >= grace_s)
    if not jobs:
        return None
    since = min(worker.unnamed[j] for j in jobs)
    return Dropped(jobs, since, worker.last_exchange < since)
