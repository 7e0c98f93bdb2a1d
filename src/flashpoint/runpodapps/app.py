"""The App: where a project declares its resources (mirrors ``runpod/apps/app.py`` of ``runpod==2.0.0rc2``).

    from runpod import App, GpuType

    app = App("my-app")

    @app.queue(name="transcribe", gpu=GpuType.NVIDIA_GEFORCE_RTX_4090)
    async def transcribe(audio_url: str): ...

Every ``App`` made in this process is kept in a module-level registry (``get_registered_apps``), which is how
flashpoint's commands find a file's resources, as rc2's ``rp flash deploy`` does. The decorators check their options
at decoration time (``ResourceSpec``) and refuse two resources of one name in an App. A call resolves its resource
through ``App._resolve``: the spec is validated again, then flashpoint's bridge (``bridge.target_for``, imported on
the first call) gives the target, where rc2 picks its sentinel, dev or pod target. rc2's dev-session plumbing
(``_dev_events``, ``_dev_targets``, ``_resolve_dev_sibling``) is left out.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flashpoint.runpodapps.errors import InvalidResourceError
from flashpoint.runpodapps.gpu import GpuLike
from flashpoint.runpodapps.handles import ApiHandle, FunctionHandle
from flashpoint.runpodapps.spec import DEFAULT_SCALER_VALUE, ResourceKind, ResourceSpec
from flashpoint.runpodapps.targets import InvocationTarget
from flashpoint.runpodapps.volume import Volume

__all__ = ["DEFAULT_ENV", "App", "get_registered_apps"]

DEFAULT_ENV = "default"

_REGISTRY: list[App] = []


def get_registered_apps() -> list[App]:
    """all App instances created in this process."""
    return list(_REGISTRY)


def _clear_registry() -> None:
    """testing only."""
    _REGISTRY.clear()


def _restore_registry(apps: list[App]) -> None:
    """restore the registry from a discovery snapshot."""
    _REGISTRY[:] = apps


class App:
    """a named collection of deployable resources."""

    def __init__(self, name: str, *, env: str = DEFAULT_ENV):
        if not name or not isinstance(name, str):
            raise InvalidResourceError("App name must be a non-empty string")
        self.name = name
        self.env = env
        self._resources: dict[str, FunctionHandle | ApiHandle] = {}
        _REGISTRY.append(self)

    @property
    def resources(self) -> dict[str, FunctionHandle | ApiHandle]:
        return dict(self._resources)

    def _register(self, name: str, handle: FunctionHandle | ApiHandle) -> None:
        if name in self._resources:
            raise InvalidResourceError(f"duplicate resource name '{name}' in app '{self.name}'")
        self._resources[name] = handle

    def queue(
        self,
        *,
        name: str | None = None,
        gpu: GpuLike | list[GpuLike] | None = None,
        cpu: str | list[str] | None = None,
        gpu_count: int = 1,
        workers: int | tuple[int, int] | None = None,
        idle_timeout: int = 60,
        dependencies: list[str] | None = None,
        system_dependencies: list[str] | None = None,
        mounts: Mapping[str, Volume] | None = None,
        env: dict[str, Any] | None = None,
        datacenter: str | list[str] | None = None,
        image: str | None = None,
        registry_auth: str | None = None,
        model: Any | None = None,
        max_concurrency: int = 1,
        execution_timeout_ms: int = 0,
        flashboot: bool = True,
        scaler_type: str | None = None,
        scaler_value: int = DEFAULT_SCALER_VALUE,
        min_cuda_version: str | None = None,
        accelerate_downloads: bool = True,
        container_disk_gb: int | None = None,
    ) -> Callable[[Callable[..., Any]], FunctionHandle]:
        """declare a queue-based serverless endpoint from a function."""

        def decorator(fn: Callable[..., Any]) -> FunctionHandle:
            spec = ResourceSpec(
                kind=ResourceKind.QUEUE,
                name=name or fn.__name__,
                gpu=gpu,
                cpu=cpu,
                gpu_count=gpu_count,
                workers=workers,
                idle_timeout=idle_timeout,
                dependencies=dependencies,
                system_dependencies=system_dependencies,
                mounts=mounts,
                env=env,
                datacenter=datacenter,
                image=image,
                registry_auth=registry_auth,
                model=model,
                max_concurrency=max_concurrency,
                execution_timeout_ms=execution_timeout_ms,
                flashboot=flashboot,
                scaler_type=scaler_type,
                scaler_value=scaler_value,
                min_cuda_version=min_cuda_version,
                accelerate_downloads=accelerate_downloads,
                container_disk_gb=container_disk_gb,
            )
            handle = FunctionHandle(self, fn, spec)
            self._register(spec.name, handle)
            return handle

        return decorator

    def task(
        self,
        *,
        name: str | None = None,
        gpu: GpuLike | list[GpuLike] | None = None,
        cpu: str | list[str] | None = None,
        gpu_count: int = 1,
        dependencies: list[str] | None = None,
        system_dependencies: list[str] | None = None,
        mounts: Mapping[str, Volume] | None = None,
        env: dict[str, Any] | None = None,
        image: str | None = None,
        registry_auth: str | None = None,
        datacenter: str | list[str] | None = None,
        min_cuda_version: str | None = None,
        accelerate_downloads: bool = True,
        container_disk_gb: int | None = None,
    ) -> Callable[[Callable[..., Any]], FunctionHandle]:
        """declare ephemeral compute from a function (on flashpoint: a single-use worker per job)."""

        def decorator(fn: Callable[..., Any]) -> FunctionHandle:
            spec = ResourceSpec(
                kind=ResourceKind.TASK,
                name=name or fn.__name__,
                gpu=gpu,
                cpu=cpu,
                gpu_count=gpu_count,
                dependencies=dependencies,
                system_dependencies=system_dependencies,
                mounts=mounts,
                env=env,
                image=image,
                registry_auth=registry_auth,
                datacenter=datacenter,
                min_cuda_version=min_cuda_version,
                accelerate_downloads=accelerate_downloads,
                container_disk_gb=container_disk_gb,
            )
            handle = FunctionHandle(self, fn, spec)
            self._register(spec.name, handle)
            return handle

        return decorator

    def api(
        self,
        *,
        name: str | None = None,
        gpu: GpuLike | list[GpuLike] | None = None,
        cpu: str | list[str] | None = None,
        gpu_count: int = 1,
        workers: int | tuple[int, int] | None = None,
        idle_timeout: int = 60,
        dependencies: list[str] | None = None,
        system_dependencies: list[str] | None = None,
        mounts: Mapping[str, Volume] | None = None,
        env: dict[str, Any] | None = None,
        datacenter: str | list[str] | None = None,
        image: str | None = None,
        registry_auth: str | None = None,
        model: Any | None = None,
        execution_timeout_ms: int = 0,
        flashboot: bool = True,
        scaler_type: str | None = None,
        scaler_value: int = DEFAULT_SCALER_VALUE,
        min_cuda_version: str | None = None,
        accelerate_downloads: bool = True,
        container_disk_gb: int | None = None,
    ) -> Callable[[Any], ApiHandle]:
        """declare a load-balanced serverless endpoint.

        decorate a class with route markers for the native experience, or a zero-argument function returning an
        asgi app to serve an existing fastapi/starlette application::

            @app.api(name="inference", gpu=GpuType.NVIDIA_L4)
            class Inference:
                @init
                def setup(self): self.model = load()

                @post("/generate")
                async def generate(self, body: dict): ...

            @app.api(name="fast", cpu="cpu5c-2-4")
            def web():
                from fastapi import FastAPI
                server = FastAPI()
                ...
                return server
        """

        def decorator(target: Any) -> ApiHandle:
            spec = ResourceSpec(
                kind=ResourceKind.API,
                name=name or target.__name__,
                gpu=gpu,
                cpu=cpu,
                gpu_count=gpu_count,
                workers=workers,
                idle_timeout=idle_timeout,
                dependencies=dependencies,
                system_dependencies=system_dependencies,
                mounts=mounts,
                env=env,
                datacenter=datacenter,
                image=image,
                registry_auth=registry_auth,
                model=model,
                execution_timeout_ms=execution_timeout_ms,
                flashboot=flashboot,
                scaler_type=scaler_type,
                scaler_value=scaler_value,
                min_cuda_version=min_cuda_version,
                accelerate_downloads=accelerate_downloads,
                container_disk_gb=container_disk_gb,
            )
            handle = ApiHandle(self, target, spec)
            self._register(spec.name, handle)
            return handle

        return decorator

    async def _resolve(self, spec: ResourceSpec) -> InvocationTarget:
        """resolve a resource spec to an invocation target: flashpoint's bridge, for queue, api and task alike."""
        spec.validate()
        from flashpoint.runpodapps import bridge  # type: ignore[attr-defined,unused-ignore]

        target: InvocationTarget = await bridge.target_for(self, spec)
        return target

    def __repr__(self) -> str:
        return f"<App {self.name!r} resources={len(self._resources)}>"
