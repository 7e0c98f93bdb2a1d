"""The plane's reads: explanations, Runpod's health body, fleet and node rows, endpoint rows, metrics gauges, job
lists. They plan without applying (``ControlPlane.plan``) and change nothing, so ``GET /v1/...``, ``/health``,
``flashpoint gpus`` and ``flashpoint explain`` never start or stop a worker; ``reconcile()`` and ``tick()`` are the only
places that do.

``PlaneReads`` is a base of ``ControlPlane``: it declares what it reads of the plane; the read models themselves are
the pure functions of ``views``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from flashpoint.explain import Explanation
from flashpoint.jobs import Job, JobStatus, JobView
from flashpoint.scheduler import planner, views
from flashpoint.scheduler.jobbook import JobBook
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.records import EndpointState
from flashpoint.spec import EndpointSpec
from flashpoint.store.base import JobStore


class PlaneReads(ABC):
    """The read-only verbs of ``ControlPlane``."""

    endpoints: dict[str, EndpointState]
    index: FleetIndex
    book: JobBook
    store: JobStore

    @abstractmethod
    def endpoint(self, name: str) -> EndpointState: ...

    @abstractmethod
    def job(self, job_id: str) -> Job: ...

    @abstractmethod
    def plan(self) -> planner.Plan: ...

    @abstractmethod
    def fleet_summary(self, spec: EndpointSpec | None = None) -> str: ...

    @abstractmethod
    def notes(self, spec: EndpointSpec) -> tuple[str, ...]: ...

    def explain_endpoint(self, name: str) -> Explanation:
        ep = self.endpoint(name)
        waiting = self.plan().waiting.get(name, ())
        fleet = self.fleet_summary(ep.spec)
        return views.explain(ep, None, waiting, position=None, fleet=fleet, notes=self.notes(ep.spec))

    def explain_job(self, job_id: str) -> Explanation:
        job = self.job(job_id)
        ep = self.endpoint(job.endpoint)
        position = self.book.position(ep, job) if job.status is JobStatus.IN_QUEUE else None
        waiting = self.plan().waiting.get(ep.spec.name, ())
        fleet = self.fleet_summary(ep.spec)
        return views.explain(ep, job, waiting, position=position, fleet=fleet, notes=self.notes(ep.spec))

    def health(self, endpoint: str) -> dict[str, Any]:
        """Runpod's ``/health`` body."""
        return views.health(self.endpoint(endpoint))

    def fleet_view(self) -> list[dict[str, Any]]:
        return views.fleet_rows(self.index)

    def node_view(self) -> list[dict[str, Any]]:
        """``GET /v1/fleet``'s nodes: each node's facts and the CPU workers reserving its cores and memory."""
        return views.node_rows(self.index.nodes)

    def endpoint_rows(self, name: str | None = None) -> list[dict[str, Any]]:
        """``GET /v1/endpoints`` (or one endpoint's row): options, queue, workers, counters, explanation; one plan
        serves every row."""
        chosen = [self.endpoint(name)] if name is not None else list(self.endpoints.values())
        waiting = self.plan().waiting
        return [
            views.endpoint_row(
                ep,
                views.explain(
                    ep,
                    None,
                    waiting.get(ep.spec.name, ()),
                    position=None,
                    fleet=self.fleet_summary(ep.spec),
                    notes=self.notes(ep.spec),
                ),
            )
            for ep in chosen
        ]

    def gauges(self) -> list[views.EndpointGauges]:
        """What a metrics scrape reads of each endpoint."""
        return views.gauges(self.endpoints.values())

    def list_jobs(
        self, endpoint: str | None = None, status: JobStatus | None = None, limit: int = 100
    ) -> list[JobView]:
        """Jobs, newest first."""
        return [job.view() for job in self.store.list(endpoint=endpoint, status=status, limit=limit)]
