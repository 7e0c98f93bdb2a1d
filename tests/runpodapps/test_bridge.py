"""runpodapps/bridge.py: an rc2 resource as a flashpoint endpoint, by table (``endpoint_spec``: every option's local
meaning, or its cloud-only note), the environment calls go to (``environment_of``), and rc2's verbs through a real
embedded plane with real worker processes and simulated GPUs: an App file written to tmp_path is imported as discovery
imports it (``runpod`` is flashpoint's there), and its handles' calls go through the bridge's ``EndpointTarget``.
Tests that start worker processes are slow but one, a smoke test of ``.remote``; cancelling a job no worker can take
starts none and stays in the quick suite."""

from __future__ import annotations

import asyncio
import json
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flashpoint.hosting.discovery import load_module
from flashpoint.hosting.embedded import EmbeddedServer
from flashpoint.runpodapps import (
    App,
    EndpointNotFound,
    GpuGroup,
    GpuType,
    Model,
    NetworkVolume,
    Queue,
    RemoteExecutionError,
    Secret,
)
from flashpoint.runpodapps.bridge import (
    TASK_WORKERS_MAX,
    EndpointTarget,
    endpoint_for,
    endpoint_spec,
    environment_of,
    resource_key,
    stub_target,
    target_for,
)
from flashpoint.runpodapps.errors import InvalidResourceError
from flashpoint.runpodapps.model import ModelError
from flashpoint.runpodapps.spec import ResourceKind, ResourceSpec, RouteSpec
from flashpoint.runpodapps.volume import GlobalVolume
from flashpoint.sdk.endpoint import EndpointFunction
from flashpoint.spec import EndpointSpec

# --------------------------------------------------------------------------------------------------------------------
# endpoint_spec: a resource's options, by table


def view(spec: EndpointSpec) -> dict[str, Any]:
    """The endpoint's fields an rc2 option decides, by the option's name (or a short one)."""
    return {
        "gpu": spec.describe_gpu(),
        "gpu_count": spec.gpu_count,
        "workers": (spec.workers_min, spec.workers_max),
        "idle_timeout": spec.idle_timeout_s,
        "single_use": spec.single_use,
        "max_concurrency": spec.max_concurrency,
        "execution_timeout_ms": spec.execution_timeout_ms,
        "scaler": (spec.scaler_type.value, spec.scaler_value),
        "kind": spec.kind,
        "env": dict(spec.env),
        "volumes": [volume.name for volume in spec.volumes],
        "dependencies": spec.dependencies,
        "system_dependencies": spec.system_dependencies,
        "datacenters": spec.datacenters,
        "min_cuda_version": spec.min_cuda_version,
        "flashboot": spec.flashboot,
        "accelerate_downloads": spec.accelerate_downloads,
        "schedule": spec.schedule,
        "cloud_only": spec.cloud_only,
    }


QUEUE_DEFAULTS = {
    "gpu": "ANY",
    "gpu_count": 1,
    "workers": (0, 3),  # rc2's DEFAULT_WORKERS
    "idle_timeout": 60.0,
    "single_use": False,
    "max_concurrency": 1,
    "execution_timeout_ms": 0,
    "scaler": ("QUEUE_DELAY", 4),
    "kind": "function",
    "env": {},
    "volumes": [],
    "dependencies": (),
    "system_dependencies": (),
    "datacenters": (),
    "min_cuda_version": None,
    "flashboot": True,
    "accelerate_downloads": True,
    "schedule": None,
    "cloud_only": (),  # rc2's defaults (flashboot, accelerate_downloads on) are not notes the user wrote
}

QUEUE, API, TASK = ResourceKind.QUEUE, ResourceKind.API, ResourceKind.TASK
NOT_IN_CATALOG = "(not in flashpoint's GPU catalog; dropped from the candidates)"

