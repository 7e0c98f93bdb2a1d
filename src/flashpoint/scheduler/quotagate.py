"""The plane's side of quotas (decision 0113): ``QuotaGate`` applies the decisions of ``quotas.py`` to the plane's
state.

- ``limit``: the planner's ``Limit``: a worker of an app (or environment) at its hold quota does not start, and the
  candidate's reason is ``quota``; so does one whose queued jobs all belong to keys at theirs.
- ``take``: the jobs a worker takes, past those whose key is at its hold quota (left queued, in order).
- ``check_submit``: a job whose app, environment or key has spent its GPU-hour budget is refused
  (``BudgetSpentError``, 429), rather than queued forever.
- ``job_reason``, ``notes``, ``rows``: what ``explain``, ``flashpoint status`` and ``/v1/quotas`` show.

A collaborator of ``ControlPlane`` over its ``PlaneState``: it never starts or stops anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from flashpoint.errors import BudgetSpentError
from flashpoint.explain import Code, WaitReason
from flashpoint.gpus import ANY_GPU, AnyGPU, Candidate, describe
from flashpoint.jobs import SUBMITTED_BY_KEY, Job, JobStatus
from flashpoint.scheduler.jobbook import JobBook
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.quotas import (
    Quota,
    QuotaSource,
    UsageReader,
    budget_message,
    budget_used,
    format_period,
    hold_reason,
    iso,
    key_hold_reason,
    spent,
)
from flashpoint.scheduler.records import EndpointState, Worker
from flashpoint.scheduler.state import PlaneState
from flashpoint.spec import EndpointSpec, split_endpoint_id

#: how deep into a queue ``take`` (and the planner's key check) looks past jobs whose key is at its quota: a queue of
#: thousands of one key's jobs costs at most this much per take (jobs further back wait for the front to move)
SCAN_DEPTH = 256


def submitter(extra: dict[str, Any] | None) -> str | None:
    """The key a job is being submitted by: the name the intake records in its ``flashpoint`` metadata."""
    meta = (extra or {}).get("flashpoint")
    name = meta.get(SUBMITTED_BY_KEY) if isinstance(meta, dict) else None
    return name if isinstance(name, str) else None


def _app_env(endpoint_key: str) -> tuple[str | None, str | None]:
    parts = split_endpoint_id(endpoint_key)
    return (None, None) if parts is None else (parts[0], parts[1])


class QuotaGate:
    """Quotas applied to the plane's ``state``; ``source`` gives the quotas in force, ``usage`` the meter (None until
    the plane has one: budgets are then not checked)."""

    def __init__(self, state: PlaneState, source: QuotaSource | None, usage: Callable[[], UsageReader | None]) -> None:
        self._state = state
        self._source = source
        self._plane_usage = usage
        #: a usage reader of its own, read instead of the plane's meter (a test's: GPU use as the test says)
        self.meter: UsageReader | None = None

    def _usage(self) -> UsageReader | None:
        return self.meter if self.meter is not None else self._plane_usage()

    def quotas(self) -> Sequence[Quota]:
        return () if self._source is None else self._source.quotas()

    # ------------------------------------------------------------------------------------------------------------------
    # holds: the planner's limit

    def limit(self, spec: EndpointSpec, candidate: Candidate, index: FleetIndex) -> WaitReason | None:
        """Why a worker of ``spec`` may not take ``spec.gpu_count`` devices of ``candidate`` now (the planner's
        ``Limit``), reading ``index``, where the plan's own starts are held already."""
        quotas = self.quotas()
        if not quotas:
            return None
        for quota in quotas:
            if not quota.of_endpoints(spec.app, spec.app_env):
                continue
            held = self._held_in_index(quota, index, ANY_GPU)
            held_model = held if isinstance(candidate, AnyGPU) else self._held_in_index(quota, index, candidate)
            reason = hold_reason(quota, candidate, held=held, held_model=held_model, need=spec.gpu_count)
            if reason is not None:
                return reason
        if any(q.key is not None and q.holds for q in quotas):
            return self._keys_at_quota(spec, candidate)
        return None

    @staticmethod
    def _held_in_index(quota: Quota, index: FleetIndex, candidate: Candidate) -> int:
        return sum(n for ep, n in index.held_by_endpoint(candidate).items() if quota.within(*_app_env(ep)))

    def _keys_at_quota(self, spec: EndpointSpec, candidate: Candidate) -> WaitReason | None:
        """A new worker of ``spec`` would take the front of its queue: when every job there (to ``SCAN_DEPTH``) has a
        key that a worker of ``spec.gpu_count`` devices would put over its quota, it would idle: the first one's
        reason, else None."""
        ep = self._state.endpoints.get(spec.key)
        if ep is None or not ep.queued:
            return None
        model = None if isinstance(candidate, AnyGPU) else candidate.name
        first: str | None = None
        for job in self._queued(ep):
            why = self._key_over(job, spec, model, spec.gpu_count)
            if why is None:
                return None
            first = first or why
        return None if first is None else WaitReason(describe(candidate), Code.QUOTA, first)

    # ------------------------------------------------------------------------------------------------------------------
    # holds: a key's jobs, where workers take them

    def take(self, book: JobBook, ep: EndpointState, worker: Worker, limit: int) -> list[Job]:
        """Up to ``limit`` jobs for ``worker`` from the front of ``ep``'s queue (``book.pop``), past those whose key
        would go over its hold quota if ``worker`` ran them: those stay queued, in their order."""
        if not any(q.key is not None and q.holds for q in self.quotas()):
            return book.pop(ep, limit)
        model = worker.devices[0].model_name if worker.devices else None
        taken: list[Job] = []
        skipped: list[Job] = []
        # the keys this worker already holds devices for (its running jobs', and those taken now) add nothing
        keys = {j.submitted_by for j in self._jobs_of(worker)}
        while len(taken) < limit and len(skipped) < SCAN_DEPTH:
            popped = book.pop(ep, 1)
            if not popped:
                break
            job = popped[0]
            need = 0 if job.submitted_by in keys else len(worker.devices)
            if self._key_over(job, ep.spec, model, need) is not None:
                skipped.append(job)
                continue
            keys.add(job.submitted_by)
            taken.append(job)
        for job in reversed(skipped):  # back at the front, in their order
            book.push(ep, job, front=True)
        return taken

    def job_reason(self, job: Job) -> WaitReason | None:
        """Why a queued ``job`` is passed over by its endpoint's workers: its key's hold quota (None: it is not)."""
        if job.status is not JobStatus.IN_QUEUE or job.submitted_by is None:
            return None
        ep = self._state.endpoints.get(job.endpoint)
        if ep is None:
            return None
        models: set[str | None] = {w.devices[0].model_name for w in ep.workers.values() if w.devices} or {None}
        need = ep.spec.gpu_count if ep.spec.uses_gpu else 0
        whys = [self._key_over(job, ep.spec, model, need) for model in sorted(models, key=str)]
        why = next((w for w in whys if w is not None), None) if all(whys) else None
        return None if why is None else WaitReason(f"key {job.submitted_by}", Code.QUOTA, why)

    def _key_over(self, job: Job, spec: EndpointSpec, model: str | None, need: int) -> str | None:
        key = job.submitted_by
        if key is None or need == 0:
            return None
        for quota in self.quotas():
            if quota.key is None or not quota.holds or not quota.covers(spec.app, spec.app_env, key):
                continue
            held = self.key_holdings(quota)
            why = key_hold_reason(
                quota, held=sum(held.values()), held_model=held.get(model or "", 0), model=model, need=need
            )
            if why is not None:
                return why
        return None

    def key_holdings(self, quota: Quota) -> Counter[str]:
        """The devices, by model, of the workers running jobs of ``quota``'s key (within its app or environment)."""
        held: Counter[str] = Counter()
        for worker in self._state.workers.values():
            if not worker.devices or not worker.jobs or not quota.within(*_app_env(worker.endpoint)):
                continue
            if any(j.submitted_by == quota.key for j in self._jobs_of(worker)):
                for device in worker.devices:
                    held[device.model_name] += 1
        return held

    def _jobs_of(self, worker: Worker) -> Iterator[Job]:
        for job_id in worker.jobs:
            job = self._state.book.find(job_id)
            if job is not None:
                yield job

    def _queued(self, ep: EndpointState) -> Iterator[Job]:
        seen = 0
        for job_id in ep.queue:
            job = self._state.book.store.get(job_id)
            if job is None or job.status is not JobStatus.IN_QUEUE:
                continue
            yield job
            seen += 1
            if seen >= SCAN_DEPTH:
                return

    # ------------------------------------------------------------------------------------------------------------------
    # budgets

    def check_submit(self, spec: EndpointSpec, extra: dict[str, Any] | None) -> None:
        """Refuse a new job of ``spec`` whose app, environment or key (the submitter in ``extra``) has spent a
        budget.

        Raises:
            BudgetSpentError: naming the budget, its use and when it renews (429 over HTTP, with Retry-After).
        """
        usage = self._usage()
        if usage is None:
            return
        key = submitter(extra)
        now = self._state.clock.time()
        for quota in self.quotas():
            if quota.gpu_hours is None or not quota.covers(spec.app, spec.app_env, key):
                continue
            done = spent(quota, usage, now)
            if done is not None:
                raise BudgetSpentError(
                    budget_message(done),
                    quota=quota.budget_flags(),
                    renews_at=done.renews_at,
                    retry_after_s=done.retry_after_s,
                )

    # ------------------------------------------------------------------------------------------------------------------
    # what is shown

    def use(self, quota: Quota) -> dict[str, Any]:
        """What ``quota``'s scope uses now: devices held (in total and of each limited model) and, with a budget,
        GPU-hours in its window, whether it is spent, and when it renews."""
        if quota.key is not None:
            held = self.key_holdings(quota)
        else:
            held = Counter()
            for worker in self._state.workers.values():
                if quota.app is not None and quota.within(*_app_env(worker.endpoint)):
                    for device in worker.devices:
                        held[device.model_name] += 1
        shown: dict[str, Any] = {
            "gpus": sum(held.values()),
            "models": {model: held.get(model, 0) for model, _ in quota.models},
            "gpuHours": None,
            "spent": False,
            "renewsAt": None,
        }
        usage = self._usage()
        if quota.gpu_hours is not None and usage is not None:
            now = self._state.clock.time()
            shown["gpuHours"] = round(budget_used(quota, usage, now) / 3600, 4)
            done = spent(quota, usage, now)
            if done is not None:
                shown["spent"], shown["renewsAt"] = True, done.renews_at
        return shown

    def rows(self) -> list[dict[str, Any]]:
        """``GET /v1/quotas``: every quota with its use."""
        return [{**quota.to_json(), "use": self.use(quota)} for quota in self.quotas()]

    def notes(self, spec: EndpointSpec) -> tuple[str, ...]:
        """The quotas in force on ``spec``'s endpoint and their use, a line each, for its explanation."""
        lines = []
        for quota in self.quotas():
            if not quota.covers(spec.app, spec.app_env, quota.key):
                continue
            use = self.use(quota)
            parts = []
            if quota.max_gpus is not None:
                parts.append(f"holds {use['gpus']} of {quota.max_gpus} GPUs")
            parts += [f"holds {use['models'][m]} of {n} {m}" for m, n in quota.models]
            if quota.gpu_hours is not None:
                used = "?" if use["gpuHours"] is None else f"{use['gpuHours']:.2f}"
                budget = f"used {used} of {quota.gpu_hours:g} GPU-hours in the last {format_period(quota.period_s)}"
                if use["spent"]:
                    budget += f" (spent: new jobs refused until {iso(use['renewsAt'])})"
                parts.append(budget)
            lines.append(f"quota of {quota.who()} ({quota.scope_flags()}): {'; '.join(parts)}")
        return tuple(lines)
