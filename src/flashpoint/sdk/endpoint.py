"""The ``Endpoint`` decorator: a validated, frozen spec plus a handle that submits jobs and waits for them.

``Endpoint(...)`` does no I/O. The first call binds the handle to a control plane: an embedded one started in this
process, or the server named by ``FLASHPOINT_URL``. The handles a decorated function or class becomes live in
``handles.py``; ``Endpoint(id=...)`` (a client of a served endpoint) and ``worker_command=`` endpoints live here.
"""

from __future__ import annotations

import difflib
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, NoReturn, ParamSpec, Protocol, TypeVar, overload

from flashpoint.errors import InvalidEndpointError
from flashpoint.jobs import JobView
from flashpoint.sdk.connection import Connection, ServerConnection
from flashpoint.sdk.default_connection import connect
from flashpoint.sdk.endpointclient import ClientMethods
from flashpoint.sdk.endpointjob import EndpointJob, run_job, runsync_job, with_webhook
from flashpoint.sdk.handles import Bound, EndpointClass, EndpointFunction, EndpointInstance, MethodCall, join
from flashpoint.sdk.jobhandle import JobHandle
from flashpoint.sdk.routes import RouteMethods
from flashpoint.spec import (
    NAME,
    OPTIONS,
    EndpointSpec,
    ServerlessScalerType,
    WorkerTarget,
    build_spec,
    invalid,
    public_methods,
)

__all__ = [
    "Connection",
    "Endpoint",
    "EndpointClass",
    "EndpointClient",
    "EndpointCommand",
    "EndpointFunction",
    "EndpointInstance",
    "EndpointSpec",
    "JobHandle",
    "MethodCall",
    "ServerConnection",
    "ServerlessScalerType",
    "WorkerTarget",
]

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C")
#: a generator's chunk
Y = TypeVar("Y")
_C_co = TypeVar("_C_co", covariant=True)


class _ClassObject(Protocol[P, _C_co]):
    """A class (not a function): called with its constructor's parameters ``P``, it makes a ``_C_co``. ``mro`` is
    what a class has and a function has not, which lets ``Endpoint.__call__`` tell the two apart in its overloads."""

    def mro(self) -> list[type]: ...
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> _C_co: ...


# --------------------------------------------------------------------------------------------------------------------
# The decorator


