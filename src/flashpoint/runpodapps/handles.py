"""The handles App decorators return (mirrors ``runpod/apps/handles.py`` of ``runpod==2.0.0rc2``).

A handle replaces the decorated object and is the one way to use the resource::

    @app.queue(name="transcribe", gpu=GpuType.NVIDIA_GEFORCE_RTX_4090)
    async def transcribe(audio_url: str): ...

    transcribe.remote("https://...")             # sync remote call
    await transcribe.remote.aio("https://...")
    transcribe.spawn("https://...")               # fire and forget -> Job
    transcribe.local("https://...")               # run the body here
    for chunk in generate.stream(prompt="hi"): ...  # generator functions

    @transcribe.init
    def load_model(): ...                         # worker startup hook

Calling the handle itself is a ``TypeError`` that names those verbs. Inside the worker that serves a resource
(``_is_current_worker``: ``FLASH_RESOURCE_NAME``/``RUNPOD_RESOURCE_NAME``, or rc2's dev pair) ``.remote`` and
``.stream`` run the body in process; everywhere else they resolve a target through ``App._resolve`` (the bridge).
While a discovery scan imports the file every verb raises ``DiscoveryInvocationError``.

``ApiHandle`` keeps what a worker needs to serve the resource: ``_cls`` (the class, whose marked methods are
``spec.routes``, and ``_init_name`` its ``@init`` method) or ``_asgi_factory`` (a zero-argument function returning an
ASGI app).

Standard library only.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from flashpoint.runpodapps.context import Context, block, current_context
from flashpoint.runpodapps.discovery_state import DiscoveryInvocationError, in_discovery
from flashpoint.runpodapps.errors import InvalidResourceError
from flashpoint.runpodapps.invoker import Invoker, StreamInvoker
from flashpoint.runpodapps.job import Job
from flashpoint.runpodapps.markers import INIT_ATTR, is_init, route_of
from flashpoint.runpodapps.schedule import SCHEDULE_ATTR
from flashpoint.runpodapps.spec import ResourceKind, ResourceSpec, RouteSpec
from flashpoint.runpodapps.targets import InvocationTarget, build_job_options, merge_job_options

__all__ = ["ApiHandle", "AppLike", "FunctionHandle"]


class AppLike(Protocol):
    """What a handle needs of its ``App`` (``app.py``, which imports this module): its name and its resolver."""

    name: str

    async def _resolve(self, spec: ResourceSpec) -> InvocationTarget: ...


def _invoke(target: InvocationTarget, payload: dict[str, Any]) -> Awaitable[Any]:
    """``target.invoke(payload)`` with the target's own default timeout (as rc2's handles call it)."""
    invoke: Callable[..., Awaitable[Any]] = target.invoke
    return invoke(payload)


def _stream_job(target: InvocationTarget, job_id: str) -> AsyncIterator[Any]:
    """``target.stream_job(job_id)`` with the target's own default timeout."""
    stream_job: Callable[..., AsyncIterator[Any]] = target.stream_job
    return stream_job(job_id)


