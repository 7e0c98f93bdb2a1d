"""What ``@Endpoint(...)`` returns: a handle that binds to a control plane on its first call, typed with what it
decorates.

- ``EndpointFunction[P, R]``, a decorated function with parameters ``P``: ``await fn(...)`` is its result ``R``,
  awaited even when the function is a ``def`` (the call is remote); a generator's result is the list of its chunks.
  ``await fn.run(...)`` is a ``JobHandle[R]``; ``fn.map``/``fn.starmap`` (``mapping.py``) yield ``R``.
- ``EndpointClass[P, C]``, a decorated class ``C`` whose constructor takes ``P``: ``Model(...)`` is an
  ``EndpointInstance[C]``, whose methods (``MethodCall``) run on a warm worker instance and are awaited. Their
  parameters and results are not typed: Python's types cannot carry a class's methods over to another object.
  mypy applies no class decorator's return type (python/mypy#3135): under it, a class decorated with ``@Endpoint(...)``
  keeps its own type (its constructor is checked; an ``async def`` method reads as its remote call does, a ``def``
  method does not); ``Endpoint(...)(Model)`` written as a call is an ``EndpointClass`` there too.

Handles declared with one endpoint name and the same options are one endpoint (``Shared``). ``endpoint.py`` makes the
handles (``Endpoint.__call__``, which says how each is typed); ``EndpointCommand`` there is a ``Bound`` handle too.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from flashpoint.jobs import LOW_PRIORITY_KEY
from flashpoint.sdk import progress
from flashpoint.sdk.callargs import encode_bound, naming_refused
from flashpoint.sdk.connection import Connection
from flashpoint.sdk.default_connection import connect
from flashpoint.sdk.endpointclient import closing
from flashpoint.sdk.jobhandle import JobHandle, job_result
from flashpoint.sdk.mapping import MapMethods
from flashpoint.sdk.references import register_named
from flashpoint.spec import (
    EndpointSpec,
    WorkerTarget,
    options_of,
    target_name,
    worker_target_for,
    worker_target_for_all,
)
from flashpoint.wire import codec

if TYPE_CHECKING:
    from flashpoint.explain import Explanation

__all__ = ["Bound", "EndpointClass", "EndpointFunction", "EndpointInstance", "MethodCall", "Shared", "join"]

#: a decorated function's parameters (or a decorated class's constructor's)
P = ParamSpec("P")
#: a decorated function's result, as ``await fn(...)`` gives it
R = TypeVar("R")
#: a decorated class
C = TypeVar("C")
_B = TypeVar("_B", bound="Bound")


class Shared:
    """The functions and classes declared with one endpoint name and the same options: one endpoint that serves them
    all (one queue, one set of workers), each job naming the one it calls (``flashpoint.target``), as Flash groups
    the functions of one resource. Members are held weakly: a handle nobody holds leaves its endpoint."""

    def __init__(self, options: EndpointSpec) -> None:
        self.options = options
        self.members: weakref.WeakValueDictionary[str, Bound] = weakref.WeakValueDictionary()

    def targets(self) -> dict[str, Bound]:
        """``{target name: handle}``, in declaration order."""
        return dict(self.members.items())


#: the latest declaration group per endpoint name
_SHARED: dict[str, Shared] = {}


def join(handle: _B) -> _B:
    """Add a decorated function or class to the endpoint of its name; a declaration with other options starts a new
    endpoint of that name (registering both on one control plane is the error, with what to do)."""
    options = options_of(handle.spec)
    shared = _SHARED.get(options.name)
    if shared is None or shared.options != options:
        shared = _SHARED[options.name] = Shared(options)
    shared.members[target_name(handle._target_obj)] = handle
    handle.shared = shared
    return handle


class Bound:
    """Shared plumbing of the handles (``EndpointCommand``'s too): bind once to a control plane, submit payloads,
    wrap results."""

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
            await register_named(conn, self, lambda value: isinstance(value, Bound))
        self._conn = conn
        return conn

    def worker_target(self) -> WorkerTarget:
        """How a worker runs this endpoint: every function and class declared with its name."""
        targets = self.targets()
        if len(targets) > 1:
            return worker_target_for_all([handle._target_obj for handle in targets.values()])
        return worker_target_for(self._target_obj)

    def targets(self) -> dict[str, Bound]:
        """The functions and classes this handle's endpoint serves, ``{target name: handle}``."""
        if self.shared is None:
            return {target_name(self._target_obj): self}
        return self.shared.targets() or {target_name(self._target_obj): self}

    def _extra(self, init: Any = None) -> dict[str, Any]:
        extra = _extra(init)
        if self.shared is not None and len(self.shared.members) > 1:
            extra["flashpoint"]["target"] = target_name(self._target_obj)
        if self.__dict__.get("_low_priority"):
            extra["flashpoint"][LOW_PRIORITY_KEY] = True
        return extra

    def low_priority(self: _B) -> _B:
        """This endpoint, its jobs sent at low priority (Runpod 2.x's ``lowPriority``): they run after its queue's
        other jobs, and wait as the lowest priority class for devices. ``await infer.low_priority()(x)``."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin.__dict__["_low_priority"] = True
        return twin

    async def _submit(self, payload: Any, extra: dict[str, Any]) -> JobHandle[Any]:
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


class EndpointFunction(MapMethods[R], Bound, Generic[P, R]):
    """A decorated function with parameters ``P`` and result ``R``: ``await fn(...)`` runs it remotely;
    ``await fn.run(...)`` returns a job handle; ``await fn.map(xs)`` runs one job per item (``mapping.py``)."""

    def __init__(self, spec: EndpointSpec, fn: Callable[P, Any]) -> None:
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

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        payload = self._payload(args, kwargs)
        with naming_refused(self._signature, args, kwargs):
            result: R = await self._call(payload, self._extra())
            return result

    async def run(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        """Submit a job and return its handle as soon as it is queued."""
        payload = self._payload(args, kwargs)
        with naming_refused(self._signature, args, kwargs):
            return await self._submit(payload, self._extra())

    def stream(self, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[Any]:
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

    def local(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Run the function in this process, with no scheduler: for the user's own unit tests (what the function
        returns, a coroutine for an ``async def``)."""
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Endpoint {self.spec.name!r} gpu={self.spec.describe_gpu()}>"


class EndpointClass(Bound, Generic[P, C]):
    """A decorated class ``C`` whose constructor takes ``P``: ``Model(...)`` gives an instance handle whose methods run
    on a warm worker instance."""

    def __init__(self, spec: EndpointSpec, cls: type[C]) -> None:
        super().__init__(spec, cls)
        self.__wrapped__ = cls
        functools.update_wrapper(self, cls, updated=())

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> EndpointInstance[C]:
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


class EndpointInstance(Generic[C]):
    """``Model(...)``: constructor arguments travel to the worker, which keeps one instance per distinct set. Its
    methods are ``MethodCall``s, untyped (see the module's docstring)."""

    def __init__(self, owner: EndpointClass[..., C], init: Any) -> None:
        self._owner = owner
        self._init = init

    def __getattr__(self, method: str) -> MethodCall:
        if method not in self._owner.spec.methods:
            raise AttributeError(
                f"{self._owner.__wrapped__.__name__} endpoint has no public method {method!r}; "
                f"methods: {', '.join(self._owner.spec.methods)}"
            )
        return MethodCall(self._owner, self._init, method)


class MethodCall(MapMethods[Any]):
    """One public method of a class endpoint instance: ``await model.predict(...)`` (awaited, as any remote call,
    whether the method is a ``def`` or an ``async def``), ``await model.predict.run(...)``, ``map``/``starmap``."""

    def __init__(self, owner: EndpointClass[..., Any], init: Any, method: str) -> None:
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

    async def run(self, *args: Any, **kwargs: Any) -> JobHandle[Any]:
        payload = self._payload(args, kwargs)
        with naming_refused(self._signature, (None, *args), kwargs):
            return await self._owner._submit(payload, self._owner._extra(self._init))

    def _map_label(self) -> str:
        return f"{self._owner.spec.name}.{self._method}"