OPTIONS: list[Any] = [
    pytest.param(QUEUE, {}, QUEUE_DEFAULTS, id="queue defaults"),
    pytest.param(
        QUEUE,
        {"gpu": [GpuGroup.AMPERE_80, GpuType.NVIDIA_H200]},
        {"gpu": "NVIDIA A100 80GB PCIe > NVIDIA A100-SXM4-80GB > NVIDIA H200", "cloud_only": ()},
        id="gpu order kept (pool first)",
    ),
    pytest.param(
        QUEUE,
        {"gpu": [GpuType.NVIDIA_H200, GpuGroup.AMPERE_80]},
        {"gpu": "NVIDIA H200 > NVIDIA A100 80GB PCIe > NVIDIA A100-SXM4-80GB"},
        id="gpu order kept (model first)",
    ),
    pytest.param(QUEUE, {"gpu": "B200"}, {"gpu": "NVIDIA B200"}, id="rc2 shorthand"),
    pytest.param(
        QUEUE,
        {"gpu": [GpuType.NVIDIA_H100_NVL, GpuType.NVIDIA_H200]},
        {"gpu": "NVIDIA H200", "cloud_only": (f"gpu='NVIDIA H100 NVL' {NOT_IN_CATALOG}",)},
        id="a GPU not in the catalog dropped with a note",
    ),
    pytest.param(
        QUEUE,
        {"gpu": "H100"},  # rc2 expands it to the three H100s; flashpoint's catalog has the SXM one
        {
            "gpu": "NVIDIA H100 80GB HBM3",
            "cloud_only": (f"gpu='NVIDIA H100 PCIe' {NOT_IN_CATALOG}", f"gpu='NVIDIA H100 NVL' {NOT_IN_CATALOG}"),
        },
        id="shorthand partly in the catalog",
    ),
    pytest.param(QUEUE, {"gpu": GpuGroup.ANY, "gpu_count": 2}, {"gpu": "ANY (x2)", "gpu_count": 2}, id="gpu_count"),
    pytest.param(
        QUEUE, {"cpu": ["cpu5c-4-8", "cpu3c-2-4"]}, {"gpu": "cpu=cpu5c-4-8 > cpu3c-2-4"}, id="cpu flavours in order"
    ),
    pytest.param(QUEUE, {"cpu": "cpu3c-2-4"}, {"gpu": "cpu=cpu3c-2-4"}, id="one cpu flavour"),
    pytest.param(QUEUE, {"workers": 5}, {"workers": (0, 5)}, id="workers=n"),
    pytest.param(QUEUE, {"workers": (1, 4)}, {"workers": (1, 4)}, id="workers=(min, max)"),
    pytest.param(QUEUE, {"idle_timeout": 5}, {"idle_timeout": 5.0}, id="idle_timeout"),
    pytest.param(
        QUEUE,
        {"max_concurrency": 4, "execution_timeout_ms": 60_000},
        {"max_concurrency": 4, "execution_timeout_ms": 60_000},
        id="concurrency and execution timeout",
    ),
    pytest.param(
        QUEUE,
        {"scaler_type": "request_count", "scaler_value": 2},
        {"scaler": ("REQUEST_COUNT", 2)},
        id="scaler",
    ),
    pytest.param(
        QUEUE,
        {"dependencies": ["numpy>=1", "torch"], "system_dependencies": ["ffmpeg"]},
        {"dependencies": ("numpy>=1", "torch"), "system_dependencies": ("ffmpeg",)},
        id="dependencies",
    ),
    pytest.param(
        QUEUE,
        {"datacenter": "EU-RO-1", "min_cuda_version": "12.8"},
        {"datacenters": ("EU-RO-1",), "min_cuda_version": "12.8"},
        id="datacenter and cuda",
    ),
    pytest.param(
        QUEUE,
        {"flashboot": False, "accelerate_downloads": False},
        {
            "flashboot": False,
            "accelerate_downloads": False,
            "cloud_only": ("flashboot=False", "accelerate_downloads=False"),
        },
        id="cloud knobs turned off are noted",
    ),
    pytest.param(
        QUEUE,
        {"env": {"TOKEN": Secret("hf-token"), "N": 3, "MODE": "fast"}},
        {"env": {"TOKEN": "{{ RUNPOD_SECRET_hf-token }}", "N": "3", "MODE": "fast"}},
        id="env with a secret",
    ),
    pytest.param(
        QUEUE,
        {"mounts": {"/runpod-volume": NetworkVolume("data")}},
        {"volumes": ["data"], "cloud_only": ()},
        id="mount at the endpoint path",
    ),
    pytest.param(
        QUEUE,
        {"image": "me/img:1", "registry_auth": "creds", "container_disk_gb": 20},
        {
            "cloud_only": (
                "image='me/img:1' (the code runs in flashpoint's Python environment)",
                "registry_auth='creds'",
                "container_disk_gb=20",
            )
        },
        id="image, registry auth, disk: cloud only",
    ),
    pytest.param(QUEUE, {"schedule": "*/5 * * * *"}, {"schedule": "*/5 * * * *"}, id="schedule carried"),
    pytest.param(
        TASK,
        {},
        {
            "workers": (0, TASK_WORKERS_MAX),
            "idle_timeout": 0.0,
            "single_use": True,
            "max_concurrency": 1,
            "scaler": ("REQUEST_COUNT", 1),
            "kind": "function",
            "cloud_only": (),
        },
        id="task",
    ),
    pytest.param(
        TASK,
        {"cpu": "cpu3c-2-4", "mounts": {"/data": NetworkVolume("scratch")}},
        {
            "gpu": "cpu=cpu3c-2-4",
            "volumes": ["scratch"],
            "cloud_only": ("mounts['/data'] (the volume 'scratch' is at Volume.path, not at /data)",),
        },
        id="task mount elsewhere than the endpoint path",
    ),
    pytest.param(
        TASK,
        {"gpu": GpuType.NVIDIA_H200, "mounts": {"/models": GlobalVolume("weights")}},
        {"volumes": ["weights"], "single_use": True},
        id="task global volume",
    ),
    pytest.param(
        API,
        {"routes": [RouteSpec("GET", "/x", "x")]},
        {"kind": "routes", "scaler": ("REQUEST_COUNT", 4), "workers": (0, 3), "single_use": False},
        id="api",
    ),
    pytest.param(
        API,
        {"routes": [RouteSpec("GET", "/x", "x")], "scaler_type": "QUEUE_DELAY", "workers": 2, "idle_timeout": 9},
        {"kind": "routes", "scaler": ("QUEUE_DELAY", 4), "workers": (0, 2), "idle_timeout": 9.0},
        id="api options",
    ),
]


