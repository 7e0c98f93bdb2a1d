"""The ``Endpoint`` decorator: a validated, frozen spec plus a handle that submits jobs and waits for them.

``Endpoint(...)`` does no I/O. The first call binds the handle to a control plane: an embedded one started in this
process, or the server named by ``FLASHPOINT_URL``.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import inspect
import math
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload, runtime_checkable

from flashpoint import codec
from flashpoint.config import Settings
from flashpoint.errors import (
    ConfigError,
    InvalidEndpointError,
    JobCancelledError,
    JobFailedError,
    JobTimeoutError,
    UnknownGPUError,
)
from flashpoint.gpus import Candidate, GpuGroup, candidates, describe
from flashpoint.jobs import JobStatus, JobView

if TYPE_CHECKING:
    from flashpoint.explain import Explanation

T = TypeVar("T")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_OPTIONS = (
    "name",
    "id",
    "gpu",
    "cpu",
    "gpu_count",
    "workers",
    "idle_timeout",
    "execution_timeout_ms",
    "max_concurrency",
    "env",
    "dependencies",
    "system_dependencies",
    "scaler_type",
    "scaler_value",
    "worker_command",
    "worker_cwd",
)


class ServerlessScalerType(str, Enum):
    """How an endpoint adds workers, as in Flash."""

    #: add a worker when the oldest queued job has waited ``scaler_value`` seconds (the first one at once)
    QUEUE_DELAY = "QUEUE_DELAY"
    #: keep about ``(queued + running jobs) / scaler_value`` workers
    REQUEST_COUNT = "REQUEST_COUNT"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """Everything the control plane needs to know about an endpoint; validated at decoration time."""

    name: str
    #: ordered GPU candidates (empty for cpu endpoints)
    candidates: tuple[Candidate, ...]
    cpu: str | None = None
    gpu_count: int = 1
    workers_min: int = 0
    workers_max: int = 1
    idle_timeout_s: float = 60.0
    execution_timeout_ms: int = 0
    max_concurrency: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    dependencies: tuple[str, ...] = ()
    system_dependencies: tuple[str, ...] = ()
    scaler_type: ServerlessScalerType = ServerlessScalerType.QUEUE_DELAY
    scaler_value: int = 4
    #: "function" or "class"
    kind: str = "function"
    #: public method names of a class endpoint, in definition order
    methods: tuple[str, ...] = ()

    @property
    def uses_gpu(self) -> bool:
        return self.cpu is None

    def describe_gpu(self) -> str:
        if not self.uses_gpu:
            return f"cpu={self.cpu}"
        return " > ".join(describe(c) for c in self.candidates) + (
            f" (x{self.gpu_count})" if self.gpu_count > 1 else ""
        )


@dataclass(frozen=True, slots=True)
class WorkerTarget:
    """How a worker runs the endpoint: flashpoint's runtime importing it by path or loading cloudpickle bytes, or
    a command of the user's own (e.g. an unmodified ``runpod.serverless.start`` handler) run in ``cwd``."""

    import_path: str | None = None
    pickled: bytes | None = None
    command: tuple[str, ...] | None = None
    cwd: str | None = None


