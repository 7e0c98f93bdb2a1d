"""The JobStore protocol: where job records live. The plane keeps queues in memory and writes every change through."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator
from typing import Protocol

from flashpoint.jobs import Job, JobStatus
from flashpoint.store.runs import Outcome, ScheduleRun
from flashpoint.store.usage import UsageRecord


class JobStore(Protocol):
    """Small verbs over job records: MemoryJobStore (embedded mode) and SQLiteJobStore (server mode)."""

    def add(self, job: Job) -> None:
        """Keep a new job; its id must be new."""
        ...

    def update(self, job: Job) -> None:
        """Persist a job's changed fields."""
        ...

    def get(self, job_id: str) -> Job | None: ...

    def list(self, *, endpoint: str | None = None, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        """Newest first."""
        ...

    def unfinished(self) -> Iterator[Job]:
        """Jobs not in a terminal state, oldest first (what a restarted plane must queue again)."""
        ...

    def delete(self, job_id: str) -> None:
        """Forget a job (its TTL ran out); unknown ids are ignored."""
        ...

    def expired(self, now: float) -> builtins.list[Job]:
        """Jobs whose ``expires_at`` is at or before ``now`` (epoch seconds), any status, oldest first."""
        ...

    def add_run(self, run: ScheduleRun) -> None:
        """Keep one line of a schedule's history (``store/runs.py``), durable with the next ``flush`` like a job's
        change; an endpoint keeps its newest ``MAX_RUNS_KEPT``."""
        ...

    def runs(self, endpoint: str, *, limit: int = 100) -> builtins.list[ScheduleRun]:
        """The endpoint's schedule history, newest first."""
        ...

    def last_run(self, endpoint: str, outcome: Outcome | None = None) -> ScheduleRun | None:
        """The endpoint's newest history line (of that ``outcome``, when given)."""
        ...

    def add_usage(self, records: Iterable[UsageRecord]) -> None:
        """Add each record's amounts to the row of its cell (``store/usage.py``; a new row when there is none),
        durable with the next ``flush`` like a job's change."""
        ...

    def usage(self, since: float = 0.0) -> builtins.list[UsageRecord]:
        """Every usage row whose bucket ends after ``since`` (wall time), in cell order."""
        ...

    def fold_usage(self, before: float, span: float) -> None:
        """Merge the rows shorter than ``span`` that start before ``before`` (a multiple of ``span``) into the
        ``span``-long rows they fall in (``usage.fold``)."""
        ...

    def prune_usage(self, before: float) -> None:
        """Forget the usage rows whose bucket ended at or before ``before``."""
        ...

    def flush(self) -> None:
        """Make every write so far durable (one commit for all of them)."""
        ...

    def close(self) -> None:
        """Release files and connections; the store is unusable afterwards."""
        ...
