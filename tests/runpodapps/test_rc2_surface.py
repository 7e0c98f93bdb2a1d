"""Drift guard (decision 0108): flashpoint's App surface against ``runpod==2.0.0rc2`` itself.

The session fixture ``rc2_venv`` (tests/rc2venv.py) installs rc2 from the package registry into a virtual environment
of its own. Small scripts run there (``RUNPOD_SKIP_AUTO_SYSTEM_CHECKS=true``, no ``RUNPOD_API_KEY``), one per table,
and the same code runs here against ``flashpoint.runpodapps``; the tests compare:

(a) the names: ``runpod.apps.__all__`` and the apps-surface entries of ``runpod._LAZY_ATTRS``;
(b) signatures, as ``inspect.signature`` text without annotations (rc2 writes ``Optional[...]``, flashpoint
    ``X | None``: the parameters, their kinds, order and defaults are what code depends on);
(c) the members and values of the enums, rc2's pools and constants;
(d) a table of bad declarations (the exception's class name and message must match exactly) and a table of good
    ones (the normalized ``ResourceSpec`` fields must match).

Without network the install fails: skipped locally, a failure in CI (``CI`` set).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import flashpoint.runpodapps
from tests.rc2venv import RC2_VERSION, Rc2Venv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: flashpoint's own additions to ``runpod.apps.__all__``: what runpod/__init__.py re-exports from runpod.apps.gpu
FLASHPOINT_EXTRA_NAMES = {"GpuGroup", "GpuType", "CpuInstanceType"}

#: the imports each side runs first; the code below sees the apps package as ``A`` and its modules by name
RC2_PRELUDE = """
import runpod
import runpod.apps as A
from runpod.apps import app as app_module, gpu, handles, job, markers, spec, stubs, targets, volume
"""
OURS_PRELUDE = """
import flashpoint.runpodapps as A
from flashpoint.runpodapps import app as app_module, gpu, handles, job, markers, spec, stubs, targets, volume
"""

# --- (a), (b), (c): one dump of the surface ------------------------------------------------------------------------

SURFACE = """
import inspect

def bare(obj):
    signature = inspect.signature(obj)
    parameters = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty))

SIGNED = {
    "App.__init__": A.App.__init__,
    "App.queue": A.App.queue,
    "App.task": A.App.task,
    "App.api": A.App.api,
    "FunctionHandle.__init__": A.FunctionHandle.__init__,
    "FunctionHandle.with_options": A.FunctionHandle.with_options,
    "FunctionHandle.init": A.FunctionHandle.init,
    "FunctionHandle.local": A.FunctionHandle.local,
    "ApiHandle.__init__": A.ApiHandle.__init__,
    "Queue.__init__": A.Queue.__init__,
    "Queue.with_options": A.Queue.with_options,
    "Api.__init__": A.Api.__init__,
    "Model.__init__": A.Model.__init__,
    "Secret.__init__": A.Secret.__init__,
    "NetworkVolume.__init__": A.NetworkVolume.__init__,
    "GlobalVolume.__init__": A.GlobalVolume.__init__,
    "ResourceSpec": A.ResourceSpec,
    "RouteSpec": A.RouteSpec,
    "schedule": A.schedule,
    "local_entrypoint": A.local_entrypoint,
    "get": A.get, "post": A.post, "put": A.put, "delete": A.delete, "patch": A.patch, "init": A.init,
    "current_context": A.current_context,
    "is_local": A.is_local,
    "get_registered_apps": A.get_registered_apps,
    "EndpointNotFound.__init__": A.EndpointNotFound.__init__,
    "Job.__init__": A.Job.__init__,
    "Job.status": A.Job._status_async,
    "Job.result": A.Job._result_async,
    "Job.cancel": A.Job._cancel_async,
    "Job.retry": A.Job._retry_async,
    "Job.stream": A.Job._stream_async,
    "resolve_gpu_string": gpu.resolve_gpu_string,
    "pool_for_gpu_type": gpu.pool_for_gpu_type,
    "args_to_input": targets.args_to_input,
    "build_job_options": targets.build_job_options,
    "merge_job_options": targets.merge_job_options,
    "unwrap_job_output": targets.unwrap_job_output,
    "normalize_mounts": volume.normalize_mounts,
    "validate_mounts": volume.validate_mounts,
}
for name in ("build_payload", "unwrap", "invoke", "submit", "job_status", "cancel_job", "retry_job", "stream_job",
             "wait", "request"):
    SIGNED["InvocationTarget." + name] = getattr(targets.InvocationTarget, name)

