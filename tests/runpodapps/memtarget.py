"""An in-memory ``InvocationTarget`` for the tests of handles, jobs and stubs: a real target (not a mock) that runs the
resource's function in this process as a worker would, keeping every payload it was sent and every job it made.

``LocalApp`` is an ``App`` whose ``_resolve`` validates the spec (as ``App._resolve`` does) and hands out this target
instead of the bridge's.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from flashpoint.runpodapps import App
from flashpoint.runpodapps.spec import ResourceSpec
from flashpoint.runpodapps.targets import DEFAULT_TIMEOUT_SECONDS, InvocationTarget


class MemoryTarget(InvocationTarget):
    """Runs ``fn(**input)`` (``__empty`` dropped) for every job; a raise becomes a FAILED job, as on a worker."""

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        self.fn = fn
        self.payloads: list[dict[str, Any]] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any, dict[str, Any]]] = []
        self.timeouts: list[float | None] = []

    async def _run(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.payloads.append(payload)
        job_id = f"job-{len(self.jobs) + 1}"
        kwargs = {key: value for key, value in payload["input"].items() if key != "__empty"}
        assert self.fn is not None
        try:
            output = self.fn(**kwargs)
            if inspect.isawaitable(output):
                output = await output
            if inspect.isasyncgen(output):
                output = [chunk async for chunk in output]
            elif inspect.isgenerator(output):
                output = list(output)
            data: dict[str, Any] = {"id": job_id, "status": "COMPLETED", "output": output}
        except Exception as exc:
            data = {"id": job_id, "status": "FAILED", "error": f"{type(exc).__name__}: {exc}"}
        self.jobs[job_id] = data
        return data

    async def invoke(self, payload: dict[str, Any], *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> Any:
        self.timeouts.append(timeout)
        return self.unwrap(await self._run(payload))

    async def submit(self, payload: dict[str, Any]) -> dict[str, Any]:
        data = await self._run(payload)
        return {"id": data["id"], "status": "IN_QUEUE"}

    async def job_status(self, job_id: str) -> dict[str, Any]:
        return dict(self.jobs[job_id])

    async def cancel_job(self, job_id: str) -> dict[str, Any]:
        self.jobs[job_id] = {"id": job_id, "status": "CANCELLED"}
        return dict(self.jobs[job_id])

    async def wait(
        self,
        job_data: dict[str, Any],
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        on_status: Callable[[dict[str, Any]], None] | None = None,
    ) -> Any:
        self.timeouts.append(timeout)
        data = dict(self.jobs[job_data["id"]])
        if on_status is not None:
            on_status(data)
        return self.unwrap(data)

    async def stream_job(self, job_id: str, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> AsyncIterator[Any]:
        self.timeouts.append(timeout)
        for chunk in self.jobs[job_id]["output"]:
            yield chunk

    async def request(
        self, method: str, path: str, body: Any = None, *, timeout: float = DEFAULT_TIMEOUT_SECONDS, **extra: Any
    ) -> Any:
        self.requests.append((method, path, body, extra))
        return {"method": method, "path": path, "body": body}


class LocalApp(App):
    """An App whose resources resolve to one ``MemoryTarget`` per resource, each running that resource's function."""

    def __init__(self, name: str, *, env: str = "default") -> None:
        super().__init__(name, env=env)
        self.targets: dict[str, MemoryTarget] = {}

    async def _resolve(self, spec: ResourceSpec) -> InvocationTarget:
        spec.validate()
        if spec.name not in self.targets:
            handle = self._resources[spec.name]
            self.targets[spec.name] = MemoryTarget(getattr(handle, "_fn", None))
        return self.targets[spec.name]
