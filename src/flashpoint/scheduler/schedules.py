"""Schedules: the plane submits a job for each fire time of an endpoint's ``schedule`` (a cron expression, Runpod SDK
2.x's ``@schedule(cron=...)``), and keeps each schedule's history in the job store (decision 0109).

Driven by the plane's clock: ``step(wall)`` runs at every ``tick``, so a test's ``FakeClock`` moves schedules as it
moves timeouts, and nothing sleeps. Only the serving version of an endpoint is scheduled: the plane's endpoints are
one record per key, and a rollout's next version (``EndpointState.staged``) is no endpoint of its own, so it fires
nothing until it switches in (then its ``schedule`` is the one that fires, and a changed cron starts afresh).

The rules (pure ones in ``cron.py``):

- *fire*: at each fire time, one job with an empty input (``{}``: a scheduled function takes no arguments), recorded
  as submitted by ``schedule:<cron>``, with ``{"schedule": {"cron", "due", "dueAt"}}`` in its ``flashpoint``
  metadata;
- *overlap*: a fire time whose previous run is still queued or running is skipped and recorded so (cron's own rule,
  Kubernetes' ``concurrencyPolicy: Forbid``): a slow job never piles up copies of itself;
- *missed*: fire times nobody saw (the server was down, the clock jumped) follow ``cron.catch_up``: the latest runs
  once, late, if it is no older than one period; the rest are recorded as one ``missed`` line, never run;
- *start*: a schedule resumes from its last recorded line when that is of the same cron (a restart: the missed rule
  applies to the time the server was down); otherwise (a new endpoint, a new cron, one stopped before) it starts at
  its endpoint's registration, with nothing to make up;
- *stop*: an endpoint taken away, or whose cron changed or went, stops its schedule, recorded as ``stopped``.

A plane that does not run schedules (the embedded plane, ``flashpoint dev``: ``PlaneSettings.run_schedules``) still
shows the cron of each endpoint, with no next time. ``Schedules`` is a collaborator of ``ControlPlane`` over the
plane's state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from flashpoint.errors import Error, InvalidEndpointError
from flashpoint.jobs import Job, JobStatus
from flashpoint.scheduler.cron import catch_up, check_cron, iso, next_after
from flashpoint.scheduler.records import EndpointState
from flashpoint.scheduler.state import PlaneState
from flashpoint.spec import EndpointSpec
from flashpoint.store.base import JobStore
from flashpoint.store.runs import Outcome, ScheduleRun

log = logging.getLogger("flashpoint.plane")

#: what a scheduled job records as its submitter, before its cron: no key's name has a colon
SUBMITTER_PREFIX = "schedule:"
#: times are UTC: cron's fields are read in it, and the API says so
TIMEZONE = "UTC"


def check_schedule(spec: EndpointSpec) -> None:
    """Refuse, at registration, a schedule that is not a good cron expression or is on an endpoint that takes no jobs.

    Raises:
        InvalidEndpointError: saying what to write.
    """
    if spec.schedule is None:
        return
    problem = check_cron(spec.schedule)
    if problem is not None:
        raise InvalidEndpointError(f"endpoint {spec.key!r}: schedule {spec.schedule!r}: {problem}")
    if spec.serves_routes:
        raise InvalidEndpointError(
            f"endpoint {spec.key!r}: a schedule submits jobs, and an HTTP-route endpoint takes none; schedule a queue "
            "or task resource instead"
        )


def submitter(cron: str) -> str:
    """The ``submitted_by`` of the jobs a schedule submits."""
    return SUBMITTER_PREFIX + cron


def job_extra(cron: str, due: float) -> dict[str, Any]:
    """The metadata a scheduled job is submitted with: its submitter and its schedule's cron and due time."""
    return {"flashpoint": {"submitted_by": submitter(cron), "schedule": {"cron": cron, "due": iso(due), "dueAt": due}}}