class Connection(Protocol):
    """What a handle needs from a control plane; the embedded plane and the HTTP client both provide it."""

    async def register(self, spec: EndpointSpec, target: WorkerTarget) -> None: ...
    async def submit(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView: ...
    async def call(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> JobView: ...
    async def get(self, job_id: str) -> JobView: ...
    async def wait(self, job_id: str, timeout: float | None) -> JobView: ...
    async def cancel(self, job_id: str) -> JobView: ...
    async def explain_job(self, job_id: str) -> Explanation: ...
    async def explain_endpoint(self, name: str) -> Explanation: ...
    # declared with `def`: implementations are async generators (`async def ...: yield chunk`)
    def stream(self, endpoint: str, payload: Any, extra: dict[str, Any]) -> AsyncIterator[Any]:
        """Submit a job to a generator endpoint and yield its decoded chunks; JobFailedError if it fails."""
        ...


@runtime_checkable
class ServerConnection(Connection, Protocol):
    """A connection to a flashpoint server (``FLASHPOINT_URL``), which ``Endpoint(id=...)`` clients need."""

    async def check_endpoint(self, name: str) -> None: ...


def _connection() -> Connection:
    # The one seam where the SDK reaches the composition root: imported lazily so that `import flashpoint` stays
    # cheap and free of the HTTP stack.
    from flashpoint.server import connection  # noqa: TID251

    return connection()


# --------------------------------------------------------------------------------------------------------------------
# Validation


def _fail(name: str | None, message: str) -> InvalidEndpointError:
    return InvalidEndpointError(f"Endpoint {name!r}: {message}" if name else f"Endpoint: {message}")


def _int(name: str | None, option: str, value: Any, *, minimum: int, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, f"{option} must be an integer, got {value!r}; e.g. {example}")
    if value < minimum:
        raise _fail(name, f"{option} must be >= {minimum}, got {value}; e.g. {example}")
    return value


def _workers(name: str | None, value: Any) -> tuple[int, int]:
    if isinstance(value, tuple | list) and len(value) == 2:
        low = _int(name, "workers min", value[0], minimum=0, example="workers=(0, 4)")
        high = _int(name, "workers max", value[1], minimum=1, example="workers=(0, 4)")
        if low > high:
            raise _fail(name, f"workers=({low}, {high}): min is greater than max; write workers=({high}, {low})?")
        return low, high
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, f"workers must be N or (min, max), got {value!r}; e.g. workers=2 or workers=(0, 4)")
    return 0, _int(name, "workers", value, minimum=1, example="workers=2 (up to two workers)")


def _strings(name: str | None, option: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) and v for v in value):
        raise _fail(name, f"{option} must be a list of strings, e.g. {option}=['numpy>=1.26']; got {value!r}")
    return tuple(value)


def _build_spec(options: dict[str, Any]) -> EndpointSpec:
    name = options.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise _fail(
            None,
            f"name must be a non-empty string of letters, digits, '.', '_' or '-' (at most 128), got {name!r}; "
            "e.g. @Endpoint(name='inference', gpu=GpuGroup.ANY)",
        )
    gpu, cpu = options.get("gpu"), options.get("cpu")
    if gpu is not None and cpu is not None:
        raise _fail(name, "gpu and cpu are mutually exclusive: pass gpu=... for a GPU worker or cpu=... for a CPU one")
    if cpu is not None and (not isinstance(cpu, str) or not cpu):
        raise _fail(name, f"cpu must be a CPU instance type string, e.g. cpu='cpu3c-1-2'; got {cpu!r}")
    try:
        ordered = candidates(GpuGroup.ANY if gpu is None else gpu) if cpu is None else ()
    except UnknownGPUError as exc:
        raise UnknownGPUError(f"Endpoint {name!r}: {exc}", name=exc.name, suggestions=exc.suggestions) from None
    except InvalidEndpointError as exc:
        raise _fail(name, str(exc)) from None
    gpu_count = _int(name, "gpu_count", options.get("gpu_count", 1), minimum=1, example="gpu_count=2")
    if cpu is not None and "gpu_count" in options and gpu_count != 1:
        raise _fail(name, "gpu_count needs a GPU endpoint; drop gpu_count or replace cpu=... with gpu=...")
    low, high = _workers(name, options.get("workers", (0, 1)))
    idle = options.get("idle_timeout", 60)
    if isinstance(idle, bool) or not isinstance(idle, int | float) or not math.isfinite(idle) or idle < 0:
        raise _fail(name, f"idle_timeout must be seconds >= 0, got {idle!r}; e.g. idle_timeout=60")
    timeout_ms = _int(
        name,
        "execution_timeout_ms",
        options.get("execution_timeout_ms", 0),
        minimum=0,
        example="execution_timeout_ms=600_000 (10 minutes; 0 means no limit)",
    )
    concurrency = _int(
        name, "max_concurrency", options.get("max_concurrency", 1), minimum=1, example="max_concurrency=4"
    )
    env = options.get("env")
    env = {} if env is None else env
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise _fail(name, f"env must map strings to strings, e.g. env={{'HF_HOME': '/data'}}; got {env!r}")
    scaler = options.get("scaler_type", ServerlessScalerType.QUEUE_DELAY)
    try:
        scaler_type = ServerlessScalerType(str(scaler).upper())
    except ValueError:
        raise _fail(name, f"scaler_type must be 'QUEUE_DELAY' or 'REQUEST_COUNT', got {scaler!r}") from None
    scaler_value = _int(name, "scaler_value", options.get("scaler_value", 4), minimum=1, example="scaler_value=4")
    return EndpointSpec(
        name=name,
        candidates=ordered,
        cpu=cpu,
        gpu_count=gpu_count,
        workers_min=low,
        workers_max=high,
        idle_timeout_s=float(idle),
        execution_timeout_ms=timeout_ms,
        max_concurrency=concurrency,
        env=dict(env),
        dependencies=_strings(name, "dependencies", options.get("dependencies")),
        system_dependencies=_strings(name, "system_dependencies", options.get("system_dependencies")),
        scaler_type=scaler_type,
        scaler_value=scaler_value,
    )