def members(enum):
    return [[member.name, member.value] for member in enum]

def public(obj):
    names = set(n for n in vars(obj) if not n.startswith("_"))
    names |= set(n for n, v in vars(type(obj)).items() if not n.startswith("_"))
    return sorted(names)

def f():
    pass

out = {
    "all": sorted(A.__all__),
    "signatures": {name: bare(obj) for name, obj in SIGNED.items()},
    "enums": {
        "GpuGroup": members(gpu.GpuGroup),
        "GpuType": members(gpu.GpuType),
        "CpuInstanceType": members(gpu.CpuInstanceType),
        "DataCenter": members(A.DataCenter),
        "ResourceKind": members(A.ResourceKind),
        "Context": members(A.Context),
    },
    "pools": {group.name: [t.name for t in types] for group, types in gpu.POOLS_TO_TYPES.items()},
    "constants": {
        "CUDA_VERSIONS": sorted(spec.CUDA_VERSIONS),
        "SCALER_TYPES": sorted(spec.SCALER_TYPES),
        "DEFAULT_WORKERS": list(spec.DEFAULT_WORKERS),
        "DEFAULT_SCALER_VALUE": spec.DEFAULT_SCALER_VALUE,
        "RESERVED_PATHS": sorted(markers.RESERVED_PATHS),
        "ROUTE_ATTR": markers.ROUTE_ATTR,
        "INIT_ATTR": markers.INIT_ATTR,
        "FINAL_STATUSES": sorted(targets.FINAL_STATUSES),
        "DEFAULT_TIMEOUT_SECONDS": targets.DEFAULT_TIMEOUT_SECONDS,
        "DEFAULT_ENV": app_module.DEFAULT_ENV,
        "DEFAULT_SIZE_GB": volume.DEFAULT_SIZE_GB,
        "ENDPOINT_MOUNT_PATH": str(volume.ENDPOINT_MOUNT_PATH),
    },
    "attributes": {
        "Job": public(A.Job({}, None)),
        "FunctionHandle": public(A.App("surface").queue()(f)),
        "Queue": public(A.Queue(app="a", name="q")),
        "Api": public(A.Api(app="a", name="q")),
        "Model": public(A.Model("a/b")),
        "Secret": public(A.Secret("s")),
        "NetworkVolume": public(A.NetworkVolume("v")),
        "GlobalVolume": public(A.GlobalVolume("v")),
    },
    "errors": {name: [c.__name__ for c in getattr(A, name).__mro__ if c.__module__ != "flashpoint.errors"]
               for name in ("AppError", "EndpointNotFound", "RemoteExecutionError", "ScheduleNotSupported")},
}
"""

RC2_SURFACE = (
    RC2_PRELUDE
    + SURFACE
    + """