@dataclass(slots=True, eq=False)
class Timer:
    """One endpoint's running schedule."""

    #: the endpoint record it runs for: another record of the same key (taken away, deployed again) is a new schedule
    ep: EndpointState
    cron: str
    #: the latest fire time settled (run, skipped or missed): the fire times after it are still to come
    since: float
    next_due: float
    #: the job of the latest run submitted (the overlap rule reads its status)
    last_job: str | None


class Schedules:
    """Fires the plane's schedules at its clock's ticks and answers what the API and the CLI show of them."""

    def __init__(self, state: PlaneState, *, enabled: bool, submit: Callable[[str, dict[str, Any]], Job]) -> None:
        """``enabled``: this plane runs schedules (``flashpoint serve``'s); ``submit(key, extra)`` submits a job with
        an empty input to endpoint ``key`` (the plane's ``submit``)."""
        self._state = state
        self.enabled = enabled
        self._submit = submit
        #: the running schedules, by endpoint key
        self.timers: dict[str, Timer] = {}

    @property
    def _store(self) -> JobStore:
        return self._state.book.store

    # ----------------------------------------------------------------------------------------------------------------
    # the clock

    def step(self, wall: float) -> None:
        """Stop what no longer has a schedule, start what has a new one, and fire what is due at ``wall``."""
        state = self._state
        if not self.enabled or state.closing or state.draining:  # a draining server starts nothing new
            return
        changed: set[str] = set()
        for key, timer in list(self.timers.items()):
            ep = state.endpoints.get(key)
            if ep is not timer.ep:
                self._stop(key, timer, wall, "its endpoint was taken away")
            elif ep.spec.schedule != timer.cron:
                changed.add(key)
                now = f"changed to {ep.spec.schedule!r}" if ep.spec.schedule is not None else "removed"
                self._stop(key, timer, wall, f"the endpoint's schedule was {now}")
        for key, ep in state.endpoints.items():
            cron = ep.spec.schedule
            if cron is None:
                continue
            running = self.timers.get(key)
            if running is None:
                running = self.timers[key] = self._start(ep, cron, wall if key in changed else ep.registered_at)
            if wall >= running.next_due:
                self._settle(running, wall)

    def _start(self, ep: EndpointState, cron: str, fresh_since: float) -> Timer:
        """A schedule resumes after its last line of the same cron (a restart), else starts at ``fresh_since``."""
        key = ep.spec.key
        last = self._store.last_run(key)
        resumed = last is not None and last.cron == cron and last.outcome is not Outcome.STOPPED
        since = last.due if last is not None and resumed else fresh_since
        submitted = self._store.last_run(key, Outcome.SUBMITTED)
        timer = Timer(ep, cron, since, next_after(cron, since), submitted.job_id if submitted is not None else None)
        log.info(
            "schedule of %s (%s UTC) %s; next run %s",
            key,
            cron,
            f"resumes after {iso(since)}" if resumed else "starts",
            iso(timer.next_due),
        )
        return timer

    def _settle(self, timer: Timer, wall: float) -> None:
        plan = catch_up(timer.cron, timer.since, wall)
        if plan.missed and plan.first_missed is not None and plan.last_missed is not None:
            count = f"more than {plan.missed}" if plan.missed_more else str(plan.missed)
            span = iso(plan.first_missed) + ("" if plan.missed == 1 else f" to {iso(plan.last_missed)}")
            detail = f"{count} fire time(s) ({span}) passed while nothing ran the schedule (the server was down)"
            late = (
                "; the latest runs now, late"
                if plan.run is not None
                else "; the latest is over a period ago: not made up"
            )
            self._record(timer, plan.last_missed, Outcome.MISSED, detail=detail + late, count=plan.missed)
            log.warning("schedule of %s: %s%s", timer.ep.spec.key, detail, late)
        if plan.run is not None:
            self._fire(timer, plan.run)
        timer.since = max(timer.since, plan.considered or timer.since)
        timer.next_due = plan.next

    def _fire(self, timer: Timer, due: float) -> None:
        key = timer.ep.spec.key
        previous = self._state.book.find(timer.last_job) if timer.last_job is not None else None
        if previous is not None and not previous.status.terminal:
            doing = "queued" if previous.status is JobStatus.IN_QUEUE else "running"
            self._record(timer, due, Outcome.SKIPPED, job_id=None, detail=f"previous run still {doing} ({previous.id})")
            log.info("schedule of %s: the run due %s skipped: job %s still %s", key, iso(due), previous.id, doing)
            return
        try:
            job = self._submit(key, job_extra(timer.cron, due))
        except Error as exc:  # the queues are full, ...: recorded, and the next fire time tries again
            self._record(timer, due, Outcome.FAILED, detail=str(exc))
            log.warning("schedule of %s: the run due %s was not submitted: %s", key, iso(due), exc)
            return
        timer.last_job = job.id
        self._record(timer, due, Outcome.SUBMITTED, job_id=job.id)

    def _stop(self, key: str, timer: Timer, wall: float, why: str) -> None:
        del self.timers[key]
        self._record(timer, wall, Outcome.STOPPED, detail=why)
        log.info("schedule of %s (%s) stopped: %s", key, timer.cron, why)

    def _record(
        self, timer: Timer, due: float, outcome: Outcome, *, job_id: str | None = None, detail: str = "", count: int = 1
    ) -> None:
        run = ScheduleRun(timer.ep.spec.key, timer.cron, due, outcome, self._state.clock.time(), job_id, detail, count)
        self._store.add_run(run)
        self._state.book.commits.soon()  # durable with this iteration's jobs

    # ----------------------------------------------------------------------------------------------------------------
    # reads

    def next_due(self, ep: EndpointState) -> float | None:
        """When the endpoint's schedule fires next (None: it has none, or this plane runs no schedules)."""
        cron = ep.spec.schedule
        if cron is None or not self.enabled:
            return None
        timer = self.timers.get(ep.spec.key)
        if timer is not None and timer.ep is ep and timer.cron == cron:
            return timer.next_due
        # not started yet (registered since the last tick): where it will start
        return next_after(cron, max(ep.registered_at, self._state.clock.time()))

    def summary(self, ep: EndpointState) -> dict[str, Any] | None:
        """An endpoint row's ``schedule``: its cron, the time zone, whether this plane runs it, its next time."""
        cron = ep.spec.schedule
        if cron is None:
            return None
        at = self.next_due(ep)
        return {
            "cron": cron,
            "timezone": TIMEZONE,
            "active": self.enabled,
            "next": iso(at) if at is not None else None,
            "nextAt": at,
        }

    def run_view(self, run: ScheduleRun) -> dict[str, Any]:
        """A history line for the API: its fields, its due time in ISO 8601, and its job's status now (None: no job,
        or its record is gone, its TTL over)."""
        job = self._state.book.find(run.job_id) if run.job_id is not None else None
        return {**run.to_json(), "dueIso": iso(run.due), "jobStatus": job.status.value if job is not None else None}

    def rows(self, endpoints: Iterable[EndpointState]) -> list[dict[str, Any]]:
        """``GET /v1/schedules``: each scheduled endpoint of ``endpoints``, with its latest history line."""
        rows = []
        for ep in endpoints:
            summary = self.summary(ep)
            if summary is None:
                continue
            last = self._store.last_run(ep.spec.key)
            rows.append({"endpoint": ep.spec.key, **summary, "last": self.run_view(last) if last else None})
        return rows

    def history(self, ep: EndpointState, limit: int = 100) -> dict[str, Any]:
        """``GET /v1/schedules/{endpoint}``: its schedule (null cron when it has none) and history, newest first."""
        summary = self.summary(ep) or {
            "cron": None,
            "timezone": TIMEZONE,
            "active": False,
            "next": None,
            "nextAt": None,
        }
        runs = [self.run_view(run) for run in self._store.runs(ep.spec.key, limit=limit)]
        return {"endpoint": ep.spec.key, **summary, "runs": runs}
