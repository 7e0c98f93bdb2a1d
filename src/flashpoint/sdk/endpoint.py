"""The ``Endpoint`` decorator: a validated, frozen spec plus a handle that submits jobs and waits for them.

``Endpoint(...)`` does no I/O. The first call binds the handle to a control plane: an embedded one started in this
process, or the server named by ``FLASHPOINT_URL``.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from flashpoint.errors import InvalidEndpointError
from flashpoint.jobs import JobView
from flashpoint.sdk import progress
from flashpoint.sdk.callargs import encode_bound, naming_refused
from flashpoint.sdk.connection import Connection, ServerConnection
from flashpoint.sdk.default_connection import connect
from flashpoint.sdk.endpointclient import ClientMethods, closing
from flashpoint.sdk.endpointjob import EndpointJob, run_job, runsync_job, with_webhook
from flashpoint.sdk.jobhandle import JobHandle, job_result
from flashpoint.sdk.mapping import MapMethods
from flashpoint.sdk.references import register_named
from flashpoint.sdk.routes import RouteMethods
from flashpoint.spec import (
    NAME,
    OPTIONS,
    EndpointSpec,
    ServerlessScalerType,
    WorkerTarget,
    build_spec,
    invalid,
    options_of,
    public_methods,
    target_name,
    worker_target_for,
    worker_target_for_all,
)
from flashpoint.wire import codec

if TYPE_CHECKING:
    from flashpoint.explain import Explanation

T = TypeVar("T")
_B = TypeVar("_B", bound="_Bound")

__all__ = [
    "Connection",
    "Endpoint",
    "EndpointClass",
    "EndpointClient",
    "EndpointCommand",
    "EndpointFunction",
    "EndpointSpec",
    "JobHandle",
    "ServerConnection",
    "ServerlessScalerType",
    "WorkerTarget",
]

# --------------------------------------------------------------------------------------------------------------------
# Handles


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
        idle_timeout: seconds an idle worker above the minimum lives before it stops.
        execution_timeout_ms: a job running longer ends ``TIMED_OUT``; 0 means no limit.
        max_concurrency: jobs one worker runs at once (async handlers overlap).
        env: extra environment variables for the workers.
        dependencies, system_dependencies: what the workers need: pip requirements installed in a cached environment
            of the endpoint's own (unless this environment already satisfies them); Debian packages checked on the
            node.
        scaler_type, scaler_value: ``QUEUE_DELAY`` (seconds) or ``REQUEST_COUNT`` (jobs per worker), as in Flash.
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
            return _join(EndpointClass(_replace(spec, kind="class", methods=methods), target))
        if inspect.isfunction(target) or inspect.iscoroutinefunction(target) or inspect.ismethod(target):
            return _join(EndpointFunction(spec, target))
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


class Shared:
    """The functions and classes declared with one endpoint name and the same options: one endpoint that serves them
    all (one queue, one set of workers), each job naming the one it calls (``flashpoint.target``), as Flash groups
    the functions of one resource. Members are held weakly: a handle nobody holds leaves its endpoint."""

    def __init__(self, options: EndpointSpec) -> None:
        self.options = options
        self.members: weakref.WeakValueDictionary[str, _Bound] = weakref.WeakValueDictionary()

    def targets(self) -> dict[str, _Bound]:
        """``{target name: handle}``, in declaration order."""
        return dict(self.members.items())


#: the latest declaration group per endpoint name
_SHARED: dict[str, Shared] = {}


def _join(handle: _B) -> _B:
    """Add a decorated function or class to the endpoint of its name; a declaration with other options starts a new
    endpoint of that name (registering both on one control plane is the error, with what to do)."""
    options = options_of(handle.spec)
    shared = _SHARED.get(options.name)
    if shared is None or shared.options != options:
        shared = _SHARED[options.name] = Shared(options)
    shared.members[target_name(handle._target_obj)] = handle
    handle.shared = shared
    return handle


class _Bound:
    """Shared plumbing: bind once to a control plane, submit payloads, wrap results."""

    spec: EndpointSpec
    _target_obj: Any
    #: the endpoint this handle is one target of (None for a command)
    shared: Shared | None = None

    def __init__(self, spec: EndpointSpec, target: Any) -> None:
        self.spec = spec
        self._target_obj = target
        self._conn: Connection | None = None

    def __getstate__(self) -> dict[str, Any]:
        # code shipped by value (a class that names itself, a function that names another endpoint) carries the
        # handles it refers to: without their connection, and without their declaration group (weak references,
        # which do not pickle; the handle on the other side serves its own target)
        state = dict(self.__dict__)
        state["_conn"] = None
        state.pop("shared", None)
        return state

    async def _connect(self) -> Connection:
        conn = self._conn
        if conn is not None and not getattr(conn, "closed", False):
            return conn
        conn = connect()
        await conn.register(self.spec, self.worker_target())
        if getattr(conn, "hosts_code", False):  # (a Connection of before the attribute uploads nothing)
            await register_named(conn, self, lambda value: isinstance(value, _Bound))
        self._conn = conn
        return conn

    def worker_target(self) -> WorkerTarget:
        """How a worker runs this endpoint: every function and class declared with its name."""
        targets = self.targets()
        if len(targets) > 1:
            return worker_target_for_all([handle._target_obj for handle in targets.values()])
        return worker_target_for(self._target_obj)

    def targets(self) -> dict[str, _Bound]:
        """The functions and classes this handle's endpoint serves, ``{target name: handle}``."""
        if self.shared is None:
            return {target_name(self._target_obj): self}
        return self.shared.targets() or {target_name(self._target_obj): self}

    def _extra(self, init: Any = None) -> dict[str, Any]:
        extra = _extra(init)
        if self.shared is not None and len(self.shared.members) > 1:
            extra["flashpoint"]["target"] = target_name(self._target_obj)
        return extra

    async def _submit(self, payload: Any, extra: dict[str, Any]) -> JobHandle:
        conn = await self._connect()
        view = await conn.submit(self.spec.name, payload, extra)
        return JobHandle(conn, view)

    async def _call(self, payload: Any, extra: dict[str, Any]) -> Any:
        conn = await self._connect()
        if not progress.interactive():
            return job_result(await conn.call(self.spec.name, payload, extra))
        view = await conn.submit(self.spec.name, payload, extra)
        async with progress.wait_line(conn, view.id):  # a call queued for long says why, on the terminal
            return job_result(await conn.wait(view.id, None))

    async def explain(self) -> Explanation:
        """Why this endpoint's jobs wait (or that they don't), per GPU candidate."""
        conn = await self._connect()
        return await conn.explain_endpoint(self.spec.name)

    async def _stream(self, payload: Any, extra: dict[str, Any]) -> AsyncIterator[Any]:
        conn = await self._connect()
        async for chunk in closing(conn.stream(self.spec.name, payload, extra)):
            yield chunk


