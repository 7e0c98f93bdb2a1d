"""Pydantic models of the native /v1 API's JSON bodies: the OpenAPI schema, and what tests check bodies against."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from flashpoint.explain import Code
from flashpoint.jobs import JobStatus, Reason


class Schema(BaseModel):
    """Base of every body: camelCase on the wire (``gpu_count`` is ``gpuCount``), snake_case in Python."""

    model_config = ConfigDict(alias_generator=to_camel)


class ErrorBody(Schema):
    """Every error: a stable ``code``, a message saying what to do, and ``error`` (the same text) for Runpod."""

    code: str = Field(examples=["not_found"])
    message: str
    error: str | None = None


class GpuProcess(Schema):
    """A compute process NVML lists on a device."""

    pid: int
    memory_used_mb: int | None
    worker: str | None = Field(description="the flashpoint worker it belongs to, when it is one")


class DeviceTelemetry(Schema):
    """A device's latest NVML sample, or why there is none."""

    status: Literal["sampled", "unknown", "simulated"]
    detail: str = Field(description='"simulated: no telemetry", or why it is unknown; empty when sampled')
    sampled_at: float | None = Field(default=None, description="epoch seconds")
    utilization_pct: float | None = None
    memory_used_mb: int | None = None
    memory_total_mb: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    processes: list[GpuProcess] = Field(default_factory=list)


class Device(Schema):
    """One GPU of the fleet, and the worker and endpoint that hold it (null when free)."""

    node: str
    index: int
    name: str = Field(description="the device's NVML name")
    model: str = Field(description="the catalog model, or the NVML name when unrecognised")
    pool: str | None = Field(description="the GpuGroup it belongs to")
    vram_gb: int
    recognised: bool = Field(description="false: only GpuGroup.ANY can use it")
    simulated: bool
    coarse: bool = Field(
        description="true: the model comes from Ray's coarse accelerator type; the node has no gpu-model label"
    )
    worker: str | None
    endpoint: str | None
    telemetry: DeviceTelemetry | None = Field(
        default=None, description="the device's latest GPU telemetry; `simulated` devices have none"
    )


class Reservation(Schema):
    """A CPU worker's cores and memory on a node."""

    worker: str
    endpoint: str
    cores: list[int] = Field(description="the core ids the worker is pinned to (where this machine has them)")
    memory_gb: float


class Node(Schema):
    """One node of the fleet (with GPUs or CPU-only): what CPU workers may reserve there, its CUDA version, labels."""

    name: str
    cpus: int = Field(description="logical CPUs CPU workers may reserve (FLASHPOINT_CPUS, or what the machine has)")
    memory_gb: float = Field(description="memory CPU workers may reserve (FLASHPOINT_MEMORY_GB, or physical memory)")
    cuda: str | None = Field(description="the driver's CUDA version, matched by min_cuda_version; null when unknown")
    labels: dict[str, str] = Field(description="node labels; `datacenter` is matched by datacenter=")
    simulated: bool
    free_cpus: int
    free_memory_gb: float
    reservations: list[Reservation]


class Fleet(Schema):
    """The control plane's devices, its nodes, and a one-line summary."""

    devices: list[Device]
    nodes: list[Node] = Field(default_factory=list)
    summary: str


class WaitReason(Schema):
    """Why one candidate (or the endpoint) cannot take a worker now."""

    candidate: str
    code: Code
    detail: str
    holders: list[str] = Field(description="endpoints holding the devices, when busy")


class Explanation(Schema):
    """What a job or an endpoint is waiting for, in words and in codes."""

    endpoint: str
    job_id: str | None
    status: JobStatus | None
    summary: str
    never: bool = Field(description="true: no candidate could fit on this fleet even if every device were free")
    position: int | None = Field(description="1-based place of the job in its endpoint's queue")
    queue_depth: int
    workers: dict[str, int] = Field(description="workers of the endpoint by state (starting, idle, running, ...)")
    fleet: str
    reasons: list[WaitReason]
    notes: list[str] = Field(
        default_factory=list, description="what the endpoint's options do not do on this fleet, in words"
    )


class Placement(Schema):
    """Where a worker (and the jobs it ran) lives: node, GPU model, devices, whether simulated; a CPU worker's
    instance type and cores."""

    node: str
    gpu_model: str | None
    device_ids: list[int]
    simulated: bool
    cpu_instance: str | None = None
    cores: list[int] = []


