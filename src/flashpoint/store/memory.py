"""MemoryJobStore: jobs kept for the life of the process (embedded mode: a script run twice starts empty)."""

from __future__ import annotations

import builtins
import itertools
from collections import deque
from collections.abc import Iterable, Iterator

from flashpoint.errors import StoreError
from flashpoint.jobs import Job, JobStatus
from flashpoint.store.runs import MAX_RUNS_KEPT, Outcome, ScheduleRun
from flashpoint.store.usage import Cell, UsageRecord, fold, merge


class MemoryJobStore:
    """A real, complete in-memory store; dict insertion order is submission order."""

    def __init__(self, *, max_finished: int = 100_000) -> None:
        self._jobs: dict[str, Job] = {}
        self._finished: list[str] = []
        self.max_finished = max_finished
        #: each endpoint's schedule history, oldest first
        self._runs: dict[str, deque[ScheduleRun]] = {}
        #: workers' device time by cell (``store/usage.py``)
        self._usage: dict[Cell, UsageRecord] = {}

    def add(self, job: Job) -> None:
        if job.id in self._jobs:
            raise StoreError(f"job id {job.id!r} already exists")
        self._jobs[job.id] = job

    def update(self, job: Job) -> None:
        if job.id not in self._jobs:
            raise StoreError(f"no job with id {job.id!r} to update")
        self._jobs[job.id] = job  # an existing key keeps its place: dict order stays submission order
        if job.status.terminal:
            self._finished.append(job.id)
            if len(self._finished) > self.max_finished * 2:
                self._evict()

    def _evict(self) -> None:
        # keep memory bounded in long-running scripts: forget the oldest finished jobs beyond max_finished
        seen: set[str] = set()
        finished = [j for j in self._finished if not (j in seen or seen.add(j))]  # type: ignore[func-returns-value]
        drop, keep = finished[: -self.max_finished], finished[-self.max_finished :]
        for job_id in drop:
            job = self._jobs.get(job_id)
            if job is not None and job.status.terminal:
                del self._jobs[job_id]
        self._finished = keep

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def list(self, *, endpoint: str | None = None, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        matches = (
            job
            for job in reversed(self._jobs.values())
            if (endpoint is None or job.endpoint == endpoint) and (status is None or job.status is status)
        )
        return list(itertools.islice(matches, limit))

    def unfinished(self) -> Iterator[Job]:
        return iter([job for job in self._jobs.values() if not job.status.terminal])

    def delete(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)

    def expired(self, now: float) -> builtins.list[Job]:
        return [job for job in self._jobs.values() if job.expires_at <= now]

    def add_run(self, run: ScheduleRun) -> None:
        self._runs.setdefault(run.endpoint, deque(maxlen=MAX_RUNS_KEPT)).append(run)

    def runs(self, endpoint: str, *, limit: int = 100) -> builtins.list[ScheduleRun]:
        return list(itertools.islice(reversed(self._runs.get(endpoint, ())), limit))

    def last_run(self, endpoint: str, outcome: Outcome | None = None) -> ScheduleRun | None:
        return next((r for r in reversed(self._runs.get(endpoint, ())) if outcome in (None, r.outcome)), None)

    def add_usage(self, records: Iterable[UsageRecord]) -> None:
        for record in records:
            known = self._usage.get(record.cell)
            self._usage[record.cell] = record if known is None else merge(known, record)

    def usage(self, since: float = 0.0) -> builtins.list[UsageRecord]:
        return [self._usage[cell] for cell in sorted(self._usage) if cell[0] + cell[1] > since]

    def fold_usage(self, before: float, span: float) -> None:
        self._usage = {record.cell: record for record in fold(self._usage.values(), before, span)}

    def prune_usage(self, before: float) -> None:
        self._usage = {cell: record for cell, record in self._usage.items() if cell[0] + cell[1] > before}

    def close(self) -> None:
        self._jobs.clear()
        self._runs.clear()
        self._usage.clear()

    def flush(self) -> None:
        """Nothing to commit: memory is the store."""
