"""The plane's reads: explanations, Runpod's health body, fleet and node rows, endpoint rows, metrics gauges, job
lists. They plan without applying (the ``plan`` they are given is ``ControlPlane.plan``) and change nothing, so
``GET /v1/...``, ``/health``, ``flashpoint gpus`` and ``flashpoint explain`` never start or stop a worker;
``reconcile()`` and ``tick()`` are the only places that do.

``PlaneReads`` is a collaborator of ``ControlPlane``: it reads the plane's state; the read models themselves are the
pure functions of ``views``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flashpoint.errors import NotFoundError
from flashpoint.explain import Explanation
from flashpoint.fleet.inventory import fleet_summary, nodes_summary
from flashpoint.jobs import JobStatus, JobView
from flashpoint.scheduler import planner, scalers, views
from flashpoint.scheduler.envgate import system_note
from flashpoint.scheduler.optionnotes import host_option_notes
from flashpoint.scheduler.placement.fit import endpoint_notes
from flashpoint.scheduler.quotagate import QuotaGate
from flashpoint.scheduler.state import PlaneState
from flashpoint.spec import EndpointSpec


class PlaneReads:
    """The read-only verbs of the plane, over its ``state``; ``plan`` says what a reconcile would do now."""

    def __init__(
        self,
        state: PlaneState,
        *,
        plan: Callable[[], planner.Plan],
        quotas: QuotaGate | None = None,
        auto_idle: bool = False,
    ) -> None:
        """``quotas``: the plane's, whose use an explanation notes, and which may hold a queued job back;
        ``auto_idle``: the plane's keep-warm default (``PlaneSettings.idle_timeout_auto``)."""
        self._state = state
        self._plan = plan
        self._quotas = quotas
        self._auto_idle = auto_idle

    def fleet_summary(self, spec: EndpointSpec | None = None) -> str:
        """The fleet in one line: its GPUs; for a CPU endpoint (``spec``), its nodes' CPUs and memory."""
        if spec is not None and not spec.uses_gpu:
            return nodes_summary(self._state.index.nodes.nodes)
        return fleet_summary(self._state.index.devices)

    def notes(self, spec: EndpointSpec) -> tuple[str, ...]:
        """What the endpoint's options do not do on this fleet, in words (a datacenter no node label can match, a
        volume's directory, Runpod cloud settings recorded and not applied), and the keep-warm window an
        ``idle_timeout="auto"`` endpoint has now, with why."""
        ep = self._state.endpoints.get(spec.key)
        lacking = system_note(ep.system_missing) if ep is not None and ep.system_missing else ()
        quotas = self._quotas.notes(spec) if self._quotas is not None else ()
        window = planner.keep_window(ep, self._auto_idle) if ep is not None else None
        keep = (f"idle_timeout auto: {window.why}",) if window is not None else ()
        scaling = scalers.notes(ep) if ep is not None else ()
        return endpoint_notes(spec, self._state.index) + host_option_notes(spec) + lacking + quotas + keep + scaling

    def explain_endpoint(self, name: str) -> Explanation:
        ep = self._state.endpoint(name)
        waiting = self._plan().waiting.get(ep.spec.key, ())
        fleet = self.fleet_summary(ep.spec)
        return views.explain(ep, None, waiting, position=None, fleet=fleet, notes=self.notes(ep.spec))

    def explain_job(self, job_id: str) -> Explanation:
        job = self._state.book.get(job_id)
        ep = self._state.endpoint(job.endpoint)
        position = self._state.book.position(ep, job) if job.status is JobStatus.IN_QUEUE else None
        waiting = self._plan().waiting.get(ep.spec.key, ())
        held_back = self._quotas.job_reason(job) if self._quotas is not None else None
        if held_back is not None:  # its key's quota: the endpoint's workers pass it over
            waiting = (held_back, *waiting)
        fleet = self.fleet_summary(ep.spec)
        return views.explain(ep, job, waiting, position=position, fleet=fleet, notes=self.notes(ep.spec))

    def health(self, endpoint: str) -> dict[str, Any]:
        """Runpod's ``/health`` body."""
        return views.health(self._state.endpoint(endpoint))

    def fleet_view(self) -> list[dict[str, Any]]:
        return views.fleet_rows(self._state.index)

    def node_view(self) -> list[dict[str, Any]]:
        """``GET /v1/fleet``'s nodes: each node's facts and the CPU workers reserving its cores and memory."""
        return views.node_rows(self._state.index.nodes)

    def endpoint_rows(self, name: str | None = None) -> list[dict[str, Any]]:
        """``GET /v1/endpoints`` (or one endpoint's row): options, queue, workers, counters, explanation; one plan
        serves every row."""
        chosen = [self._state.endpoint(name)] if name is not None else list(self._state.endpoints.values())
        waiting = self._plan().waiting
        return [
            views.endpoint_row(
                ep,
                views.explain(
                    ep,
                    None,
                    waiting.get(ep.spec.key, ()),
                    position=None,
                    fleet=self.fleet_summary(ep.spec),
                    notes=self.notes(ep.spec),
                ),
            )
            for ep in chosen
        ]

    def gauges(self) -> list[views.EndpointGauges]:
        """What a metrics scrape reads of each endpoint."""
        return views.gauges(self._state.endpoints.values())

    def list_jobs(
        self, endpoint: str | None = None, status: JobStatus | None = None, limit: int = 100
    ) -> list[JobView]:
        """Jobs, newest first; ``endpoint`` resolves as ``endpoint`` does, and one no longer registered is its key (its
        jobs outlive it)."""
        if endpoint is not None:
            try:
                endpoint = self._state.endpoint(endpoint).spec.key
            except NotFoundError:
                pass
        return [job.view() for job in self._state.book.store.list(endpoint=endpoint, status=status, limit=limit)]