class Endpoint(RouteMethods):
    """Declare a GPU (or CPU) endpoint; use it as a decorator on an ``async def``, a ``def`` or a class, or declare
    HTTP routes on it (``api = Endpoint(name="my-api", ...)``, then ``@api.post("/path")``: see ``routes.py``).

    Args:
        name: endpoint name, unique per control plane; by default the decorated function's or class's ``__name__``,
            as in Flash.
        gpu: a ``GpuType``, a ``GpuGroup``, a string, or a list of them: an ordered fallback, kept as written.
            Defaults to ``GpuGroup.ANY``.
        cpu: a ``CpuInstanceType`` (or its string, ``"cpu3c-2-4"``) or a list of them, an ordered fallback; mutually
            exclusive with ``gpu``. A CPU worker gets no GPUs and reserves its instance's vCPUs and memory on its node.
        gpu_count: GPUs per worker, all of one model on one node.
        workers: ``N`` (meaning ``(0, N)``) or ``(min, max)``; min workers are kept warm.
        idle_timeout: seconds an idle worker above the minimum lives before it stops, or ``"auto"``: a window sized
            from the endpoint's own idle gaps and cold starts, which may also warm a worker just before a predicted
            arrival (``flashpoint explain`` says the window in force and why).
        execution_timeout_ms: a job running longer ends ``TIMED_OUT``; 0 means no limit.
        max_concurrency: jobs one worker runs at once (async handlers overlap).
        env: extra environment variables for the workers.
        dependencies, system_dependencies: what the workers need: pip requirements installed in a cached environment
            of the endpoint's own (unless this environment already satisfies them); Debian packages checked on the
            node.
        scaler_type, scaler_value: ``QUEUE_DELAY`` (seconds) or ``REQUEST_COUNT`` (jobs per worker), as in Flash.
        target_latency_ms, target_concurrency, scaler: flashpoint's scalers instead (one of them): a p95 request
            time for an HTTP-route endpoint, requests or jobs per worker, or ``fn(metrics) -> workers`` (the embedded
            plane only); ``workers_schedule={"0 9 * * 1-5": 2, "0 18 * * 1-5": 0}``: minimums on cron times (UTC).
        priority, preemptible, placement: a shared fleet's class (``"high"``, ``"normal"``, ``"low"``), whether a
            higher class may stop its running workers, and ``"pack"`` or ``"spread"`` for its workers' nodes.
        datacenter: a ``DataCenter`` (or a label of your own) or a list: only nodes whose ``datacenter`` label
            matches; ignored on a fleet without such labels.
        min_cuda_version: a ``CudaVersion`` or ``"12.8"``: nodes whose driver's CUDA is older are no candidates.
        volume: a ``NetworkVolume`` or a list: a persistent host directory, at ``/runpod-volume`` where possible and
            always in ``FLASHPOINT_VOLUME_PATH``.
        template: a ``PodTemplate``: its ``env`` reaches the workers; image, disk and ports are cloud-only (recorded).
        flashboot, accelerate_downloads: Runpod cloud settings, accepted and recorded, with no local effect.
        image: refused: run a prebuilt worker with ``worker_command=[...]`` instead.

    ``Endpoint(id="NAME")``, with no other option, is instead an ``EndpointClient`` of the endpoint NAME served by
    the flashpoint server at ``FLASHPOINT_URL``, as Flash's ``Endpoint(id=...)``.

    Raises:
        InvalidEndpointError: at decoration time, with what to do instead.

    Example:
        >>> @Endpoint(name="inference", gpu=GpuGroup.AMPERE_80)
        ... async def infer(data: dict) -> dict:
        ...     return {"ok": True}
    """

    spec: EndpointSpec

    # Validation happens in __new__ (there is no __init__) so that Endpoint(id=...) can be typed as an EndpointClient.
    @overload
    def __new__(cls, name: None = None, /, *, id: str) -> EndpointClient: ...
    # an Endpoint with worker_command is a handle of its own kind, not a decorator (mypy wants __new__ to return a
    # subtype; this overload says what the call really gives)
    @overload
    def __new__(  # type: ignore[misc]
        cls, name: Any = None, /, *, worker_command: Sequence[str], **options: Any
    ) -> EndpointCommand: ...
    @overload
    def __new__(cls, name: Any = None, /, **options: Any) -> Endpoint: ...
    def __new__(cls, name: Any = None, /, **options: Any) -> Any:
        if callable(name) and not isinstance(name, str):
            raise InvalidEndpointError(
                "Did you forget parentheses? Use @Endpoint(name='my-endpoint', gpu=GpuGroup.ANY), not a bare @Endpoint"
            )
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            hints = []
            for option in unknown:
                close = difflib.get_close_matches(option, OPTIONS, n=1)
                hints.append(f"{option!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise InvalidEndpointError(f"Endpoint: unknown option {', '.join(hints)}; accepted: {', '.join(OPTIONS)}")
        if name is not None:
            if "name" in options:
                raise InvalidEndpointError("Endpoint: name given twice, positionally and as name=; keep one")
            options["name"] = name
        if options.get("image") is not None:
            raise InvalidEndpointError(
                f"Endpoint: image={options['image']!r} deploys a container image in Runpod's cloud; flashpoint runs "
                "workers on your own machines: run the image's worker as a local command with "
                "worker_command=[...], e.g. Endpoint(name='vllm', gpu=GpuGroup.ANY, worker_command=['python', "
                "'-m', 'my_handler']) (any program speaking Runpod's worker protocol, such as a "
                "runpod.serverless.start handler)"
            )
        options.pop("image", None)
        if options.get("id") is not None:
            return _client_for(options)
        options.pop("id", None)
        if options.get("worker_command") is not None:
            return _command_for(options)
        options.pop("worker_command", None)
        if options.pop("worker_cwd", None) is not None:
            raise InvalidEndpointError(
                "Endpoint: worker_cwd is the working directory of worker_command; give worker_command too"
            )
        self = super().__new__(cls)
        self.spec = build_spec(options, named_later=True)
        self._scaler_given = "scaler_type" in options  # routes default to REQUEST_COUNT unless it was given
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle and copy would call __new__ without the options it validates; rebuild from the spec instead
        return _endpoint_with_spec, (self.spec,)

    # How a decorated function or class is typed (handles.py): a class keeps its constructor's parameters; a function
    # keeps its parameters, and its result is what ``await fn(...)`` gives: an ``async def``'s result, a ``def``'s
    # return value (awaited too: the call is remote), a generator's chunks as a list. A class is also a callable that
    # returns an awaitable or any R, so mypy sees the first overload overlap the others; it comes first to win.
    @overload
    def __call__(self, target: _ClassObject[P, C]) -> EndpointClass[P, C]: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, target: Callable[P, AsyncIterator[Y]]) -> EndpointFunction[P, list[Y]]: ...
    @overload
    def __call__(self, target: Callable[P, Iterator[Y]]) -> EndpointFunction[P, list[Y]]: ...
    @overload
    def __call__(self, target: Callable[P, Awaitable[R]]) -> EndpointFunction[P, R]: ...
    @overload
    def __call__(self, target: Callable[P, R]) -> EndpointFunction[P, R]: ...
    def __call__(self, target: Any) -> Any:
        self._queue_target(target)  # an endpoint with routes decorates nothing; one that decorates takes no routes
        spec = self.spec if self.spec.name else _named_after(self.spec, target)
        if inspect.isclass(target):
            methods = public_methods(target)
            if not methods:
                raise invalid(
                    spec.name,
                    f"class {target.__name__} has no public method to call; add e.g. "
                    "`async def predict(self, data): ...`",
                )
            return join(EndpointClass(_replace(spec, kind="class", methods=methods), target))
        if inspect.isfunction(target) or inspect.iscoroutinefunction(target) or inspect.ismethod(target):
            return join(EndpointFunction(spec, target))
        raise invalid(spec.name or None, f"@Endpoint decorates a function or a class, not {type(target).__name__}")


