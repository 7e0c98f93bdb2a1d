"""What the plane's rooms share: the endpoints' and workers' records, the fleet index, the job book, the clock, and
whether the plane is closing.

One ``PlaneState`` is built by ``ControlPlane`` and handed to each of its collaborators (``reads``, ``protocol``,
``routeserving``, ``supervision``, ``ownership.leasing``), which read and write the parts their own rules need; none
of them sees the plane itself. Its containers are made once and only ever changed in place, so a collaborator may keep
a reference to one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flashpoint.clock import Clock
from flashpoint.jobs import Job, JobError, JobStatus, Reason
from flashpoint.scheduler import names
from flashpoint.scheduler.gpustats import GpuStats
from flashpoint.scheduler.jobbook import JobBook
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.records import EndpointState, Worker
from flashpoint.scheduler.usage import UsageMeter


@dataclass(eq=False)
class PlaneState:
    clock: Clock
    #: the fleet's devices and nodes, and who holds each
    index: FleetIndex
    #: every job's record, the queues and their caps, and who waits for a job
    book: JobBook
    #: every registered endpoint, by name
    endpoints: dict[str, EndpointState] = field(default_factory=dict)
    #: route endpoints by name: what the proxy looks a request's first path segment up in
    routed: dict[str, EndpointState] = field(default_factory=dict)
    #: every worker not yet gone, by id (each is also in its endpoint's ``workers``)
    workers: dict[str, Worker] = field(default_factory=dict)
    #: the workers of endpoints taken away (``unregister``) that still finish their jobs, by id, with that endpoint's
    #: record: it is no longer in ``endpoints`` (a new one of the same key may be), so their exit finds it here
    leaving: dict[str, EndpointState] = field(default_factory=dict)
    #: the plane is closing: nothing is started or reconciled, and a worker's exit is expected
    closing: bool = False
    #: the plane drains before it closes (``draining.py``): no new work, nothing started, running work finishes
    draining: bool = False
    #: every worker's device time (``usage.py``): the rooms tell it of each worker's changes
    usage: UsageMeter = field(init=False)
    #: GPU telemetry: each device's latest sample and each running job's tally (``gpustats.py``, decision 0117)
    gpus: GpuStats = field(default_factory=GpuStats)

    def __post_init__(self) -> None:
        self.usage = UsageMeter(self.clock, self.book)

    def endpoint(self, name: str) -> EndpointState:
        """The endpoint ``name`` means: its id (key), or a bare name one endpoint alone has (``names.resolve``).

        Raises:
            NotFoundError: none has it (naming the endpoints there are).
            ConflictError: several apps' endpoints have that bare name (naming their ids).
        """
        ep = self.endpoints.get(name)
        if ep is not None:  # the common case, a dict lookup: callers mostly pass keys
            return ep
        return self.endpoints[names.resolve(name, {key: e.spec.name for key, e in self.endpoints.items()})]

    def finish(self, job: Job, status: JobStatus, reason: Reason, error: JobError | None = None) -> None:
        """End a job in the book, counted in its endpoint's counters (when it still has one)."""
        ep = self.endpoints.get(job.endpoint)
        figures = self.gpus.settle(job.id)  # what the GPU sampler saw while it ran, kept on its record
        if figures is not None:
            job.gpu_memory_peak_mb, job.gpu_utilization_mean_pct = figures
        self.book.finish(job, status, reason, error, ep.counters if ep is not None else None)

    def fail_queued(self, ep: EndpointState, reason: Reason, error: JobError) -> None:
        """Every job still queued for ``ep`` ends FAILED with ``reason`` and ``error``."""
        for job in self.book.queued(ep):
            self.book.count(ep, job, -1)
            self.finish(job, JobStatus.FAILED, reason, error)
        ep.queue.clear()
        ep.low_queue.clear()
