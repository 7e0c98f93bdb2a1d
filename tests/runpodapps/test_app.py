"""The App (rc2's ``runpod/apps/app.py``): its name, the registry, the three decorators' options and checks, and the
package's surface (``flashpoint.runpodapps.__all__``)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import flashpoint.runpodapps as runpodapps
from flashpoint.runpodapps import (
    ApiHandle,
    App,
    FunctionHandle,
    GpuGroup,
    GpuType,
    Model,
    NetworkVolume,
    ResourceKind,
    Secret,
    get,
    get_registered_apps,
)
from flashpoint.runpodapps.app import DEFAULT_ENV, _clear_registry, _restore_registry
from flashpoint.runpodapps.errors import InvalidResourceError

#: runpod/apps/__init__.py's __all__ of runpod==2.0.0rc2 (test_rc2_surface.py compares it with rc2 itself)
RC2_ALL = {
    "Api", "ApiHandle", "App", "AppError", "Context", "DataCenter", "EndpointNotFound", "FunctionHandle",
    "GlobalVolume", "Job", "Model", "NetworkVolume", "Queue", "Secret", "Volume", "RemoteExecutionError",
    "ResourceKind", "ResourceSpec", "RouteSpec", "ScheduleNotSupported", "current_context", "delete", "get",
    "get_registered_apps", "init", "is_local", "local_entrypoint", "patch", "post", "put", "schedule",
}  # fmt: skip


def test_the_package_surface() -> None:
    assert set(runpodapps.__all__) == RC2_ALL | {"GpuGroup", "GpuType", "CpuInstanceType"}
    assert len(runpodapps.__all__) == len(set(runpodapps.__all__))
    for name in runpodapps.__all__:
        assert hasattr(runpodapps, name), name


def test_importing_loads_no_third_party_package() -> None:
    code = "import sys, flashpoint.runpodapps; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    heavy = {"runpod", "cloudpickle", "aiohttp", "fastapi", "starlette", "httpx", "pydantic", "uvicorn"}
    assert not {name.split(".")[0] for name in loaded} & heavy


def test_app_name_and_env() -> None:
    app = App("my-app")
    assert (app.name, app.env, DEFAULT_ENV) == ("my-app", "default", "default")
    assert App("x", env="prod").env == "prod"
    assert repr(app) == "<App 'my-app' resources=0>"


@pytest.mark.parametrize("name", ["", None, 3])
def test_bad_app_name(name: Any) -> None:
    with pytest.raises(InvalidResourceError) as raised:
        App(name)
    assert str(raised.value) == "App name must be a non-empty string"
    assert get_registered_apps() == []


def test_registry() -> None:
    first, second = App("a"), App("b")
    assert get_registered_apps() == [first, second]
    get_registered_apps().clear()  # a copy
    assert len(get_registered_apps()) == 2
    _clear_registry()
    assert get_registered_apps() == []
    _restore_registry([second])
    assert get_registered_apps() == [second]


def test_duplicate_resource_names() -> None:
    app = App("dup")

    @app.queue(name="work")
    def one() -> None: ...

    with pytest.raises(InvalidResourceError) as raised:

        @app.task(name="work")
        def two() -> None: ...

    assert str(raised.value) == "duplicate resource name 'work' in app 'dup'"
    with pytest.raises(InvalidResourceError, match="^duplicate resource name 'work' in app 'dup'$"):
        app.api(name="work")(one._fn)
    assert list(app.resources) == ["work"]
    # two apps may hold the same name
    other = App("other")
    other.queue(name="work")(one._fn)


def test_queue_options_reach_the_spec() -> None:
    app = App("opts")
    volume = NetworkVolume("data")
    model = Model("Qwen/Qwen2.5-0.5B")
    handle = app.queue(
        name="chat",
        gpu=[GpuType.NVIDIA_H200, "4090"],
        gpu_count=2,
        workers=(1, 4),
        idle_timeout=30,
        dependencies=["vllm"],
        system_dependencies=["ffmpeg"],
        mounts={"/runpod-volume": volume},
        env={"HF_TOKEN": Secret("hf"), "MODE": "fast"},
        datacenter="eu-ro-1",
        image="img:1",
        registry_auth="cred",
        model=model,
        max_concurrency=3,
        execution_timeout_ms=60000,
        flashboot=False,
        scaler_type="request_count",
        scaler_value=2,
        min_cuda_version="12.8",
        accelerate_downloads=False,
        container_disk_gb=40,
    )(lambda prompt: prompt)
    assert isinstance(handle, FunctionHandle)
    spec = handle.spec
    assert spec.kind is ResourceKind.QUEUE and spec.name == "chat"
    assert spec.gpu == ["NVIDIA H200", "NVIDIA GeForce RTX 4090"]
    assert (spec.gpu_count, spec.workers, spec.idle_timeout) == (2, (1, 4), 30)
    assert (spec.dependencies, spec.system_dependencies) == (["vllm"], ["ffmpeg"])
    assert spec.mounts == {"/runpod-volume": volume}
    assert spec.datacenter == ["EU-RO-1"]
    assert (spec.image, spec.registry_auth, spec.model) == ("img:1", "cred", model)
    assert (spec.max_concurrency, spec.execution_timeout_ms, spec.flashboot) == (3, 60000, False)
    assert (spec.scaler_type, spec.scaler_value, spec.min_cuda_version) == ("REQUEST_COUNT", 2, "12.8")
    assert (spec.accelerate_downloads, spec.container_disk_gb) == (False, 40)
    assert spec.env is not None and spec.env["MODE"] == "fast"


def test_defaults_per_kind() -> None:
    app = App("defaults")

    def work() -> None: ...

    queue = app.queue()(work)
    task = app.task(name="t")(work)
    api = app.api(name="a")(lambda: None)
    assert queue.spec.name == "work"
    for handle in (queue, task, api):
        assert (handle.spec.gpu, handle.spec.cpu, handle.spec.workers) == (None, None, (0, 3))
        assert (handle.spec.gpu_count, handle.spec.idle_timeout, handle.spec.scaler_value) == (1, 60, 4)
    assert (queue.spec.kind, task.spec.kind, api.spec.kind) == (ResourceKind.QUEUE, ResourceKind.TASK, ResourceKind.API)
    assert isinstance(api, ApiHandle)


@pytest.mark.parametrize(
    ("decorator", "options", "message"),
    [
        ("queue", {"gpu": "TPU"}, None),
        ("queue", {"gpu": GpuGroup.ADA_24, "cpu": "cpu3c-1-2"}, "resource 'work': gpu and cpu are mutually exclusive"),
        ("queue", {"workers": (5, 1)}, "workers min (5) cannot exceed max (1)"),
        ("task", {"datacenter": "moon"}, "invalid datacenter: 'moon'"),
        ("api", {"scaler_type": "CPU"}, "scaler_type must be one of ['QUEUE_DELAY', 'REQUEST_COUNT'], got 'CPU'"),
        ("task", {"cpu": "cpu3c-1-2", "min_cuda_version": "12.4"}, None),
    ],
)
def test_decoration_checks(decorator: str, options: dict[str, Any], message: str | None) -> None:
    app = App("checks")

    def work() -> None: ...

    with pytest.raises(InvalidResourceError) as raised:
        getattr(app, decorator)(**options)(work)
    if message is not None:
        assert str(raised.value) == message
    assert app.resources == {}


def test_task_and_api_take_rc2s_options_only() -> None:
    app = App("strict")
    with pytest.raises(TypeError):
        app.task(workers=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        app.api(max_concurrency=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        app.queue("name")  # type: ignore[call-arg]


def test_resources_is_a_copy() -> None:
    app = App("copy")

    @app.api()
    class Web:
        @get("/")
        def index(self) -> None: ...

    app.resources.clear()
    assert list(app.resources) == ["Web"]
    assert repr(app) == "<App 'copy' resources=1>"