class Worker(Schema):
    """One worker of an endpoint."""

    id: str
    endpoint: str
    state: str = Field(examples=["IDLE"], description="STARTING, IDLE, RUNNING or STOPPING")
    jobs: list[str]
    retiring: bool
    placement: Placement
    address: str | None = Field(
        default=None, description="where a route worker serves HTTP (host:port); null for a queue worker"
    )
    in_flight: int = Field(default=0, description="requests the server's proxy has handed a route worker, not answered")
    phases: dict[str, float] = Field(
        default_factory=dict,
        description="its cold start's phases so far in seconds (decision 0118): environment, process, imports, init, "
        "first_job, in that order; those unknown (a runpod worker's imports and init) absent",
    )
    generation: int = Field(
        default=1, description="the endpoint's generation it runs (a deploy's rollout starts the next)"
    )
    standby: bool = Field(
        default=False, description="started by a rollout for the next generation: it takes no work until the switch"
    )


class Route(Schema):
    """One HTTP route of a route endpoint, served as ``METHOD /{endpoint}{path}``."""

    method: str = Field(examples=["POST"])
    path: str = Field(examples=["/items/{item_id}"])


class EndpointSchedule(Schema):
    """An endpoint's cron schedule (decision 0109): its expression, read in UTC, and when it fires next."""

    cron: str = Field(examples=["0 * * * *"], description="five fields: minute hour day-of-month month day-of-week")
    timezone: Literal["UTC"] = Field(description="the time zone the fields are read in: always UTC")
    active: bool = Field(
        description="this plane runs schedules (`flashpoint serve`); false on a script's plane and `flashpoint dev`"
    )
    next: str | None = Field(examples=["2027-01-15T09:00:00Z"], description="the next fire time (null: not active)")
    next_at: float | None = Field(description="the same, epoch seconds")


#: what an endpoint row and a job row say of their app and environment
_APP = "the app its endpoint was deployed to (the `app` of its id `app.env.name`); null outside any app"
_ENV = "the deployment environment of that app (the `env` of its id); null outside any app"


class Endpoint(Schema):
    """An endpoint's options, its queue (a route endpoint: its held requests), its workers and why it waits."""

    name: str = Field(description="its id: `app.env.name` when deployed to an app, else its name")
    app: str | None = Field(default=None, description=_APP)
    env: str | None = Field(default=None, description=_ENV)
    gpu: str = Field(examples=["NVIDIA H200 > NVIDIA A100 80GB PCIe (x2)"])
    candidates: list[str] = Field(description="GPU models in the order they are tried")
    #: the CPU instance types, in fallback order (null for a GPU endpoint)
    cpu: list[str] | None
    gpu_count: int
    workers_min: int
    workers_max: int
    idle_timeout: float = Field(description="seconds")
    execution_timeout_ms: int
    max_concurrency: int
    scaler_type: str
    scaler_value: int
    queue_depth: int = Field(description="jobs IN_QUEUE; for a route endpoint, requests held for a worker")
    workers: list[Worker]
    counters: dict[str, int] = Field(description="completed, failed, retried since the plane started")
    explanation: Explanation
    kind: str = Field(default="function", description="function, class, command, or routes (an HTTP-route endpoint)")
    routes: list[Route] = Field(default_factory=list, description="a route endpoint's routes, as declared")
    in_flight: int = Field(default=0, description="a route endpoint's requests handed to its workers, not answered")
    schedule: EndpointSchedule | None = Field(default=None, description="its cron schedule; null when it has none")


class Endpoints(Schema):
    """Every registered endpoint."""

    endpoints: list[Endpoint]


class JobError(Schema):
    """A job's error: remote exception type, message, traceback text."""

    type: str
    message: str
    traceback: str


class Attempt(Schema):
    """A run of a job that ended without ending it."""

    worker_id: str | None
    placement: Placement | None
    started_at: float | None = Field(description="epoch seconds")
    ended_at: float = Field(description="epoch seconds")
    outcome: str = Field(description="`preempted` (its worker was taken for a higher class) or `worker_lost`")


class JobSummary(Schema):
    """A job as listed: everything but its log lines."""

    id: str
    endpoint: str
    app: str | None = Field(default=None, description=_APP)
    env: str | None = Field(default=None, description=_ENV)
    status: JobStatus
    reason: Reason | None
    output: Any = Field(description="the handler's output (any JSON)")
    output_encoding: Literal["cloudpickle-base64"] | None = Field(
        description="set when the output is a base64 pickle (only for jobs submitted by the flashpoint SDK)"
    )
    error: JobError | None
    delay_time: int | None = Field(description="ms from submit to start")
    execution_time: int | None = Field(description="ms from start to end")
    worker_id: str | None
    placement: Placement | None
    retries: int
    created_at: float = Field(description="epoch seconds")
    submitted_by: str | None = Field(
        description="the name of the key that submitted it: `server` for the server's own keys, `worker:<id>` for a "
        "worker's caller key, none on a server without keys"
    )
    low_priority: bool = Field(
        default=False, description="sent at low priority (`policy.lowPriority`): it runs after its queue's other jobs"
    )
    attempts: list[Attempt] = Field(
        default_factory=list,
        description="runs that ended without ending the job (preempted, worker lost), oldest first",
    )
    gpu_memory_peak_mb: int | None = Field(
        default=None,
        description="peak GPU memory (MiB) of its worker while it ran, from NVML samples; null when none saw it run "
        "(simulated devices have no telemetry)",
    )
    gpu_utilization_mean_pct: float | None = Field(
        default=None, description="mean GPU utilisation (%) of its worker's devices while it ran; null as above"
    )
    cold_start: dict[str, float] | None = Field(
        default=None,
        description="the cold start it waited on: its worker's phases in seconds (devices, environment, process, "
        "imports, init, first_job; those unknown absent); null when its worker was ready before it came",
    )