def _extra(init: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"binary_ok": True}
    if init is not None:
        meta["init"] = init
    return {"flashpoint": meta}


class EndpointFunction(MapMethods, _Bound, Generic[T]):
    """A decorated function: ``await fn(...)`` runs it remotely; ``await fn.run(...)`` returns a job handle;
    ``await fn.map(xs)`` runs one job per item (``mapping.py``)."""

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
        return encode_bound(bound)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        payload = self._payload(args, kwargs)
        with naming_refused(self._signature, args, kwargs):
            return await self._call(payload, self._extra())

    async def run(self, *args: Any, **kwargs: Any) -> JobHandle:
        """Submit a job and return its handle as soon as it is queued."""
        payload = self._payload(args, kwargs)
        with naming_refused(self._signature, args, kwargs):
            return await self._submit(payload, self._extra())

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
        return self._stream(self._payload(args, kwargs), self._extra())

    def _map_label(self) -> str:
        return self.spec.name

    def local(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function in this process, with no scheduler: for the user's own unit tests."""
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Endpoint {self.spec.name!r} gpu={self.spec.describe_gpu()}>"


class EndpointClass(_Bound):
    """A decorated class: ``Model(...)`` gives an instance handle whose methods run on a warm worker instance."""

    def __init__(self, spec: EndpointSpec, cls: type) -> None:
        super().__init__(spec, cls)
        self.__wrapped__ = cls
        functools.update_wrapper(self, cls, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> EndpointInstance:
        if not args and not kwargs:
            return EndpointInstance(self, None)
        # bound by name as function calls are: Model(3) and Model(size=3) are one instance on the worker, and JSON
        # (a server without --allow-pickle takes it); a call that cannot fit the constructor fails here, not remotely
        try:
            signature = inspect.signature(self.__wrapped__)
        except (TypeError, ValueError):  # no signature to read (a C-level constructor): the arguments as given
            return EndpointInstance(self, codec.encode_call(args, kwargs))
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            shown = signature.replace(return_annotation=inspect.Signature.empty)
            raise TypeError(f"{self.spec.name} {self.__wrapped__.__name__}{shown}: {exc}") from None
        return EndpointInstance(self, encode_bound(bound))

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


class MethodCall(MapMethods):
    """One public method of a class endpoint instance (``map``/``starmap`` too)."""

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
        payload = encode_bound(bound)
        if len(self._owner.spec.methods) > 1:
            payload["method"] = self._method  # DESIGN.md §1: with several methods, the input names one
        return payload

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        payload = self._payload(args, kwargs)
        with naming_refused(self._signature, (None, *args), kwargs):
            return await self._owner._call(payload, self._owner._extra(self._init))

    async def run(self, *args: Any, **kwargs: Any) -> JobHandle:
        payload = self._payload(args, kwargs)
        with naming_refused(self._signature, (None, *args), kwargs):
            return await self._owner._submit(payload, self._owner._extra(self._init))

    def _map_label(self) -> str:
        return f"{self._owner.spec.name}.{self._method}"


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

    def __call__(self, target: Any) -> Any:
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