class FunctionHandle:
    """handle for @app.queue and @app.task functions."""

    def __init__(self, app: AppLike, fn: Callable[..., Any], spec: ResourceSpec):
        self._app = app
        self._fn = fn
        self.spec = spec
        self._init_fn: Callable[..., Any] | None = None
        # per-job options merged into the run payload; set by with_options
        self._job_options: dict[str, Any] = {}

        # adopt a schedule stamped by @schedule below the app decorator
        stamped = getattr(fn, SCHEDULE_ATTR, None)
        if stamped and not spec.schedule:
            spec.schedule = stamped

        self.remote = Invoker(self._remote_async, sync_factory=self._remote_sync)
        self.stream = StreamInvoker(self._stream_async)
        self.spawn = Invoker(self._spawn_async)
        self.job = Invoker(self._job_async)

        self.__name__: str = getattr(fn, "__name__", spec.name)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def with_options(
        self,
        *,
        webhook: str | None = None,
        execution_timeout: int | None = None,
        ttl: int | None = None,
        low_priority: bool | None = None,
        s3_config: dict[str, Any] | None = None,
    ) -> FunctionHandle:
        """bind per-job options for the next call, returning a new handle::

            transcribe.with_options(webhook="https://...").spawn(url)

        options apply per invocation and stack across chained calls; the original handle is untouched. queue only:
        tasks run on a dedicated worker and take no job payload options.
        """
        if self.spec.kind is ResourceKind.TASK:
            raise InvalidResourceError(
                "per-job options apply only to @app.queue functions; tasks run on a dedicated pod"
            )
        new_options = build_job_options(webhook, execution_timeout, ttl, low_priority, s3_config)
        clone = FunctionHandle(self._app, self._fn, self.spec)
        clone._init_fn = self._init_fn
        clone._job_options = merge_job_options(self._job_options, new_options)
        return clone

    def init(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """register a worker-startup hook; runs before the worker is ready, never locally."""
        setattr(fn, INIT_ATTR, True)
        self._init_fn = fn
        return fn

    def local(self, *args: Any, **kwargs: Any) -> Any:
        """run the function body here. returns a coroutine iff the function is async."""
        return self._fn(*args, **kwargs)

    def _call_local_sync(self, *args: Any, **kwargs: Any) -> Any:
        result = self._fn(*args, **kwargs)
        return list(result) if inspect.isgenerator(result) else result

    @staticmethod
    async def _await_local_result(result: Any) -> Any:
        if inspect.isawaitable(result):
            result = await result
        if inspect.isasyncgen(result):
            return [chunk async for chunk in result]
        return list(result) if inspect.isgenerator(result) else result

    def _is_async(self) -> bool:
        return inspect.iscoroutinefunction(self._fn) or inspect.isasyncgenfunction(self._fn)

    def _remote_sync(self, *args: Any, **kwargs: Any) -> Any:
        if current_context() is Context.WORKER and self._is_current_worker() and not self._is_async():
            self._guard_discovery()
            self.spec.validate()
            result = self._call_local_sync(*args, **kwargs)
            if inspect.isawaitable(result) or inspect.isasyncgen(result):
                return block(self._await_local_result(result))
            return result
        return block(self._remote_async(*args, **kwargs))

    async def _remote_async(self, *args: Any, **kwargs: Any) -> Any:
        self._guard_discovery()
        self.spec.validate()
        if current_context() is Context.WORKER and self._is_current_worker():
            if self._is_async():
                result = self._fn(*args, **kwargs)
            else:
                result = await asyncio.to_thread(self._call_local_sync, *args, **kwargs)
            return await self._await_local_result(result)

        target = await self._app._resolve(self.spec)
        payload = target.build_payload(self._fn, self.spec, args, kwargs)
        return await _invoke(target, self._apply_options(payload))

    async def _stream_async(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """invoke a generator function remotely, yielding partial outputs as the worker produces them."""
        self._guard_discovery()
        self.spec.validate()
        self._guard_generator()
        if current_context() is Context.WORKER and self._is_current_worker():
            gen = self._fn(*args, **kwargs)
            if inspect.isasyncgen(gen):
                async for chunk in gen:
                    yield chunk
            else:
                for chunk in gen:
                    yield chunk
            return

        target = await self._app._resolve(self.spec)
        payload = target.build_payload(self._fn, self.spec, args, kwargs)
        data = await target.submit(self._apply_options(payload))
        async for chunk in _stream_job(target, data["id"]):
            yield chunk

    def _guard_generator(self) -> None:
        if self.spec.kind is ResourceKind.TASK:
            raise InvalidResourceError("tasks do not stream; use @app.queue for generator functions")
        if not (inspect.isgeneratorfunction(self._fn) or inspect.isasyncgenfunction(self._fn)):
            raise InvalidResourceError(f"'{self.__name__}' is not a generator function; use .remote(...) instead")

    def _apply_options(self, payload: dict[str, Any]) -> dict[str, Any]:
        if not self._job_options:
            return payload
        return {**payload, **self._job_options}

    async def _spawn_async(self, *args: Any, **kwargs: Any) -> Any:
        self._guard_discovery()
        target = await self._app._resolve(self.spec)
        payload = target.build_payload(self._fn, self.spec, args, kwargs)
        data: Any = await target.submit(self._apply_options(payload))
        # flashpoint's targets return the raw job data for tasks too; any other answer is passed on as rc2 does
        if isinstance(data, dict):
            return Job(data, target)
        return data

    async def _job_async(self, job_id: str) -> Job:
        """reconnect to a submitted queue job by id."""
        if self.spec.kind is ResourceKind.TASK:
            raise InvalidResourceError("task jobs cannot be reconnected by id; retain the job returned by .spawn()")
        target = await self._app._resolve(self.spec)
        return Job({"id": job_id, "status": "UNKNOWN"}, target)

    def _guard_discovery(self) -> None:
        if in_discovery():
            raise DiscoveryInvocationError(self.spec.name)

    def _is_current_worker(self) -> bool:
        if dev_app := os.getenv("RUNPOD_DEV_APP"):
            return dev_app == self._app.name and os.getenv("RUNPOD_DEV_RESOURCE") == self.spec.name
        current = os.getenv("FLASH_RESOURCE_NAME") or os.getenv("RUNPOD_RESOURCE_NAME")
        return current is not None and current == self.spec.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"'{self.__name__}' is a runpod {self.spec.kind.value} handle. "
            f"use .remote(...) to execute remotely, .local(...) to run here, "
            f"or .spawn(...) to fire and forget."
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec.kind.value}:{self.spec.name} app={self._app.name!r}>"


class _RouteCaller:
    """client-side http verb on an ApiHandle: Inference.post("/x", body)."""

    __slots__ = ("_handle", "_method")

    def __init__(self, handle: ApiHandle, method: str):
        self._handle = handle
        self._method = method

    def __call__(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return block(self.aio(path, body, **kwargs))

    async def aio(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        if in_discovery():
            raise DiscoveryInvocationError(self._handle.spec.name)
        target = await self._handle._app._resolve(self._handle.spec)
        request: Callable[..., Awaitable[Any]] = target.request
        return await request(self._method, path, body, **kwargs)


class ApiHandle:
    """handle for @app.api classes and asgi factories.

    route registration happens inside the decorated class via markers (@get/@post/...); the handle only ever makes
    client calls, so there is no decorator/client dual mode.
    """

    def __init__(self, app: AppLike, target: Any, spec: ResourceSpec):
        self._app = app
        self.spec = spec
        self._cls: type | None = None
        self._asgi_factory: Callable[[], Any] | None = None
        self._init_name: str | None = None

        if inspect.isclass(target):
            self._cls = target
            self._collect_routes(target)
        elif callable(target):
            self._asgi_factory = target
            spec.asgi_factory = getattr(target, "__qualname__", target.__name__)
        else:
            raise InvalidResourceError(
                "@app.api must decorate a class with route markers or a zero-argument function returning an asgi app"
            )

        self.get = _RouteCaller(self, "GET")
        self.post = _RouteCaller(self, "POST")
        self.put = _RouteCaller(self, "PUT")
        self.delete = _RouteCaller(self, "DELETE")
        self.patch = _RouteCaller(self, "PATCH")

        self.__name__: str = getattr(target, "__name__", spec.name)
        self.__doc__ = getattr(target, "__doc__", None)
        self.__wrapped__ = target

    def _collect_routes(self, cls: type) -> None:
        seen: dict[tuple[str, str], str] = {}
        routes: list[RouteSpec] = []
        for name, member in inspect.getmembers(cls, callable):
            route = route_of(member)
            if route is not None:
                method, path = route
                if (method, path) in seen:
                    raise InvalidResourceError(
                        f"duplicate route {method} {path} on {cls.__name__}: '{seen[(method, path)]}' and '{name}'"
                    )
                seen[(method, path)] = name
                routes.append(RouteSpec(method=method, path=path, handler_name=name))
            if is_init(member):
                if self._init_name is not None and self._init_name != name:
                    raise InvalidResourceError(
                        f"multiple @init methods on {cls.__name__}: '{self._init_name}' and '{name}'"
                    )
                self._init_name = name
        if not routes:
            raise InvalidResourceError(
                f"@app.api class {cls.__name__} defines no routes; mark methods with @get/@post/@put/@delete/@patch"
            )
        self.spec.routes = routes

    def __repr__(self) -> str:
        return f"<ApiHandle api:{self.spec.name} routes={len(self.spec.routes)} app={self._app.name!r}>"