@pytest.mark.parametrize(("kind", "options", "expected"), OPTIONS)
def test_endpoint_spec_gives_each_option_its_meaning(
    kind: ResourceKind, options: dict[str, Any], expected: dict[str, Any]
) -> None:
    spec = endpoint_spec("shop", "default", ResourceSpec(kind=kind, name="res", **options))

    got = view(spec)
    assert {key: got[key] for key in expected} == expected


def test_the_endpoint_belongs_to_its_app_and_environment() -> None:
    spec = endpoint_spec("shop", "staging", ResourceSpec(kind=QUEUE, name="add"))

    assert (spec.name, spec.app, spec.app_env) == ("add", "shop", "staging")
    assert spec.key == "shop.staging.add" == resource_key("shop", "staging", "add")


BAD: list[Any] = [
    pytest.param(
        {"gpu": GpuType.NVIDIA_H100_NVL},
        InvalidResourceError,
        "resource 'res': no gpu of .*NVIDIA H100 NVL.* is in flashpoint's GPU catalog",
        id="every GPU unknown",
    ),
    pytest.param(
        {"gpu": [GpuType.NVIDIA_H100_NVL, GpuType.NVIDIA_H100_PCIe]},
        InvalidResourceError,
        r"`flashpoint gpus` lists it\); name a pool",
        id="every GPU of a list unknown",
    ),
]


