"""The JobStore protocol: where job records live. The plane keeps queues in memory and writes every change through."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from flashpoint.jobs import Job, JobStatus


class JobStore(Protocol):
    """Small verbs over job records; implementations: MemoryJobStore (embedded mode)."""

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