import json
out["version"] = runpod.__version__
out["lazy"] = {name: module for name, module in runpod._LAZY_ATTRS.items() if module.startswith("runpod.apps")}
print(json.dumps(out))
"""
)


def run_rc2(venv: Rc2Venv, code: str, stdin: str = "") -> Any:
    done = venv.run(code, stdin)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_ours(code: str, **names: Any) -> dict[str, Any]:
    namespace: dict[str, Any] = dict(names)
    exec(OURS_PRELUDE + code, namespace)
    return namespace


@pytest.fixture(scope="module")
def rc2_surface(rc2_venv: Rc2Venv) -> dict[str, Any]:
    return run_rc2(rc2_venv, RC2_SURFACE)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def our_surface() -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(run_ours(SURFACE)["out"]))
    return out


def test_it_is_rc2(rc2_surface: dict[str, Any]) -> None:
    assert rc2_surface["version"] == RC2_VERSION


def test_names(rc2_surface: dict[str, Any], our_surface: dict[str, Any]) -> None:
    assert set(our_surface["all"]) == set(rc2_surface["all"]) | FLASHPOINT_EXTRA_NAMES
    lazy: dict[str, str] = rc2_surface["lazy"]
    assert set(lazy) <= set(flashpoint.runpodapps.__all__)
    assert {name for name, module in lazy.items() if module == "runpod.apps.gpu"} == FLASHPOINT_EXTRA_NAMES
    for name, module in lazy.items():
        ours = module.replace("runpod.apps", "flashpoint.runpodapps", 1)
        assert getattr(__import__(ours, fromlist=[name]), name) is getattr(flashpoint.runpodapps, name), name


def test_signatures(rc2_surface: dict[str, Any], our_surface: dict[str, Any]) -> None:
    assert our_surface["signatures"] == rc2_surface["signatures"]


@pytest.mark.parametrize("part", ["enums", "pools", "constants", "attributes", "errors"])
def test_values(rc2_surface: dict[str, Any], our_surface: dict[str, Any], part: str) -> None:
    assert our_surface[part] == rc2_surface[part]


# --- (d): declarations, run on both sides --------------------------------------------------------------------------

#: runs every row of a table in a fresh namespace (``A``, ``app = A.App("t")``, a function ``f``, the GPU enums) and
#: answers, per row, the exception's class name and message, or the fields of the spec of the handle ``h``
RUNNER = """
import json, sys

def fields(handle):
    spec = handle.spec
    return {
        "kind": spec.kind.value, "name": spec.name, "gpu": spec.gpu, "cpu": spec.cpu, "workers": list(spec.workers),
        "datacenter": spec.datacenter, "scaler_type": spec.scaler_type, "min_cuda_version": spec.min_cuda_version,
        "effective_scaler_type": spec.effective_scaler_type, "schedule": spec.schedule,
        "routes": [[r.method, r.path, r.handler_name] for r in spec.routes], "asgi_factory": spec.asgi_factory,
        "mounts": {path: [v.kind, v.reference] for path, v in spec.mounts.items()}, "repr": repr(handle),
        "init_name": getattr(handle, "_init_name", None),
    }

def run_rows(rows):
    results = []
    for code in rows:
        app_module._clear_registry()
        def f():
            pass
        namespace = {"A": A, "app": A.App("t"), "f": f, "GpuGroup": gpu.GpuGroup, "GpuType": gpu.GpuType,
                     "CpuInstanceType": gpu.CpuInstanceType}
        try:
            exec(code, namespace)
        except BaseException as exc:
            results.append([type(exc).__name__, str(exc)])
            continue
        results.append(fields(namespace["h"]) if "h" in namespace else ["", ""])
    app_module._clear_registry()
    return results