class Jobs(Schema):
    """Jobs, newest first."""

    jobs: list[JobSummary]


class FlashCall(Schema):
    """The Flash app and environment a call through Flash's client named (``X-Flash-App``, ``X-Flash-Environment``)."""

    app: str | None
    environment: str | None


class Job(JobSummary):
    """One job: every field, its log lines and its explanation."""

    logs: list[str]
    explanation: Explanation
    #: set when the job came through Flash's client (``POST /v2/flash/runsync``)
    flash: FlashCall | None


class JobLogs(Schema):
    """A job's log lines (the lines its handler printed)."""

    id: str
    logs: list[str]


class ScheduleRun(Schema):
    """One line of a schedule's history: a fire time and what became of it."""

    endpoint: str
    cron: str
    due: float = Field(description="the fire time, epoch seconds (a `missed` line's latest; a `stopped` line's stop)")
    due_iso: str = Field(examples=["2027-01-15T09:00:00Z"], description="the same, ISO 8601 in UTC")
    outcome: Literal["submitted", "skipped", "missed", "failed", "stopped"] = Field(
        description="submitted: a job ran for it (`jobId`); skipped: the previous run was still queued or running; "
        "missed: nothing ran the schedule then (the server was down), `count` fire times; failed: the submit was "
        "refused (`detail`); stopped: the schedule stopped (its endpoint taken away, its cron changed)"
    )
    recorded_at: float = Field(description="epoch seconds")
    job_id: str | None
    job_status: JobStatus | None = Field(description="the job's status now; null without a job or once it is gone")
    detail: str
    count: int = Field(description="how many fire times the line stands for (more than 1 for missed ones)")


class Schedule(EndpointSchedule):
    """A scheduled endpoint, and its latest history line."""

    endpoint: str = Field(description="its id")
    app: str | None = Field(default=None, description=_APP)
    env: str | None = Field(default=None, description=_ENV)
    last: ScheduleRun | None


class Schedules(Schema):
    """Every scheduled endpoint the key sees."""

    schedules: list[Schedule]


class ScheduleHistory(Schema):
    """One endpoint's schedule and its history, newest first (the newest 1000 lines are kept)."""

    endpoint: str
    app: str | None = Field(default=None, description=_APP)
    env: str | None = Field(default=None, description=_ENV)
    cron: str | None = Field(description="null: the endpoint has no schedule (its history may still have lines)")
    timezone: Literal["UTC"]
    active: bool
    next: str | None
    next_at: float | None
    runs: list[ScheduleRun]


class UsageAmounts(Schema):
    """Device time: GPU-seconds (per device held), vCPU-seconds and memory MB-seconds (a CPU worker's reservation)."""

    gpu_seconds: float
    vcpu_seconds: float
    memory_mb_seconds: float


class UsageRow(UsageAmounts):
    """One group's device time in the window, in total and per kind (decision 0112)."""

    name: str = Field(
        description="the group's value: an app, environment, endpoint id, key name or model; empty for none (no app, "
        "no environment, or no key: idle and starting time, route requests, jobs no key submitted)"
    )
    busy: UsageAmounts = Field(description="running jobs (a route worker: serving requests)")
    idle: UsageAmounts = Field(description="warm and live, running nothing")
    starting: UsageAmounts = Field(description="started, not yet ready (a cold start)")


class Usage(Schema):
    """Workers' device time in a window, grouped; largest GPU-seconds first."""

    since: float = Field(description="the window's start, epoch seconds")
    until: float = Field(description="the window's end (now), epoch seconds")
    by: Literal["app", "env", "endpoint", "key", "model"]
    resolution_s: float = Field(
        description="the history's bucket (a minute for the last 48 hours, an hour before): a window that cuts a "
        "bucket counts the share of its use inside"
    )
    usage: list[UsageRow]