def public_methods(cls: type) -> tuple[str, ...]:
    """The callable public methods a class endpoint exposes, in definition order."""
    return tuple(attr for attr, value in vars(cls).items() if not attr.startswith("_") and inspect.isfunction(value))


def _target_for(obj: Any) -> WorkerTarget:
    """Import by path when the worker can import the defining module; otherwise ship the code with cloudpickle."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if module and module != "__main__" and "<locals>" not in qualname:
        return WorkerTarget(import_path=f"{module}:{qualname}")
    import cloudpickle

    return WorkerTarget(pickled=cloudpickle.dumps(obj))


# --------------------------------------------------------------------------------------------------------------------
# Handles


class Endpoint:
    """Declare a GPU (or CPU) endpoint; use it as a decorator on an ``async def``, a ``def`` or a class.

    Args:
        name: endpoint name, unique per control plane.
        gpu: a ``GpuType``, a ``GpuGroup``, a string, or a list of them: an ordered fallback, kept as written.
            Defaults to ``GpuGroup.ANY``.
        cpu: a CPU instance type string; mutually exclusive with ``gpu``. CPU endpoints get no GPUs.
        gpu_count: GPUs per worker, all of one model on one node.
        workers: ``N`` (meaning ``(0, N)``) or ``(min, max)``; min workers are kept warm.
        idle_timeout: seconds an idle worker above the minimum lives before it stops.
        execution_timeout_ms: a job running longer ends ``TIMED_OUT``; 0 means no limit.
        max_concurrency: jobs one worker runs at once (async handlers overlap).
        env: extra environment variables for the workers.
        dependencies, system_dependencies: what the workers need; checked in the worker's environment.
        scaler_type, scaler_value: ``QUEUE_DELAY`` (seconds) or ``REQUEST_COUNT`` (jobs per worker), as in Flash.

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
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            hints = []
            for option in unknown:
                close = difflib.get_close_matches(option, _OPTIONS, n=1)
                hints.append(f"{option!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise InvalidEndpointError(f"Endpoint: unknown option {', '.join(hints)}; accepted: {', '.join(_OPTIONS)}")
        if name is not None:
            if "name" in options:
                raise InvalidEndpointError("Endpoint: name given twice, positionally and as name=; keep one")
            options["name"] = name
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
        self.spec = _build_spec(options)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle and copy would call __new__ without the options it validates; rebuild from the spec instead
        return _endpoint_with_spec, (self.spec,)

    def __call__(self, target: Any) -> Any:
        if inspect.isclass(target):
            methods = public_methods(target)
            if not methods:
                raise _fail(
                    self.spec.name,
                    f"class {target.__name__} has no public method to call; add e.g. "
                    "`async def predict(self, data): ...`",
                )
            spec = _replace(self.spec, kind="class", methods=methods)
            return EndpointClass(spec, target)
        if inspect.isasyncgenfunction(target) or inspect.isgeneratorfunction(target):
            return EndpointFunction(self.spec, target)
        if inspect.isfunction(target) or inspect.iscoroutinefunction(target) or inspect.ismethod(target):
            return EndpointFunction(self.spec, target)
        raise _fail(self.spec.name, f"@Endpoint decorates a function or a class, not {type(target).__name__}")


def _endpoint_with_spec(spec: EndpointSpec) -> Endpoint:
    endpoint = object.__new__(Endpoint)
    endpoint.spec = spec
    return endpoint


def _replace(spec: EndpointSpec, **changes: Any) -> EndpointSpec:
    import dataclasses

    return dataclasses.replace(spec, **changes)


class _Bound:
    """Shared plumbing: bind once to a control plane, submit payloads, wrap results."""

    spec: EndpointSpec
    _target_obj: Any

    def __init__(self, spec: EndpointSpec, target: Any) -> None:
        self.spec = spec
        self._target_obj = target
        self._conn: Connection | None = None
        self._lock: asyncio.Lock | None = None

    async def _connect(self) -> Connection:
        conn = self._conn
        if conn is not None and not getattr(conn, "closed", False):
            return conn
        conn = _connection()
        await conn.register(self.spec, self.worker_target())
        self._conn = conn
        return conn

    def worker_target(self) -> WorkerTarget:
        """How a worker runs this endpoint."""
        return _target_for(self._target_obj)

    async def _submit(self, payload: Any, extra: dict[str, Any]) -> JobHandle:
        conn = await self._connect()
        view = await conn.submit(self.spec.name, payload, extra)
        return JobHandle(conn, view)

    async def _call(self, payload: Any, extra: dict[str, Any]) -> Any:
        conn = await self._connect()
        view = await conn.call(self.spec.name, payload, extra)
        return _result(view)

    async def explain(self) -> Explanation:
        """Why this endpoint's jobs wait (or that they don't), per GPU candidate."""
        conn = await self._connect()
        return await conn.explain_endpoint(self.spec.name)

    async def _stream(self, payload: Any, extra: dict[str, Any]) -> AsyncIterator[Any]:
        conn = await self._connect()
        async for chunk in _closing(conn.stream(self.spec.name, payload, extra)):
            yield chunk


async def _closing(chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Yield from ``chunks`` and close them (an async generator) when the consumer stops early."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


def _extra(init: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"binary_ok": True}
    if init is not None:
        meta["init"] = init
    return {"flashpoint": meta}


class EndpointFunction(_Bound, Generic[T]):
    """A decorated function: ``await fn(...)`` runs it remotely; ``await fn.run(...)`` returns a job handle."""

    def __init__(self, spec: EndpointSpec, fn: Callable[..., Any]) -> None:
        super().__init__(spec, fn)
        self.__wrapped__ = fn
        self._signature = inspect.signature(fn)
        functools.update_wrapper(self, fn)

    def _payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.spec.name}{self._signature}: {exc}") from None
        return _encode_bound(bound)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call(self._payload(args, kwargs), _extra())

    async def run(self, *args: Any, **kwargs: Any) -> JobHandle:
        """Submit a job and return its handle as soon as it is queued."""
        return await self._submit(self._payload(args, kwargs), _extra())

    def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Run a generator endpoint and yield its chunks as the worker produces them: ``async for x in fn.stream()``.

        Raises:
            TypeError: at once, if the endpoint is not a generator (``async def`` with ``yield``, or ``def`` with
                ``yield``), or the arguments do not fit its signature.
            JobFailedError: while iterating, if the job fails (after the chunks streamed before the failure).
        """
        fn = self.__wrapped__
        if not (inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn)):
            raise TypeError(
                f"endpoint {self.spec.name!r} ({fn.__name__}) returns one result and does not stream; "
                f"use `await {fn.__name__}(...)`, or make it a generator (`yield` each chunk) to stream"
            )
        return self._stream(self._payload(args, kwargs), _extra())

    def local(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function in this process, with no scheduler: for the user's own unit tests."""
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Endpoint {self.spec.name!r} gpu={self.spec.describe_gpu()}>"


def _encode_bound(bound: inspect.BoundArguments) -> Any:
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for param_name, value in bound.arguments.items():
        kind = bound.signature.parameters[param_name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(value)
        elif kind is inspect.Parameter.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[param_name] = value
    return codec.encode_call(tuple(args), kwargs)


class EndpointClass(_Bound):
    """A decorated class: ``Model(...)`` gives an instance handle whose methods run on a warm worker instance."""

    def __init__(self, spec: EndpointSpec, cls: type) -> None:
        super().__init__(spec, cls)
        self.__wrapped__ = cls
        functools.update_wrapper(self, cls, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> EndpointInstance:
        init = None if not args and not kwargs else codec.encode_call(args, kwargs)
        return EndpointInstance(self, init)

    def __repr__(self) -> str:
        return f"<Endpoint {self.spec.name!r} class {self.__wrapped__.__name__} gpu={self.spec.describe_gpu()}>"


class EndpointInstance:
    """``Model(...)``: constructor arguments travel to the worker, which keeps one instance per distinct set."""

    def __init__(self, owner: EndpointClass, init: Any) -> None:
        self._owner = owner
        self._init = init

    def __getattr__(self, method: str) -> MethodCall:
        if method not in self._owner.spec.methods:
            raise AttributeError(
                f"{self._owner.__wrapped__.__name__} endpoint has no public method {method!r}; "
                f"methods: {', '.join(self._owner.spec.methods)}"
            )
        return MethodCall(self._owner, self._init, method)


class MethodCall:
    """One public method of a class endpoint instance."""

    def __init__(self, owner: EndpointClass, init: Any, method: str) -> None:
        self._owner = owner
        self._init = init
        self._method = method
        self._signature = inspect.signature(getattr(owner.__wrapped__, method))

    def _payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            bound = self._signature.bind(None, *args, **kwargs)  # None stands in for self
        except TypeError as exc:
            raise TypeError(f"{self._owner.spec.name}.{self._method}: {exc}") from None
        bound.arguments.pop(next(iter(self._signature.parameters)))
        payload = _encode_bound(bound)
        if len(self._owner.spec.methods) > 1:
            payload["method"] = self._method  # DESIGN.md §1: with several methods, the input names one
        return payload

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return await self._owner._call(self._payload(args, kwargs), _extra(self._init))

    async def run(self, *args: Any, **kwargs: Any) -> JobHandle:
        return await self._owner._submit(self._payload(args, kwargs), _extra(self._init))


# --------------------------------------------------------------------------------------------------------------------
# Job handles


def _result(view: JobView) -> Any:
    if view.status is JobStatus.COMPLETED:
        return codec.decode_value(view.output)
    raise _failure(view)


def _failure(view: JobView) -> JobFailedError:
    error = view.error
    reason = view.reason.value if view.reason else None
    kind: type[JobFailedError] = JobFailedError
    if view.status is JobStatus.CANCELLED:
        kind = JobCancelledError
    elif view.status is JobStatus.TIMED_OUT:
        kind = JobTimeoutError
    head = f"job {view.id} on endpoint {view.endpoint!r} ended {view.status.value}"
    if reason:
        head += f" ({reason})"
    if error is not None:
        head += f": {error.type}: {error.message}"
    return kind(
        head,
        job_id=view.id,
        status=view.status.value,
        reason=reason,
        remote_type=error.type if error else None,
        remote_message=error.message if error else None,
        remote_traceback=error.traceback if error else None,
    )


class JobHandle:
    """A submitted job: ``id``, ``await status()``, ``await wait()``, ``output``, ``error``, ``await cancel()``."""

    def __init__(self, conn: Connection, view: JobView) -> None:
        self._conn = conn
        self._view = view

    @property
    def id(self) -> str:
        return self._view.id

    @property
    def view(self) -> JobView:
        """The last snapshot fetched: delay and execution time, worker id, placement, reason, retries."""
        return self._view

    @property
    def output(self) -> Any:
        """The output once COMPLETED (after ``wait()`` or ``status()``), else None."""
        if self._view.status is JobStatus.COMPLETED:
            return codec.decode_value(self._view.output)
        return None

    @property
    def error(self) -> JobFailedError | None:
        """The failure once the job ended without output, else None."""
        if self._view.status.terminal and self._view.status is not JobStatus.COMPLETED:
            return _failure(self._view)
        return None

    async def status(self) -> str:
        """The job's status now: "IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELLED" or "TIMED_OUT"."""
        self._view = await self._conn.get(self.id)
        return self._view.status.value

    async def wait(self, timeout: float | None = None) -> str:
        """Wait until the job ends and return its final status; ``TimeoutError`` if ``timeout`` seconds pass first."""
        self._view = await self._conn.wait(self.id, timeout)
        return self._view.status.value

    async def result(self, timeout: float | None = None) -> Any:
        """Wait and return the output, or raise ``JobFailedError`` (with the remote type and traceback)."""
        await self.wait(timeout)
        return _result(self._view)

    async def cancel(self) -> str:
        """Cancel the job (queued or running) and return its status; finished jobs are left as they are."""
        self._view = await self._conn.cancel(self.id)
        return self._view.status.value

    async def explain(self) -> Explanation:
        """Why the job waits: its queue position and a reason per GPU candidate."""
        return await self._conn.explain_job(self.id)

    def __repr__(self) -> str:
        return f"<Job {self.id} {self._view.status.value}>"


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
    if not isinstance(endpoint_id, str) or not _NAME.match(endpoint_id):
        raise InvalidEndpointError(
            "Endpoint(id=...) takes the name of the served endpoint (letters, digits, '.', '_' or '-'), "
            f"e.g. Endpoint(id='inference'); got {endpoint_id!r}"
        )
    return EndpointClient(endpoint_id)


class EndpointClient(Endpoint):
    """``Endpoint(id="NAME")``: a client of the endpoint NAME served by the flashpoint server at ``FLASHPOINT_URL``.

    As Flash's ``Endpoint(id=...)``: the input is sent as the job's input as it is, a JSON object (the served
    function's keyword arguments). Nothing happens until the first call, which checks that the server serves NAME.

    Example:
        >>> ep = Endpoint(id="inference")
        >>> job = await ep.run({"data": {"x": 1}})
        >>> await job.wait(timeout=60); job.output
    """

    id: str
    _conn: ServerConnection | None

    def __new__(cls, id: str) -> EndpointClient:
        self = object.__new__(cls)
        self.id = id
        self._conn = None
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # a function that calls another endpoint carries its client: by name only, the connection stays behind
        return EndpointClient, (self.id,)

    def __call__(self, target: Any) -> Any:
        raise InvalidEndpointError(
            f"Endpoint(id={self.id!r}) is a client of a served endpoint and cannot decorate "
            f"{getattr(target, '__name__', type(target).__name__)}; declare endpoints with @Endpoint(name=..., gpu=...)"
        )

    def _server(self) -> ServerConnection:
        """The connection to the server, without I/O; ConfigError when there is no server to talk to."""
        if self._conn is not None:
            return self._conn
        if not Settings.load().url:
            raise ConfigError(
                f"Endpoint(id={self.id!r}) is a client of an endpoint served by a flashpoint server: set "
                "FLASHPOINT_URL to its address (e.g. FLASHPOINT_URL=http://127.0.0.1:8000 for `flashpoint serve "
                "app.py`) and FLASHPOINT_API_KEY to its key"
            )
        conn = _connection()
        if not isinstance(conn, ServerConnection):
            raise ConfigError(
                f"Endpoint(id={self.id!r}) needs a connection to a flashpoint server, but the connection in use "
                f"({type(conn).__name__}) is an in-process control plane; unset it with flashpoint.server.use(None)"
            )
        return conn

    async def _connect(self) -> ServerConnection:
        if self._conn is None:
            conn = self._server()
            await conn.check_endpoint(self.id)
            self._conn = conn
        return self._conn

    async def run(self, input: Any) -> JobHandle:
        """Submit a job with ``input`` as its input and return its handle as soon as it is queued."""
        conn = await self._connect()
        return JobHandle(conn, await conn.submit(self.id, input, _extra()))

    async def runsync(self, input: Any, timeout: float | None = None) -> Any:
        """Submit a job, wait for it and return its output.

        Raises:
            JobFailedError: the job failed, was cancelled or timed out (with the remote type and traceback).
            TimeoutError: ``timeout`` seconds passed first; the job goes on.
        """
        job = await self.run(input)
        return await job.result(timeout)

    def stream(self, input: Any) -> AsyncIterator[Any]:
        """Run a job of a generator endpoint and yield its chunks: ``async for chunk in ep.stream({...})``."""
        return self._stream(input)

    async def _stream(self, input: Any) -> AsyncIterator[Any]:
        conn = await self._connect()
        async for chunk in _closing(conn.stream(self.id, input, _extra())):
            yield chunk

    def job(self, job_id: str) -> JobHandle:
        """A handle on an existing job of this endpoint; ``await handle.status()`` fetches its state."""
        return JobHandle(self._server(), JobView.queued(job_id, self.id))

    async def cancel(self, job_id: str) -> str:
        """Cancel a job (queued or running) and return its status; finished jobs are left as they are."""
        conn = await self._connect()
        return (await conn.cancel(job_id)).status.value

    async def explain(self) -> Explanation:
        """Why this endpoint's jobs wait (or that they don't), per GPU candidate, as the server sees it."""
        conn = await self._connect()
        return await conn.explain_endpoint(self.id)

    def __repr__(self) -> str:
        return f"<Endpoint id={self.id!r} (served)>"


__all__ = [
    "Endpoint",
    "EndpointClass",
    "EndpointClient",
    "EndpointFunction",
    "EndpointSpec",
    "JobHandle",
    "ServerlessScalerType",
    "WorkerTarget",
]


def _command_for(options: dict[str, Any]) -> EndpointCommand:
    command, cwd = options.pop("worker_command"), options.pop("worker_cwd", None)
    name = options.get("name")
    if isinstance(command, str) or not isinstance(command, Sequence) or not command:
        raise _fail(name, f"worker_command must be a list of strings, e.g. ['python', 'handler.py']; got {command!r}")
    if not all(isinstance(part, str) and part for part in command):
        raise _fail(name, f"worker_command must hold non-empty strings only, got {command!r}")
    if cwd is not None and not isinstance(cwd, str | os.PathLike):
        raise _fail(name, f"worker_cwd must be a directory path, got {cwd!r}")
    spec = _replace(_build_spec(options), kind="command")
    return EndpointCommand(spec, WorkerTarget(command=tuple(command), cwd=None if cwd is None else os.fspath(cwd)))


class EndpointCommand(_Bound):
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

    def __call__(self, target: Any) -> Any:
        raise InvalidEndpointError(
            f"Endpoint {self.spec.name!r} runs worker_command and cannot decorate "
            f"{getattr(target, '__name__', type(target).__name__)}; assign it instead: "
            f"handler = Endpoint(name={self.spec.name!r}, ..., worker_command=[...])"
        )

    async def run(self, input: Any) -> JobHandle:
        """Submit a job with ``input`` as its input and return its handle as soon as it is queued."""
        return await self._submit(input, {})

    async def runsync(self, input: Any, timeout: float | None = None) -> Any:
        """Submit a job, wait for it and return its output (``JobFailedError`` if it failed)."""
        job = await self.run(input)
        return await job.result(timeout)

    def stream(self, input: Any) -> AsyncIterator[Any]:
        """Run a job of a generator handler and yield its chunks as they are produced."""
        return self._stream(input, {})

    def job(self, job_id: str) -> JobHandle:
        """A handle on an existing job of this endpoint (connected on its first call)."""
        return JobHandle(
            self._conn if self._conn is not None else _connection(), JobView.queued(job_id, self.spec.name)
        )

    async def cancel(self, job_id: str) -> str:
        """Cancel a job (queued or running) and return its status; finished jobs are left as they are."""
        conn = await self._connect()
        return (await conn.cancel(job_id)).status.value

    def __repr__(self) -> str:
        command = " ".join(self._target_obj.command)
        return f"<Endpoint {self.spec.name!r} command {command!r} gpu={self.spec.describe_gpu()}>"