"""

BAD = [
    'A.App("")',
    "A.App(None)",
    'app.queue(gpu="TPU")(f)',
    'app.queue(gpu="H1000")(f)',
    "app.queue(gpu=3)(f)",
    'app.queue(gpu=("H100",))(f)',
    "app.queue(gpu=[GpuGroup.ADA_24, None])(f)",
    'app.queue(cpu=("cpu3c-1-2",))(f)',
    "app.queue(cpu=[])(f)",
    'app.queue(cpu=["cpu3c-1-2", " "])(f)',
    'app.queue(gpu="L4", cpu="cpu3c-1-2")(f)',
    "app.queue(workers=0)(f)",
    "app.queue(workers=(3, 2))(f)",
    'app.queue(workers="3")(f)',
    "app.queue(workers=(-1, 2))(f)",
    "app.queue(workers=(1, 2, 3))(f)",
    'app.queue(scaler_type="FAST")(f)',
    'app.api(scaler_type="cpu")(f)',
    'app.queue(min_cuda_version="12")(f)',
    'app.task(min_cuda_version="11.7")(f)',
    'app.queue(datacenter="MARS-1")(f)',
    'app.queue(datacenter=["US-CA-2", 7])(f)',
    "app.queue(gpu_count=0)(f)",
    "app.queue(max_concurrency=0)(f)",
    "app.queue(execution_timeout_ms=-1)(f)",
    "app.queue(scaler_value=0)(f)",
    "app.task(container_disk_gb=0)(f)",
    'app.queue(cpu="cpu3c-1-2", min_cuda_version="12.4")(f)',
    'app.queue(mounts={"/data": A.NetworkVolume("v")})(f)',
    'app.api(mounts={"/runpod-volume": A.NetworkVolume("v"), "/g": A.GlobalVolume("g")})(f)',
    'app.task(mounts={"/a": A.NetworkVolume("v"), "/a/b": A.GlobalVolume("g")})(f)',
    'app.task(mounts={"/a": A.NetworkVolume("v"), "/b": A.NetworkVolume("w")})(f)',
    'app.task(mounts={"/a": A.GlobalVolume("v"), "/b": A.GlobalVolume("w")})(f)',
    'app.queue(cpu="cpu3c-1-2", mounts={"/runpod-volume": A.GlobalVolume("g")})(f)',
    'app.queue(mounts={"data": A.NetworkVolume("v")})(f)',
    'app.task(mounts={"/a/../b": A.NetworkVolume("v")})(f)',
    'app.queue(mounts={"/runpod-volume": "v"})(f)',
    'app.queue(mounts=[("/runpod-volume", A.NetworkVolume("v"))])(f)',
    'app.task(mounts={"/a": A.NetworkVolume("v"), "/a/": A.GlobalVolume("g")})(f)',
    'app.queue(name="x")(f)\napp.task(name="x")(f)',
    'app.api(name="w")(42)',
    "app.api()(42)",
    "@app.api()\nclass Empty:\n    def index(self): pass",
    '@app.api()\nclass Twice:\n    @A.get("/x")\n    def a(self): pass\n    @A.get("/x")\n    def b(self): pass',
    "@app.api()\nclass Inits:\n    @A.init\n    def a(self): pass\n    @A.init\n    def b(self): pass\n"
    '    @A.get("/")\n    def index(self): pass',
    'A.post("/ping")',
    'A.put("/_runpod/sync")',
    'A.get("items")',
    'A.get("/x", "y")',
    'A.schedule(cron="")',
    'A.schedule("0 * * * *")',
    'A.Secret("bad name")',
    'A.Secret("")',
    "A.Secret(3)",
    'A.Model("llama")',
    'A.Model("a/b/c:d")',
    'A.NetworkVolume("")',
    'A.GlobalVolume(" ")',
    'A.Queue(app="a")',
    'A.Api(app="a", name="x", id="y")',
    "app.task()(f).with_options(ttl=1)",
    'app.queue()(f).with_options("https://hook")',
    "app.queue()(f)(1)",
    "app.queue()(f).local(1, 2)",
    'app.task()(f).job("job-1")',
    "list(app.queue()(f).stream())",
    "def g():\n    yield 1\nlist(app.task()(g).stream())",
    'A.ResourceSpec(kind="job", name="x")',
    'A.ResourceSpec(kind="queue", name="")',
    'A.ResourceSpec(kind="queue", name="x", routes=[("GET", "/", "x")])',
    'A.ResourceSpec(kind="api", name="x", routes=[A.RouteSpec("GET", "/", "a"), A.RouteSpec("GET", "/", "b")])',
    'A.ResourceSpec(kind="api", name="x", routes=[A.RouteSpec("HEAD", "/", "a")])',
    'A.ResourceSpec(kind=A.ResourceKind.TASK, name="x", model="a/b")',
    'A.ResourceSpec(kind="queue", name="x", schedule="")',
    'A.DataCenter.from_string("moon")',
    "app.task(workers=2)(f)",
]

GOOD = [
    'h = app.queue(gpu="h100")(f)',
    'h = app.queue(gpu=[GpuGroup.ADA_24, "4090", GpuType.NVIDIA_L4, "any", "nvidia_b200", "ada_80_pro"])(f)',
    'h = app.queue(gpu="A40")(f)',
    'h = app.queue(gpu="RTX PRO 6000")(f)',
    "h = app.queue(gpu=[])(f)",
    'h = app.queue(gpu="NVIDIA GeForce RTX 3090", gpu_count=2)(f)',
    'h = app.queue(cpu="cpu3c-2-4", workers=5)(f)',
    'h = app.queue(cpu=[CpuInstanceType.CPU5C_2_4, "cpu3g-1-4"], workers=[1, 2])(f)',
    'h = app.queue(datacenter=["eu_ro_1", A.DataCenter.US_CA_2], scaler_type=" request_count ", '
    'min_cuda_version="12.8")(f)',
    "h = app.queue(min_cuda_version=12.4)(f)",
    'h = app.queue(name="vol", mounts={"/runpod-volume/": A.NetworkVolume("v")})(f)',
    'h = app.task(gpu="B200", mounts={"/data": A.NetworkVolume("v"), "/models": A.GlobalVolume("m")})(f)',
    'h = app.task(cpu="cpu3c-1-2", datacenter="us-ks-2")(f)',
    'h = app.api(name="web", cpu="cpu5c-2-4")(f)',
    "h = app.api(gpu=GpuGroup.AMPERE_80, workers=(0, 1))(f)",
    '@app.api(name="inference", gpu="L4", scaler_type="QUEUE_DELAY")\nclass Inference:\n    @A.init\n'
    '    def setup(self): pass\n    @A.post("/generate")\n    async def generate(self, body): pass\n'
    '    @A.get("/health")\n    def health(self): pass\n    @A.delete("/items/{id}")\n    def drop(self, id): pass\n'
    "h = Inference",
    '@A.schedule(cron="0 * * * *")\n@app.queue(name="hourly")\ndef hourly(): pass\nh = hourly',
    '@app.task(name="nightly")\n@A.schedule(cron="0 3 * * *")\ndef nightly(): pass\nh = nightly',
    'h = app.queue(model=A.Model("Qwen/Qwen2.5-0.5B:main"), env={"T": A.Secret("hf")})(f)',
    "h = app.queue()(f).with_options(ttl=5, webhook='https://h').with_options(low_priority=True)",
]

RC2_TABLE = RC2_PRELUDE + RUNNER + "\nprint(json.dumps(run_rows(json.load(sys.stdin))))\n"


def compare(rc2_venv: Rc2Venv, rows: list[str]) -> tuple[list[Any], list[Any]]:
    theirs = run_rc2(rc2_venv, RC2_TABLE, json.dumps(rows))
    ours = json.loads(json.dumps(run_ours(RUNNER)["run_rows"](rows)))
    return theirs, ours


def test_bad_declarations(rc2_venv: Rc2Venv) -> None:
    assert len(BAD) >= 25
    theirs, ours = compare(rc2_venv, BAD)
    for row, rc2_result in zip(BAD, theirs, strict=True):
        assert rc2_result != ["", ""], f"rc2 accepts {row!r}: move it to GOOD"
    differences = [
        f"{row!r}\n  rc2:        {rc2_result}\n  flashpoint: {our_result}"
        for row, rc2_result, our_result in zip(BAD, theirs, ours, strict=True)
        if rc2_result != our_result
    ]
    assert not differences, "\n".join(differences)


def test_good_declarations(rc2_venv: Rc2Venv) -> None:
    theirs, ours = compare(rc2_venv, GOOD)
    for row, rc2_result in zip(GOOD, theirs, strict=True):
        assert isinstance(rc2_result, dict), f"rc2 refuses {row!r}: {rc2_result}"
    differences = [
        f"{row!r}\n  rc2:        {rc2_result}\n  flashpoint: {our_result}"
        for row, rc2_result, our_result in zip(GOOD, theirs, ours, strict=True)
        if rc2_result != our_result
    ]
    assert not differences, "\n".join(differences)


def test_the_tables_run_here_without_rc2() -> None:
    # the runner itself works on flashpoint's side (so a failure above is a difference, not a broken runner)
    results = run_ours(RUNNER)["run_rows"](['A.App("")', 'h = app.queue(gpu="L4")(f)', "x = 1"])
    assert results[0] == ["InvalidResourceError", "App name must be a non-empty string"]
    assert results[1]["gpu"] == ["NVIDIA L4"]
    assert results[2] == ["", ""]
