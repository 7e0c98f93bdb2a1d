"""Prometheus metrics of a control plane: its state read at scrape time, what finished jobs took, per endpoint, and
what route endpoints' requests took, per endpoint and route."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flashpoint.access import Operation
from flashpoint.api.guard import authorize
from flashpoint.api.workers import error_response
from flashpoint.errors import ForbiddenError
from flashpoint.jobs import TERMINAL, JobStatus, JobView
from flashpoint.scheduler.loop import ControlPlane

#: seconds; a job may wait for a cold start (minutes) or run for hours
DELAY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
EXECUTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)
#: seconds; a proxied request takes a millisecond, or a cold start (minutes), or a long stream
ROUTE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600)
#: their ``le`` labels, as prometheus_client writes them ("0.0005", "1.0", "+Inf")
_ROUTE_LE = (*(repr(float(bound)) for bound in ROUTE_BUCKETS), "+Inf")


class _PlaneCollector:
    """Gauges computed from the plane's state when Prometheus scrapes (on the plane's own event loop)."""

    def __init__(self, plane: ControlPlane, finished: dict[tuple[str, str], int]) -> None:
        self.plane = plane
        self.finished = finished

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        jobs, queue, workers, devices, in_flight, waiting = self._families()
        plane = self.plane
        for gauge in plane.gauges():
            name = gauge.name
            for state, count in gauge.workers.items():
                workers.add_metric([name, state], count)
            if gauge.routes:  # a route endpoint has requests, not jobs
                in_flight.add_metric([name], gauge.running)
                waiting.add_metric([name], gauge.queued)
                continue
            jobs.add_metric([name, JobStatus.IN_QUEUE.value], gauge.queued)
            jobs.add_metric([name, JobStatus.IN_PROGRESS.value], gauge.running)
            for status in sorted(TERMINAL, key=lambda s: s.value):
                jobs.add_metric([name, status.value], self.finished.get((name, status.value), 0))
            queue.add_metric([name], gauge.queued)
        counts: dict[tuple[str, str, str], int] = {}
        for row in plane.fleet_view():
            simulated = "true" if row["simulated"] else "false"
            for state in ("busy", "free"):
                counts.setdefault((str(row["model"]), state, simulated), 0)
            held = "busy" if row["worker"] is not None else "free"
            counts[(str(row["model"]), held, simulated)] += 1
        for labels, count in counts.items():
            devices.add_metric(list(labels), count)
        return [jobs, queue, workers, devices, in_flight, waiting]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(
                "flashpoint_jobs",
                "Jobs by status: IN_QUEUE and IN_PROGRESS now; terminal ones counted since these metrics were attached",
                labels=["endpoint", "status"],
            ),
            GaugeMetricFamily("flashpoint_queue_depth", "Jobs waiting IN_QUEUE", labels=["endpoint"]),
            GaugeMetricFamily("flashpoint_workers", "Workers by state", labels=["endpoint", "state"]),
            GaugeMetricFamily(
                "flashpoint_devices",
                "GPUs of the fleet by model, busy (held by a worker) or free, real or simulated",
                labels=["model", "state", "simulated"],
            ),
            GaugeMetricFamily(
                "flashpoint_route_requests_in_flight",
                "Requests of a route endpoint handed to its workers and not yet answered",
                labels=["endpoint"],
            ),
            GaugeMetricFamily(
                "flashpoint_route_requests_held",
                "Requests of a route endpoint waiting for a ready worker",
                labels=["endpoint"],
            ),
        )


class _UsageCollector:
    """Workers' device time since the job store began (decision 0112), as counters per endpoint, app, environment,
    model and kind (busy, idle, starting), read from the plane's usage meter at scrape time; live workers' time counts
    up to the scrape. Keys are left out of the labels (their number is the server's users'): ``/v1/usage?by=key``."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        for labels, amounts in sorted(self.plane.usage.lifetime().items()):
            for family, amount in zip(families, amounts, strict=True):
                family.add_metric(list(labels), amount)
        return list(families)

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, CounterMetricFamily, CounterMetricFamily]:
        labels = ["endpoint", "app", "env", "model", "kind"]
        return (
            CounterMetricFamily(
                "flashpoint_gpu_seconds",
                "GPU-seconds workers held, per device, by kind (busy, idle, starting)",
                labels=labels,
            ),
            CounterMetricFamily("flashpoint_vcpu_seconds", "vCPU-seconds CPU workers reserved, by kind", labels=labels),
            CounterMetricFamily(
                "flashpoint_memory_mb_seconds", "Memory MB-seconds CPU workers reserved, by kind", labels=labels
            ),
        )


