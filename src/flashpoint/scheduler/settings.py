"""A control plane's limits and tunables, as one frozen value: what its composition root decides, apart from the
collaborators it is built from (store, backend, clock, probe, environments, leases)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from flashpoint.scheduler import readiness
from flashpoint.scheduler.jobbook import MAX_QUEUED_BYTES, MAX_QUEUED_JOBS
from flashpoint.spec import PRIORITY_CLASSES
from flashpoint.wire import codec


@dataclass(frozen=True)
class PlaneSettings:
    """Every field has the embedded plane's default; ``flashpoint serve`` and ``flashpoint dev`` set their own."""

    #: the clock turns this often (timeouts, idle scale-down, start back-off)
    tick_s: float = 0.1
    #: how long a worker's job-take request is held open when no job is queued
    take_hold_s: float = 20.0
    #: how long a stopped worker has to exit before it is killed
    stop_grace_s: float = 5.0
    #: the Python that runs workers
    python: str = sys.executable
    #: what every worker's environment gets beside the plane's own variables
    worker_env: dict[str, str] = field(default_factory=dict)
    #: workers die with this process (``worker.launch --parent``); None: the backend decides
    parent_pid: int | None = None
    #: this machine's node name in the fleet
    node: str = "local"
    #: a durable plane puts running jobs back in the queue when it closes; an embedded one cancels them
    requeue_on_close: bool = False
    #: workers ping this often (Runpod's RUNPOD_PING_INTERVAL; at least 1 s, or Runpod's heartbeat dies)
    ping_interval_s: float = 10.0
    #: how long a worker's pings may leave out a job it holds before the worker counts as lost (3 pings when None)
    lost_job_grace_s: float | None = None
    #: the largest result body a worker may post
    max_result_bytes: int = codec.MAX_RESULT_BYTES
    #: the queues' caps, in jobs and in bytes of input, over all endpoints
    max_queued_jobs: int = MAX_QUEUED_JOBS
    max_queued_bytes: int = MAX_QUEUED_BYTES
    #: where workers reach the plane
    base_url: str = ""
    #: the plane submits the jobs of endpoints' cron schedules (``flashpoint serve``'s; ``scheduler/schedules.py``)
    run_schedules: bool = False
    #: route workers have this long to answer ``/ping`` with 200 ...
    route_ready_timeout_s: float = readiness.READY_TIMEOUT_S
    #: ... asked after pauses growing from the first to the second
    route_poll_s: tuple[float, float] = (readiness.FIRST_DELAY_S, readiness.MAX_DELAY_S)
    #: priority classes by name, the higher number first (``serve --priority-class NAME=N`` adds more)
    priority_classes: Mapping[str, int] = field(default_factory=lambda: dict(PRIORITY_CLASSES))
    #: fair-share weights per app (an app not named weighs 1; endpoints of no app share the app "")
    app_weights: Mapping[str, float] = field(default_factory=dict)
    #: a preempted worker is told to stop and has this long before it is killed and its jobs requeued
    preempt_grace_s: float = 30.0
    #: every endpoint's node choice: "pack", "spread", or "first" (the first node in fleet order, for comparisons);
    #: None: each endpoint's own ``placement``
    placement_policy: str | None = None
    #: endpoints that set no ``idle_timeout`` size their keep-warm window from their traffic, as
    #: ``idle_timeout="auto"`` does (FLASHPOINT_IDLE_TIMEOUT=auto; ``scheduler/keepwarm.py``)
    idle_timeout_auto: bool = False
    #: an endpoint's ``scaler=`` function may run in this plane's process (the embedded plane, dev); a server's
    #: plane refuses such endpoints at registration (``scheduler/scalers.py``)
    user_scalers: bool = True
    #: seconds between two GPU telemetry samples of the real devices of this node (0: none; at least 1 s otherwise;
    #: ``scheduler/gpusampler.py``)
    gpu_sample_s: float = 5.0