@pytest.mark.parametrize(("options", "error", "message"), BAD)
def test_endpoint_spec_refuses_what_has_no_meaning_here(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        endpoint_spec("shop", "default", ResourceSpec(kind=QUEUE, name="res", **options))


@pytest.mark.parametrize(
    ("app", "env", "what"),
    [
        ("../../etc", "default", "App name '../../etc'"),
        ("my app", "default", "App name 'my app'"),
        ("a.b", "default", "App name 'a.b'"),
        ("shop", "stag/ing", "environment 'stag/ing'"),
        ("shop", "", "environment ''"),
        ("x" * 64, "default", "App name"),
    ],
)
def test_an_app_name_or_env_that_cannot_be_an_id_or_a_folder_is_refused(app: str, env: str, what: str) -> None:
    # rc2 takes any App name; here it becomes the endpoint id app.env.name and the folder of the app's volumes
    with pytest.raises(InvalidResourceError, match=re.escape(what) + ".* cannot be served by flashpoint"):
        endpoint_spec(app, env, ResourceSpec(kind=QUEUE, name="res"))


def model_store_with(root: Path, repo: str, commit: str = "c0ffee") -> Path:
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    (folder / "snapshots" / commit).mkdir(parents=True)
    return folder / "snapshots" / commit


def test_a_model_in_the_store_is_told_to_the_workers(tmp_path: Path) -> None:
    snapshot = model_store_with(tmp_path, "org/llm")
    resource = ResourceSpec(kind=QUEUE, name="chat", model=Model("org/llm"), env={"MODE": "chat"})

    spec = endpoint_spec("shop", "default", resource, model_store=tmp_path)

    assert spec.env == {
        "MODE": "chat",
        "FLASHPOINT_MODELS": json.dumps({"org/llm": str(snapshot)}),
        "HF_HUB_CACHE": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
    }


def test_a_model_missing_from_the_store_names_the_path(tmp_path: Path) -> None:
    resource = ResourceSpec(kind=API, name="chat", model="org/absent", routes=[RouteSpec("POST", "/c", "c")])

    with pytest.raises(ModelError, match=f"looked for {tmp_path / 'models--org--absent' / 'snapshots' / 'main'}"):
        endpoint_spec("shop", "default", resource, model_store=tmp_path)


def test_endpoint_spec_validates_the_resource_again() -> None:
    resource = ResourceSpec(kind=QUEUE, name="res")
    resource.workers = (3, 1)  # changed after decoration: the call checks it again, as rc2's _resolve does

    with pytest.raises(InvalidResourceError, match=r"workers min \(3\) cannot exceed max \(1\)"):
        endpoint_spec("shop", "default", resource)


# --------------------------------------------------------------------------------------------------------------------
# environment_of, endpoint_for, targets


ENVIRONMENTS = [
    pytest.param("default", None, "default", id="App's default"),
    pytest.param("staging", None, "staging", id="App.env"),
    pytest.param("staging", "prod", "prod", id="FLASH_ENVIRONMENT wins"),
    pytest.param("staging", "", "staging", id="empty FLASH_ENVIRONMENT ignored"),
]


@pytest.mark.parametrize(("app_env", "variable", "expected"), ENVIRONMENTS)
def test_environment_of(monkeypatch: pytest.MonkeyPatch, app_env: str, variable: str | None, expected: str) -> None:
    if variable is not None:
        monkeypatch.setenv("FLASH_ENVIRONMENT", variable)
    assert environment_of(App("shop", env=app_env)) == expected


async def test_a_handles_target_calls_its_apps_endpoint_in_the_environment_calls_go_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = App("shop", env="staging")

    @app.queue(name="add", gpu=GpuType.NVIDIA_H200)
    def add(a: int, b: int) -> int:
        return a + b

    target = await target_for(app, add.spec)
    assert isinstance(target, EndpointTarget)
    assert (target.key, target.app_name, target.env_name, target.resource_name) == (
        "shop.staging.add",
        "shop",
        "staging",
        "add",
    )
    monkeypatch.setenv("FLASH_ENVIRONMENT", "prod")
    assert (await target_for(app, add.spec)).key == "shop.prod.add"  # type: ignore[attr-defined]
    stub = stub_target("other", "default", "transcribe")
    assert isinstance(stub, EndpointTarget) and stub.key == "other.default.transcribe"


def test_endpoint_for_a_queue_function_serves_the_function_and_keeps_the_handle() -> None:
    app = App("shop", env="staging")

    @app.queue(name="add", gpu=GpuType.NVIDIA_H200)
    def add(a: int, b: int) -> int:
        return a + b

    served = endpoint_for(add)
    assert isinstance(served, EndpointFunction)
    assert served.__wrapped__ is add.__wrapped__
    assert served.rc2_handle is add  # type: ignore[attr-defined]
    assert served.spec.key == "shop.staging.add"
    assert endpoint_for(add, env="prod").spec.key == "shop.prod.add"


def test_endpoint_for_an_api_class_has_its_routes() -> None:
    from flashpoint.runpodapps import get, post

    app = App("shop")

    @app.api(name="web", cpu="cpu3c-2-4")
    class Web:
        @get("/health")
        def health(self) -> str:
            return "ok"

        @post("/echo")
        def echo(self, body: dict[str, Any]) -> dict[str, Any]:
            return body

    spec = endpoint_for(Web).spec
    assert spec.kind == "routes"
    assert {(route.method, route.path, route.target) for route in spec.routes} == {
        ("GET", "/health", "health"),
        ("POST", "/echo", "echo"),
    }


# --------------------------------------------------------------------------------------------------------------------
# Calls through a real embedded plane

APP_FILE = """
import os
import time
from pathlib import Path

from runpod import App, GpuType

app = App("shop")
other = App("other-shop")


@app.queue(name="add", gpu=GpuType.NVIDIA_H200, workers=(0, 1), idle_timeout=300)
def add(a, b=0):
    return {
        "app": "shop",
        "sum": a + b,
        "environment": os.environ.get("FLASH_ENVIRONMENT"),
        "resource": os.environ.get("FLASH_RESOURCE_NAME"),
        "pid": os.getpid(),
    }


@other.queue(name="add", gpu=GpuType.NVIDIA_H200, workers=(0, 1), idle_timeout=300)
def other_add(a, b=0):
    return {"app": "other-shop", "sum": a + b}


@app.queue(name="hello", gpu=GpuType.NVIDIA_H200)
def hello():
    return "hello"


@app.queue(name="count", gpu=GpuType.NVIDIA_H200)
def count(n):
    for i in range(n):
        yield i


@app.queue(name="explode", gpu=GpuType.NVIDIA_H200)
def explode(message):
    raise ValueError(message)


@app.queue(name="never", gpu=GpuType.NVIDIA_B200)
def never():
    return "no B200 in the fleet: this never runs"


@app.queue(name="flaky", gpu=GpuType.NVIDIA_H200)
def flaky(marker):
    path = Path(marker)
    if not path.exists():
        path.write_text("failed once")
        raise RuntimeError("the first try fails")
    return "second try"


@app.queue(name="slow", gpu=GpuType.NVIDIA_H200)
def slow(gate):
    # waits for a file the test never writes: only the execution timeout ends it
    while not Path(gate).exists():
        time.sleep(0.05)
    return "the gate opened"


@app.task(name="square", gpu=GpuType.NVIDIA_H200)
def square(x):
    return {"square": x * x, "pid": os.getpid()}
"""

FLEET = "NVIDIA_H200:4"


@pytest.fixture
def shop(tmp_path: Path, make_embedded: Callable[..., EmbeddedServer], restore_imports: None) -> Any:
    """The App file's module, imported as discovery imports it, calling through a fresh embedded plane (started
    after the import: its workers get the import's sys.path, as a script's plane does)."""
    path = tmp_path / "rc2_bridge_app.py"
    path.write_text(textwrap.dedent(APP_FILE))
    module = load_module(str(path))
    make_embedded(FLEET)
    return module


def plane_of(shop: Any) -> Any:
    from flashpoint.sdk.default_connection import connect

    embedded = connect()
    assert isinstance(embedded, EmbeddedServer)
    return embedded.plane


def test_remote_runs_the_function_on_a_worker_of_its_apps_endpoint(shop: Any) -> None:
    import os

    out = shop.add.remote(2, 3)  # positional arguments map onto parameter names

    assert out["sum"] == 5 and out["app"] == "shop"
    assert out["pid"] != os.getpid()  # a worker process ran it
    assert (out["environment"], out["resource"]) == ("default", "add")  # the worker is told where it runs
    assert shop.add.remote(a=1, b=1)["sum"] == 2
    assert asyncio.run(shop.add.remote.aio(4, b=5))["sum"] == 9
    assert shop.hello.remote() == "hello"  # no arguments: rc2's __empty marker never reaches the function
    # the plane knows the endpoints by their ids: app.env.name
    assert {"shop.default.add", "shop.default.hello"} <= set(plane_of(shop).endpoints)


@pytest.mark.slow
def test_spawn_gives_a_job_and_job_reconnects_by_id(shop: Any) -> None:
    job = shop.add.spawn(6, 7)

    assert job.id and job.status() in ("IN_QUEUE", "IN_PROGRESS", "COMPLETED")
    assert job.result()["sum"] == 13
    assert job.done and job.status() == "COMPLETED"
    assert job.output() == job.result()

    again = shop.add.job(job.id)
    assert again.id == job.id
    assert again.status() == "COMPLETED" and again.result()["sum"] == 13


@pytest.mark.slow
def test_stream_yields_a_generators_chunks(shop: Any) -> None:
    async def collect() -> list[int]:
        return [chunk async for chunk in shop.count.stream.aio(3)]

    assert list(shop.count.stream(4)) == [0, 1, 2, 3]
    assert asyncio.run(collect()) == [0, 1, 2]


@pytest.mark.slow
def test_a_raise_reaches_the_caller_as_remote_execution_error(shop: Any) -> None:
    with pytest.raises(RemoteExecutionError) as raised:
        shop.explode.remote("boom")
    assert str(raised.value) == "remote execution failed: ValueError: boom"

    job = shop.explode.spawn("again")
    with pytest.raises(RemoteExecutionError, match="remote execution failed: ValueError: again"):
        job.result()
    assert job.status() == "FAILED"


@pytest.mark.slow
def test_with_options_execution_timeout_ends_the_job(shop: Any, tmp_path: Path) -> None:
    job = shop.slow.with_options(execution_timeout=1000).spawn(str(tmp_path / "never-opened"))

    with pytest.raises(RemoteExecutionError, match="remote execution failed: TimeoutError: execution exceeded 1000 ms"):
        job.result(timeout=60)  # without the limit it would wait for a gate that never opens
    assert job.status() == "TIMED_OUT"
    assert plane_of(shop).job(job.id).execution_timeout_ms == 1000


def test_cancel_of_a_queued_job(shop: Any) -> None:
    job = shop.never.spawn()  # no device of the fleet can run it: it stays queued
    assert job.status() == "IN_QUEUE" and not job.done

    assert job.cancel() is job
    assert job.done and job.status() == "CANCELLED"
    with pytest.raises(RemoteExecutionError, match="remote execution failed: Cancelled"):
        job.result()


@pytest.mark.slow
def test_retry_of_a_failed_job_runs_it_again(shop: Any, tmp_path: Path) -> None:
    job = shop.flaky.spawn(str(tmp_path / "flaky-marker"))
    with pytest.raises(RemoteExecutionError, match="RuntimeError: the first try fails"):
        job.result()
    assert job.status() == "FAILED"

    assert job.retry() is job
    assert job.result() == "second try"  # the same job id, run again
    assert job.status() == "COMPLETED"


@pytest.mark.slow
def test_retry_of_a_completed_job_is_refused(shop: Any) -> None:
    job = shop.hello.spawn()
    assert job.result() == "hello"

    with pytest.raises(RemoteExecutionError, match="retry failed"):
        job.retry()


@pytest.mark.slow
def test_a_task_runs_on_a_single_use_worker(shop: Any) -> None:
    import os

    first = shop.square.spawn(7).result()
    second = shop.square.spawn(8).result()

    assert (first["square"], second["square"]) == (49, 64)
    assert first["pid"] != second["pid"] and os.getpid() not in (first["pid"], second["pid"])  # a worker per job
    spec = plane_of(shop).endpoints["shop.default.square"].spec
    assert spec.single_use and (spec.workers_min, spec.workers_max) == (0, TASK_WORKERS_MAX)


@pytest.mark.slow
def test_two_apps_same_named_resources_each_reach_their_own(shop: Any) -> None:
    assert shop.add.remote(2, 3)["app"] == "shop"
    assert shop.other_add.remote(2, 3) == {"app": "other-shop", "sum": 5}
    assert {"shop.default.add", "other-shop.default.add"} <= set(plane_of(shop).endpoints)


@pytest.mark.slow
def test_a_queue_stub_reaches_a_served_resource_and_a_missing_one_is_not_found(shop: Any) -> None:
    with pytest.raises(EndpointNotFound) as before:  # the plane does not serve it yet: a stub ships no code
        Queue(app="shop", name="add").remote(a=1)
    assert (before.value.app_name, before.value.resource_name) == ("shop", "add")

    shop.add.remote(0)  # the handle's first call registers its endpoint with the plane
    assert Queue(app="shop", name="add").remote(a=5, b=5)["sum"] == 10
    assert Queue(app="shop", name="add", env="default").spawn(a=1, b=1).result()["sum"] == 2

    with pytest.raises(EndpointNotFound, match="'missing' in app 'shop' is not deployed"):
        Queue(app="shop", name="missing").remote()
    with pytest.raises(EndpointNotFound, match="'add' in app 'nowhere' is not deployed"):
        Queue(app="nowhere", name="add").remote(a=1)
    with pytest.raises(EndpointNotFound):
        Queue(app="shop", name="add", env="staging").remote(a=1)  # another environment's endpoint
