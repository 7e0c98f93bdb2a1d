"""Stubs for resources declared in other code (mirrors ``runpod/apps/stubs.py`` of ``runpod==2.0.0rc2``).

When a resource exists but its source is elsewhere, a stub gives the same calls as a handle, by keyword only::

    external_queue = runpod.Queue(app="other-app", name="transcribe")
    external_queue.remote(audio_url="https://...")

    external_api = runpod.Api(app="other-app", name="inference")
    external_api.post("/generate", {"prompt": "hi"})

A stub's environment is ``env=``, else ``FLASH_ENVIRONMENT``, else ``"default"``. Its target is the bridge's
(``bridge.stub_target(app, env, resource)``, imported on the first call), where rc2 builds a ``SentinelTarget``.

Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from flashpoint.runpodapps.context import block
from flashpoint.runpodapps.invoker import Invoker, StreamInvoker
from flashpoint.runpodapps.job import Job
from flashpoint.runpodapps.targets import InvocationTarget, build_job_options, merge_job_options

__all__ = ["DEFAULT_ENV", "Api", "Queue"]

DEFAULT_ENV = "default"


class _StubBase:
    def __init__(self, *, app: str, name: str | None = None, id: str | None = None, env: str | None = None) -> None:
        if (name is None) == (id is None):
            raise ValueError("provide exactly one of name= or id=")
        self.app_name = app
        self.resource_name = name
        self.resource_id = id
        self.env = env or os.getenv("FLASH_ENVIRONMENT") or DEFAULT_ENV

    def _target(self) -> InvocationTarget:
        from flashpoint.runpodapps import bridge  # type: ignore[attr-defined,unused-ignore]

        # id-based stubs pass the id as the resource key, resolved by the bridge
        resource = self.resource_name or self.resource_id or ""
        target: InvocationTarget = bridge.stub_target(self.app_name, self.env, resource)
        return target


class Queue(_StubBase):
    """client for a queue resource deployed elsewhere."""

    def __init__(self, *, app: str, name: str | None = None, id: str | None = None, env: str | None = None) -> None:
        super().__init__(app=app, name=name, id=id, env=env)
        self._job_options: dict[str, Any] = {}
        self.remote = Invoker(self._remote_async)
        self.stream = StreamInvoker(self._stream_async)
        self.spawn = Invoker(self._spawn_async)
        self.job = Invoker(self._job_async)

    def with_options(
        self,
        *,
        webhook: str | None = None,
        execution_timeout: int | None = None,
        ttl: int | None = None,
        low_priority: bool | None = None,
        s3_config: dict[str, Any] | None = None,
    ) -> Queue:
        """bind per-job options for the next call, returning a new stub; options stack across chained calls and the
        original stub is untouched."""
        new_options = build_job_options(webhook, execution_timeout, ttl, low_priority, s3_config)
        clone = Queue(app=self.app_name, name=self.resource_name, id=self.resource_id, env=self.env)
        clone._job_options = merge_job_options(self._job_options, new_options)
        return clone

    def _payload(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        payload: dict[str, Any] = {"input": kwargs or {"__empty": True}}
        if self._job_options:
            payload.update(self._job_options)
        return payload

    async def _remote_async(self, **kwargs: Any) -> Any:
        invoke: Callable[..., Awaitable[Any]] = self._target().invoke
        return await invoke(self._payload(kwargs))

    async def _spawn_async(self, **kwargs: Any) -> Job:
        target = self._target()
        data = await target.submit(self._payload(kwargs))
        return Job(data, target)

    async def _stream_async(self, **kwargs: Any) -> AsyncIterator[Any]:
        target = self._target()
        data = await target.submit(self._payload(kwargs))
        stream_job: Callable[..., AsyncIterator[Any]] = target.stream_job
        async for chunk in stream_job(data["id"]):
            yield chunk

    async def _job_async(self, job_id: str) -> Job:
        return Job({"id": job_id, "status": "UNKNOWN"}, self._target())

    def __repr__(self) -> str:
        ref = self.resource_name or self.resource_id
        return f"<Queue stub {self.app_name}/{ref}>"


class _StubRouteCaller:
    __slots__ = ("_method", "_stub")

    def __init__(self, stub: Api, method: str):
        self._stub = stub
        self._method = method

    def __call__(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return block(self.aio(path, body, **kwargs))

    async def aio(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        request: Callable[..., Awaitable[Any]] = self._stub._target().request
        return await request(self._method, path, body, **kwargs)


class Api(_StubBase):
    """client for an api resource deployed elsewhere."""

    def __init__(self, *, app: str, name: str | None = None, id: str | None = None, env: str | None = None) -> None:
        super().__init__(app=app, name=name, id=id, env=env)
        self.get = _StubRouteCaller(self, "GET")
        self.post = _StubRouteCaller(self, "POST")
        self.put = _StubRouteCaller(self, "PUT")
        self.delete = _StubRouteCaller(self, "DELETE")
        self.patch = _StubRouteCaller(self, "PATCH")

    def __repr__(self) -> str:
        ref = self.resource_name or self.resource_id
        return f"<Api stub {self.app_name}/{ref}>"