def _named_after(spec: EndpointSpec, target: Any) -> EndpointSpec:
    """An ``@Endpoint(...)`` without ``name=`` is named after what it decorates, as Flash names it."""
    derived = getattr(target, "__name__", None)
    if not isinstance(derived, str) or not NAME.match(derived):
        raise invalid(None, f"cannot name an endpoint after {target!r}; pass name='...'")
    return _replace(spec, name=derived)


def _endpoint_with_spec(spec: EndpointSpec) -> Endpoint:
    endpoint = object.__new__(Endpoint)
    endpoint.spec = spec
    return endpoint


def _replace(spec: EndpointSpec, **changes: Any) -> EndpointSpec:
    import dataclasses

    return dataclasses.replace(spec, **changes)


# --------------------------------------------------------------------------------------------------------------------
# Endpoint(id=...): a client of a served endpoint


def _client_for(options: dict[str, Any]) -> EndpointClient:
    endpoint_id = options.pop("id")
    if options:
        raise InvalidEndpointError(
            "Endpoint(id=...) connects to an endpoint served by a flashpoint server (FLASHPOINT_URL); the other "
            f"options ({', '.join(sorted(options))}) belong to that server's @Endpoint declaration: "
            f"write Endpoint(id={endpoint_id!r}) alone"
        )
    if not isinstance(endpoint_id, str) or not NAME.match(endpoint_id):
        raise InvalidEndpointError(
            "Endpoint(id=...) takes the name of the served endpoint (letters, digits, '.', '_' or '-'), "
            f"e.g. Endpoint(id='inference'); got {endpoint_id!r}"
        )
    return EndpointClient(endpoint_id)


class EndpointClient(ClientMethods, Endpoint):
    """``Endpoint(id="NAME")``: a client of the endpoint NAME served by the flashpoint server at ``FLASHPOINT_URL``,
    in Runpod Flash's shapes.

    ``await ep.run(input_data, webhook=None)`` and ``await ep.runsync(input_data, timeout=60.0)`` return an
    ``EndpointJob``; ``await ep.cancel(job_id)`` too. The input is sent as the job's input as it is (the served
    function's keyword arguments as a JSON object). ``await ep.get/post/put/delete/patch(path, data)`` call the
    endpoint's HTTP routes. flashpoint's own: ``ep.job(id)``, ``ep.stream(input_data)``, ``await ep.explain()``.
    Nothing happens until the first call, which checks that the server serves NAME.

    Example:
        >>> ep = Endpoint(id="inference")
        >>> job = await ep.runsync({"prompt": "a red fox"})
        >>> job.output, job.error
    """

    def __new__(cls, id: str) -> EndpointClient:
        self = object.__new__(cls)
        self.id = id
        self._conn = None
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # a function that calls another endpoint carries its client: by name only, the connection stays behind
        return EndpointClient, (self.id,)

    def __call__(self, target: Any) -> NoReturn:
        raise InvalidEndpointError(
            f"Endpoint(id={self.id!r}) is a client of a served endpoint and cannot decorate "
            f"{getattr(target, '__name__', type(target).__name__)}; declare endpoints with @Endpoint(name=..., gpu=...)"
        )

    def __repr__(self) -> str:
        return f"<Endpoint id={self.id!r} (served)>"