class _GpuCollector:
    """The latest GPU telemetry of each real device sampled (decision 0117), read at scrape time. Simulated devices,
    and real ones whose telemetry is unknown, have no series: no number is shown that was not measured."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        util, used, total, temperature, power = families = self._families()
        for device, reading in self.plane.state.gpus.readings(self.plane.index.devices):
            labels = [device.node, str(device.index), device.uuid, device.model_name]
            for family, value in (
                (util, reading.utilization_pct),
                (used, None if reading.memory_used_mb is None else reading.memory_used_mb * 1024 * 1024),
                (total, None if reading.memory_total_mb is None else reading.memory_total_mb * 1024 * 1024),
                (temperature, reading.temperature_c),
                (power, reading.power_w),
            ):
                if value is not None:  # a figure the device does not report has no sample
                    family.add_metric(labels, value)
        return list(families)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        labels = ["node", "index", "uuid", "model"]
        return (
            GaugeMetricFamily("flashpoint_gpu_utilization_percent", "GPU utilisation (NVML), %", labels=labels),
            GaugeMetricFamily("flashpoint_gpu_memory_used_bytes", "GPU memory used (NVML)", labels=labels),
            GaugeMetricFamily("flashpoint_gpu_memory_total_bytes", "GPU memory in all (NVML)", labels=labels),
            GaugeMetricFamily("flashpoint_gpu_temperature_celsius", "GPU temperature (NVML)", labels=labels),
            GaugeMetricFamily("flashpoint_gpu_power_watts", "GPU power draw (NVML)", labels=labels),
        )


class RouteMetrics:
    """What route endpoints' requests took: a counter by endpoint, method, route and status, and a latency histogram
    (arrival to the answer's end, a held request's wait included) by endpoint, method and route. ``route`` is the
    declared template a request matched (``/items/{item_id}``) or ``other``, so label values stay bounded.

    A request costs two dictionary updates and a bisection: the counts are plain numbers, turned into Prometheus
    families when a scrape reads them (prometheus_client's own ``Counter.inc`` and ``Histogram.observe`` took a lock
    each, about a twentieth of a proxied request's time). Everything runs on the server's one event loop.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        #: requests per (endpoint, method, route, status)
        self._requests: dict[tuple[str, str, str, int], int] = {}
        #: per (endpoint, method, route): requests per bucket of ROUTE_BUCKETS (the last: beyond them), then the sum
        #: of their seconds
        self._latency: dict[tuple[str, str, str], list[float]] = {}
        registry.register(self)

    def observe(self, endpoint: str, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request (the proxy calls this for every one)."""
        key = (endpoint, method, route, status)
        requests = self._requests
        requests[key] = requests.get(key, 0) + 1
        where = (endpoint, method, route)
        buckets = self._latency.get(where)
        if buckets is None:
            buckets = self._latency[where] = [0.0] * (len(ROUTE_BUCKETS) + 2)
        buckets[bisect_left(ROUTE_BUCKETS, seconds)] += 1
        buckets[-1] += seconds

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        requests, latency = self._families()
        for (endpoint, method, route, status), count in self._requests.items():
            requests.add_metric([endpoint, method, route, str(status)], count)
        for (endpoint, method, route), buckets in self._latency.items():
            cumulative: list[tuple[str, float]] = []
            total = 0.0
            for bound, seen in zip(_ROUTE_LE, buckets, strict=False):
                total += seen
                cumulative.append((bound, total))
            latency.add_metric([endpoint, method, route], cumulative, buckets[-1])
        return [requests, latency]

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, HistogramMetricFamily]:
        return (
            CounterMetricFamily(
                "flashpoint_route_requests",
                "Requests to route endpoints, by endpoint, method, route template and status (0: closed mid-answer)",
                labels=["endpoint", "method", "route", "status"],
            ),
            HistogramMetricFamily(
                "flashpoint_route_request_seconds",
                "Time from a route request's arrival to the end of its answer",
                labels=["endpoint", "method", "route"],
            ),
        )


class PlaneMetrics:
    """A plane's metrics in a registry of their own; ``observe`` records each job that reaches a terminal state;
    ``routes`` records route endpoints' requests."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.registry = CollectorRegistry(auto_describe=False)
        self._finished_by_status: dict[tuple[str, str], int] = {}
        self.registry.register(_PlaneCollector(plane, self._finished_by_status))
        self.registry.register(_UsageCollector(plane))
        self.registry.register(_GpuCollector(plane))
        self.delay = Histogram(
            "flashpoint_job_delay_seconds",
            "Time from submit to the start of the job's last run",
            ["endpoint"],
            registry=self.registry,
            buckets=DELAY_BUCKETS,
        )
        self.execution = Histogram(
            "flashpoint_job_execution_seconds",
            "Time from start to end of finished jobs",
            ["endpoint"],
            registry=self.registry,
            buckets=EXECUTION_BUCKETS,
        )
        self.finished = Counter(
            "flashpoint_jobs_finished",
            "Jobs that reached a terminal state, by status and reason",
            ["endpoint", "status", "reason"],
            registry=self.registry,
        )
        self.cold_start = Histogram(
            "flashpoint_cold_start_seconds",
            "Phases of the cold starts finished jobs waited on (decision 0118), by endpoint and phase",
            ["endpoint", "phase"],
            registry=self.registry,
            buckets=DELAY_BUCKETS,
        )
        self._counters: dict[tuple[str, str, str], Counter] = {}
        self._delays: dict[str, Histogram] = {}
        self._executions: dict[str, Histogram] = {}
        self._unsubscribe = plane.listen(self.observe)
        self.routes = RouteMetrics(self.registry)

    def observe(self, view: JobView) -> None:
        """Record a job that reached a terminal state (the plane calls this for every one)."""
        if not view.status.terminal:
            return
        endpoint, status = view.endpoint, view.status.value
        key = (endpoint, status)
        self._finished_by_status[key] = self._finished_by_status.get(key, 0) + 1
        reason = view.reason.value if view.reason is not None else ""
        counter = self._counters.get((endpoint, status, reason))
        if counter is None:  # labels() takes a lock and builds a key: once per label set, not once per job
            counter = self._counters[(endpoint, status, reason)] = self.finished.labels(endpoint, status, reason)
        counter.inc()
        if view.delay_time_ms is not None:
            self._child(self.delay, self._delays, endpoint).observe(view.delay_time_ms / 1000)
        if view.execution_time_ms is not None:
            self._child(self.execution, self._executions, endpoint).observe(view.execution_time_ms / 1000)
        for phase, seconds in (view.cold_start or {}).items():  # a job that waited on a cold start: its phases
            self.cold_start.labels(endpoint, phase).observe(seconds)

    @staticmethod
    def _child(histogram: Histogram, cache: dict[str, Histogram], endpoint: str) -> Histogram:
        child = cache.get(endpoint)
        if child is None:
            child = cache[endpoint] = histogram.labels(endpoint)
        return child

    def close(self) -> None:
        """Stop observing the plane's jobs."""
        self._unsubscribe()

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric; call it on the plane's event loop."""
        return generate_latest(self.registry)


def metrics_route(metrics: PlaneMetrics) -> Route:
    """``GET /metrics`` in Prometheus' text format: every endpoint's, so the access rule's ``ADMIN``
    (``api/guard.py``)."""

    async def get_metrics(request: Request) -> Response:
        # async: the collector reads the plane's state, which only its event loop may touch
        try:
            authorize(request, Operation.ADMIN, None, None)
        except HTTPException:
            return error_response(401, "unauthorized", "send the API key as Authorization: Bearer KEY")
        except ForbiddenError as exc:
            return error_response(403, "forbidden", str(exc))
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return Route("/metrics", get_metrics, methods=["GET"])
