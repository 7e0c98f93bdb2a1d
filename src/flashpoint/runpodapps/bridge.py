"""Where Runpod SDK 2.x's App API meets flashpoint (decision 0108): an App's resource as a flashpoint endpoint, and the
targets its handles' calls go to.

- ``endpoint_spec(app, env, resource)``: the resource's ``ResourceSpec`` as an ``EndpointSpec`` of app ``app`` and
  environment ``env`` (a pure function, tested by table): every rc2 option given its local meaning or recorded as
  cloud-only in ``cloud_only`` (``explain`` lists those).
- ``endpoint_for(handle)``: the flashpoint handle that serves a resource (what discovery, ``serve`` and ``deploy``
  register): an ``EndpointFunction`` for a queue or task resource, a route ``Endpoint`` for an api resource.
- ``target_for(app, spec)`` / ``stub_target(app, env, name)``: what ``App._resolve`` and the ``Queue``/``Api`` stubs
  return: an ``EndpointTarget`` calling the endpoint ``app.env.name`` through flashpoint's ``Connection`` (the
  embedded plane, ``FLASHPOINT_URL``'s server, or in a worker the plane that started it), shaped as rc2's targets
  answer (job dicts, ``RemoteExecutionError``, ``EndpointNotFound``).

SDK layer: imports flashpoint's SDK and core, never the HTTP stack at import time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from flashpoint.errors import Error, JobFailedError, NotFoundError
from flashpoint.flashtypes import NetworkVolume as FlashVolume
from flashpoint.jobs import JobStatus, JobView
from flashpoint.runpodapps.errors import EndpointNotFound, InvalidResourceError, RemoteExecutionError
from flashpoint.runpodapps.models import model_env
from flashpoint.runpodapps.spec import ResourceKind, ResourceSpec, normalize_gpu
from flashpoint.runpodapps.targets import DEFAULT_TIMEOUT_SECONDS, InvocationTarget, unwrap_job_output
from flashpoint.sdk.connection import Connection
from flashpoint.sdk.default_connection import connect
from flashpoint.spec import APP_NAME, EndpointSpec, WorkerTarget, build_spec, endpoint_id, worker_target_for
from flashpoint.wire import codec

__all__ = [
    "EMPTY",
    "TASK_WORKERS_MAX",
    "EndpointTarget",
    "endpoint_for",
    "endpoint_spec",
    "environment_of",
    "resource_key",
    "stub_target",
    "target_for",
]

#: rc2's marker for a call without arguments (its platform drops an empty input); never an argument
EMPTY = "__empty"
#: how many workers a task resource may run at once (rc2's tasks take no ``workers=``: the fleet bounds them)
TASK_WORKERS_MAX = 64
#: the variable a worker of an App's resource reads its environment from (rc2's ``FLASH_ENVIRONMENT``)
ENVIRONMENT_VAR = "FLASH_ENVIRONMENT"


def environment_of(app: Any) -> str:
    """The environment an App's calls go to: ``FLASH_ENVIRONMENT`` (a worker's, or the caller's choice), else the
    App's own ``env`` (rc2's ``App._resolve``)."""
    return os.environ.get(ENVIRONMENT_VAR) or app.env


def resource_key(app: str, env: str, name: str) -> str:
    """The flashpoint endpoint id of a resource: ``app.env.name``."""
    return endpoint_id(app, env, name)


# --------------------------------------------------------------------------------------------------------------------
# A resource as an endpoint


def _gpu_candidates(resource: ResourceSpec) -> tuple[list[str] | None, list[str]]:
    """The GPU candidates flashpoint's catalog knows, in rc2's order, and the notes for those it does not (a device
    of Runpod's cloud that no fleet of the seed's catalog has): dropped while others remain."""
    gpus = normalize_gpu(resource.gpu)
    if gpus is None:
        return None, []
    from flashpoint.gpus import parse_gpu

    kept: list[str] = []
    notes: list[str] = []
    for value in gpus:
        try:
            parse_gpu(value)
        except Error:
            notes.append(f"gpu={value!r} (not in flashpoint's GPU catalog; dropped from the candidates)")
            continue
        kept.append(value)
    if not kept:
        raise InvalidResourceError(
            f"resource '{resource.name}': no gpu of {resource.gpu!r} is in flashpoint's GPU catalog "
            "(`flashpoint gpus` lists it); name a pool (GpuGroup.ADA_80_PRO) or a model it has"
        )
    return kept, notes


def _volumes(resource: ResourceSpec) -> tuple[FlashVolume, ...]:
    """The resource's mounts as flashpoint volumes (one directory per volume name, in its app's environment)."""
    return tuple(FlashVolume(name=volume.reference) for volume in (resource.mounts or {}).values())


def _cloud_only(resource: ResourceSpec) -> list[str]:
    notes = []
    if resource.image:
        notes.append(f"image={resource.image!r} (the code runs in flashpoint's Python environment)")
    if resource.registry_auth:
        notes.append(f"registry_auth={resource.registry_auth!r}")
    if resource.container_disk_gb is not None:
        notes.append(f"container_disk_gb={resource.container_disk_gb}")
    for path, volume in (resource.mounts or {}).items():
        if path != "/runpod-volume":
            notes.append(f"mounts[{path!r}] (the volume {volume.reference!r} is at Volume.path, not at {path})")
    return notes


def endpoint_spec(app: str, env: str, resource: ResourceSpec, *, model_store: Path | None = None) -> EndpointSpec:
    """The endpoint ``app.env.<resource name>`` that serves an rc2 resource.

    Args:
        app, env: the App's name and the environment it is served in.
        resource: the resource's validated spec.
        model_store: where ``model=`` weights are looked for (``models.model_store()`` by default).

    Raises:
        InvalidResourceError: an option flashpoint cannot give a meaning (every GPU unknown to its catalog).
        ModelError: ``model=`` names weights that are not in the model store (where it looked, how to fetch them).
        InvalidEndpointError: flashpoint's own checks (a secret name it refuses, say).
    """
    from flashpoint.runpodapps.secret import render_env

    for what, value in (("App name", app), ("environment", env)):
        if not APP_NAME.fullmatch(value):
            # an App's name and env become an endpoint id and a folder of its volumes: one plain path component
            raise InvalidResourceError(
                f"resource '{resource.name}': {what} {value!r} cannot be served by flashpoint: use 1 to 63 letters, "
                "digits, '_' or '-', starting with a letter or digit (e.g. App('my-app', env='staging'))"
            )
    resource.validate()
    gpus, notes = _gpu_candidates(resource)
    task = resource.kind is ResourceKind.TASK
    env_vars = dict(render_env(resource.env))
    if resource.model is not None:
        env_vars.update(model_env(resource.model, model_store))
    options: dict[str, Any] = {
        "name": resource.name,
        "gpu_count": resource.gpu_count,
        "workers": (0, TASK_WORKERS_MAX) if task else tuple(resource.workers),  # type: ignore[arg-type]
        "idle_timeout": 0 if task else resource.idle_timeout,
        "execution_timeout_ms": resource.execution_timeout_ms,
        "max_concurrency": 1 if task else resource.max_concurrency,
        "env": env_vars,
        "dependencies": list(resource.dependencies or ()),
        "system_dependencies": list(resource.system_dependencies or ()),
        "scaler_type": "REQUEST_COUNT" if task else resource.effective_scaler_type,
        "scaler_value": 1 if task else resource.scaler_value,
    }
    # cloud knobs: given to build_spec (which records every one it is given as cloud-only) only when turned off, so a
    # resource that left rc2's defaults has no notes it never wrote
    for knob in ("flashboot", "accelerate_downloads"):
        if not getattr(resource, knob):
            options[knob] = False
    if gpus is not None:
        options["gpu"] = gpus
    if resource.cpu is not None:
        options["cpu"] = list(resource.cpu)
    if resource.datacenter:
        options["datacenter"] = list(resource.datacenter)
    if resource.min_cuda_version is not None:
        options["min_cuda_version"] = resource.min_cuda_version
    volumes = _volumes(resource)
    if volumes:
        options["volume"] = list(volumes)
    spec = build_spec(options)
    kind = "routes" if resource.kind is ResourceKind.API else "function"
    return dataclasses.replace(
        spec,
        kind=kind,
        app=app,
        app_env=env,
        single_use=task,
        schedule=resource.schedule,
        cloud_only=(*spec.cloud_only, *notes, *_cloud_only(resource)),
    )


def endpoint_for(handle: Any, *, env: str | None = None, model_store: Path | None = None) -> Any:
    """The flashpoint handle that serves an rc2 handle's resource, in its App's environment (``env`` to serve it in
    another): an ``EndpointFunction`` (queue, task) or a route ``Endpoint`` (api, ``serving.api_routes``)."""
    from flashpoint.runpodapps.serving import ApiEndpoint
    from flashpoint.sdk.handles import EndpointFunction

    app = handle._app
    spec = endpoint_spec(app.name, env or app.env, handle.spec, model_store=model_store)
    if handle.spec.kind is ResourceKind.API:
        return ApiEndpoint(spec, handle)
    served: EndpointFunction[..., Any] = EndpointFunction(spec, handle._fn)
    served.rc2_handle = handle  # type: ignore[attr-defined]  # the worker runs its @fn.init (serving.worker_init)
    return served


# --------------------------------------------------------------------------------------------------------------------
# Targets: where a call goes


#: the endpoints an embedded plane was told of, per connection: a script registers each resource once
_registered: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def _view_data(view: JobView) -> dict[str, Any]:
    """A job as rc2's data plane answers it: ``id``, ``status``, ``output`` when completed, ``error`` when it ended
    otherwise."""
    data: dict[str, Any] = {"id": view.id, "status": view.status.value}
    if view.status is JobStatus.COMPLETED:
        data["output"] = codec.decode_output(view.output, binary=view.output_binary)
    elif view.status.terminal:
        if view.error is not None:
            data["error"] = f"{view.error.type}: {view.error.message}"
        else:
            reason = f" ({view.reason.value})" if view.reason is not None else ""
            data["error"] = f"job {view.id} ended {view.status.value}{reason}"
    return data


class EndpointTarget(InvocationTarget):
    """Calls one flashpoint endpoint, ``app.env.name``, through the process's connection, answering as rc2's sentinel
    target does. ``handle`` (an rc2 handle of this process): an embedded plane is told the endpoint's code on first
    use; a server already serves it (a ``.remote`` of a resource the server does not have is ``EndpointNotFound``)."""

    def __init__(self, app: str, env: str, name: str, handle: Any = None) -> None:
        self.app_name = app
        self.env_name = env
        self.resource_name = name
        self.key = resource_key(app, env, name)
        self._handle = handle

    async def _connection(self) -> Connection:
        conn = connect()
        if self._handle is not None and getattr(conn, "hosts_code", False):
            done = _registered.setdefault(conn, set())
            if self.key not in done:
                served = endpoint_for(self._handle, env=self.env_name)
                await conn.register(served.spec, _worker_target(served))
                done.add(self.key)
        return conn

    def _missing(self) -> EndpointNotFound:
        return EndpointNotFound(self.app_name, self.resource_name)

    def _request(self, payload: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """A job request's input (rc2's ``__empty`` dropped; values JSON cannot carry in flashpoint's encoding) and
        the keys beside it (``webhook``, ``policy``, ``s3Config``)."""
        data = payload.get("input", {})
        if isinstance(data, dict):
            data = {key: value for key, value in data.items() if key != EMPTY}
            if not all(codec.is_json(value) for value in data.values()):
                data = codec.encode_call((), data)
        extra: dict[str, Any] = {key: value for key, value in payload.items() if key != "input"}
        extra["flashpoint"] = {"binary_ok": True}
        return data, extra

    async def _submit_view(self, payload: Mapping[str, Any]) -> tuple[Connection, JobView]:
        conn = await self._connection()
        data, extra = self._request(payload)
        try:
            return conn, await conn.submit(self.key, data, extra)
        except NotFoundError:
            raise self._missing() from None

    async def invoke(self, payload: dict[str, Any], *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> Any:
        conn, view = await self._submit_view(payload)
        return self.unwrap(await self._final(conn, view, timeout))

    async def submit(self, payload: dict[str, Any]) -> dict[str, Any]:
        _, view = await self._submit_view(payload)
        return _view_data(view)

    async def _final(self, conn: Connection, view: JobView, timeout: float) -> dict[str, Any]:
        try:
            final = await conn.wait(view.id, timeout)
        except TimeoutError:
            raise TimeoutError(f"job {view.id} did not complete within {timeout}s") from None
        return _view_data(final)

    async def job_status(self, job_id: str) -> dict[str, Any]:
        conn = await self._connection()
        return _view_data(await self._job(conn.get, job_id))

    async def cancel_job(self, job_id: str) -> dict[str, Any]:
        conn = await self._connection()
        return _view_data(await self._job(conn.cancel, job_id))

    async def retry_job(self, job_id: str) -> dict[str, Any]:
        conn = await self._connection()
        try:
            view: JobView = await conn.retry(job_id)
        except NotFoundError:
            raise self._missing() from None
        except Error as exc:  # a job that may not be retried (COMPLETED, say): rc2 raises for a refused retry
            raise RemoteExecutionError(f"retry failed: {exc}") from None
        return _view_data(view)

    async def _job(self, call: Callable[[str], Any], job_id: str) -> JobView:
        try:
            view: JobView = await call(job_id)
        except NotFoundError:
            raise self._missing() from None
        return view

    async def wait(
        self,
        job_data: dict[str, Any],
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        on_status: Callable[[dict[str, Any]], None] | None = None,
    ) -> Any:
        conn = await self._connection()
        if on_status is not None:
            on_status(job_data)
        try:
            final = await conn.wait(job_data["id"], timeout)
        except NotFoundError:
            raise self._missing() from None
        except TimeoutError:
            raise TimeoutError(
                f"job {job_data['id']} did not complete within {timeout}s (last status: {job_data.get('status')})"
            ) from None
        data = _view_data(final)
        if on_status is not None:
            on_status(data)
        return self.unwrap(data)

    def unwrap(self, data: dict[str, Any]) -> Any:
        return unwrap_job_output(data)

    async def stream_job(self, job_id: str, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> AsyncIterator[Any]:
        conn = await self._connection()
        deadline = asyncio.get_running_loop().time() + timeout
        chunks = _follow(conn, job_id)
        try:
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                try:
                    chunk = await asyncio.wait_for(chunks.__anext__(), max(remaining, 0.0))
                except StopAsyncIteration:
                    return
                except asyncio.TimeoutError:
                    raise TimeoutError(f"job {job_id} stream did not complete within {timeout}s") from None
                yield chunk
        except JobFailedError as exc:
            raise RemoteExecutionError(f"remote execution failed: {exc.remote_message or exc}") from None
        except NotFoundError:
            raise self._missing() from None

    async def request(
        self, method: str, path: str, body: Any = None, *, timeout: float = DEFAULT_TIMEOUT_SECONDS
    ) -> Any:
        conn = await self._connection()
        route = getattr(conn, "route", None)
        if route is None:
            raise RemoteExecutionError(
                f"api resource '{self.resource_name}' is reached over HTTP through a flashpoint server: serve the "
                "app with `flashpoint serve` and set FLASHPOINT_URL, or call its route at the server's URL"
            )
        try:
            return await route(self.key, method, path, body, timeout)
        except NotFoundError:
            raise self._missing() from None


async def _follow(conn: Connection, job_id: str) -> AsyncIterator[Any]:
    """The chunks of a job already submitted, as the connection streams them."""
    follow = getattr(conn, "follow", None)
    if follow is None:
        raise RemoteExecutionError("this connection cannot stream an existing job; use .stream(...) to submit one")
    async for chunk in follow(job_id):
        yield chunk


def _worker_target(served: Any) -> WorkerTarget:
    target: WorkerTarget = served.worker_target() if hasattr(served, "worker_target") else worker_target_for(served)
    return target


async def target_for(app: Any, spec: ResourceSpec) -> InvocationTarget:
    """``App._resolve``: the target of one of ``app``'s resources, in the environment its calls go to."""
    return EndpointTarget(app.name, environment_of(app), spec.name, app._resources.get(spec.name))


def stub_target(app: str, env: str, name: str) -> InvocationTarget:
    """A ``Queue``/``Api`` stub's target: a resource served elsewhere, reached by its id ``app.env.name``."""
    return EndpointTarget(app, env, name)