def _command_for(options: dict[str, Any]) -> EndpointCommand:
    command, cwd = options.pop("worker_command"), options.pop("worker_cwd", None)
    name = options.get("name")
    if isinstance(command, str) or not isinstance(command, Sequence) or not command:
        raise invalid(name, f"worker_command must be a list of strings, e.g. ['python', 'handler.py']; got {command!r}")
    if not all(isinstance(part, str) and part for part in command):
        raise invalid(name, f"worker_command must hold non-empty strings only, got {command!r}")
    if cwd is not None and not isinstance(cwd, str | os.PathLike):
        raise invalid(name, f"worker_cwd must be a directory path, got {cwd!r}")
    spec = _replace(build_spec(options), kind="command")
    return EndpointCommand(spec, WorkerTarget(command=tuple(command), cwd=None if cwd is None else os.fspath(cwd)))


class EndpointCommand(Bound):
    """``Endpoint(name=..., gpu=..., worker_command=[...])``: workers run a command of your own, such as an unmodified
    ``runpod.serverless.start`` handler, placed, scaled and explained like any endpoint.

    The command's workers pull jobs with Runpod's worker protocol (flashpoint sets every ``RUNPOD_*`` variable they
    read). A command starting with ``python`` runs under the control plane's own interpreter. Calls take the job's
    input as it is: ``await ep.run({...})``, ``await ep.runsync({...})``.

    Example:
        >>> handler = Endpoint(name="sdxl", gpu=GpuGroup.ADA_24, worker_command=["python", "handler.py"])
        >>> job = await handler.run({"prompt": "a red fox"})
    """

    def __init__(self, spec: EndpointSpec, target: WorkerTarget) -> None:
        super().__init__(spec, target)

    def worker_target(self) -> WorkerTarget:
        target: WorkerTarget = self._target_obj
        return target

    def __reduce__(self) -> tuple[Any, ...]:
        return EndpointCommand, (self.spec, self._target_obj)

    def __call__(self, target: Any) -> NoReturn:
        raise InvalidEndpointError(
            f"Endpoint {self.spec.name!r} runs worker_command and cannot decorate "
            f"{getattr(target, '__name__', type(target).__name__)}; assign it instead: "
            f"handler = Endpoint(name={self.spec.name!r}, ..., worker_command=[...])"
        )

    async def run(self, input_data: Any, *, webhook: str | None = None) -> EndpointJob:
        """Submit a job with ``input_data`` as its input, as it is, and return it as soon as it is queued (as Flash's
        ``image=`` endpoints do). ``webhook`` needs a flashpoint server (``FLASHPOINT_URL``)."""
        conn = await self._connect()
        return await run_job(conn, self.spec.name, input_data, with_webhook(conn, {}, webhook))

    async def runsync(self, input_data: Any, timeout: float | None = 60.0) -> EndpointJob:
        """Submit a job and wait for it to end; the job (``output``, or ``error``: it does not raise).

        Raises:
            TimeoutError: ``timeout`` seconds passed first (None: no limit); the job goes on.
        """
        conn = await self._connect()
        return await runsync_job(conn, self.spec.name, input_data, {}, timeout)

    def stream(self, input_data: Any) -> AsyncIterator[Any]:
        """Run a job of a generator handler and yield its chunks as they are produced."""
        return self._stream(input_data, {})

    def job(self, job_id: str) -> EndpointJob:
        """A job of this endpoint by its id (connected on its first call)."""
        return EndpointJob(self._conn if self._conn is not None else connect(), JobView.queued(job_id, self.spec.name))

    async def cancel(self, job_id: str) -> EndpointJob:
        """Cancel a job (queued or running) and return it; a finished job is left as it is."""
        conn = await self._connect()
        return await EndpointJob(conn, JobView.queued(job_id, self.spec.name)).cancel()

    def __repr__(self) -> str:
        command = " ".join(self._target_obj.command)
        return f"<Endpoint {self.spec.name!r} command {command!r} gpu={self.spec.describe_gpu()}>"
