"""Tests for flashpoint.sdk.endpoint: decoration-time validation, the spec, the handles and payload binding.

Nothing here calls an endpoint remotely (that starts a control plane); payloads are checked as the SDK builds them.

Covers ``flashpoint.sdk.callargs`` (a call's arguments) for tests/test_layout.py.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from flashpoint.errors import InvalidEndpointError, UnknownGPUError
from flashpoint.gpus import ANY_GPU, MODELS, GpuGroup, GpuType, model_of
from flashpoint.sdk.endpoint import (
    Endpoint,
    EndpointClass,
    EndpointFunction,
    EndpointSpec,
    ServerlessScalerType,
)
from flashpoint.wire import codec

H200 = model_of(GpuType.NVIDIA_H200)
A100_PCIE = model_of(GpuType.NVIDIA_A100_80GB_PCIe)
A100_SXM = model_of(GpuType.NVIDIA_A100_SXM4_80GB)
A40 = model_of(GpuType.NVIDIA_A40)
A6000 = model_of(GpuType.NVIDIA_RTX_A6000)
L40S = next(m for m in MODELS if m.name == "NVIDIA L40S")


async def _handler(data: dict[str, Any]) -> dict[str, Any]:
    return data


def spec_of(**options: Any) -> EndpointSpec:
    return Endpoint(**options).spec


# --- decoration-time errors: the right class, and a message that says what to do -----------------------------


def test_bare_endpoint_without_parentheses_says_to_add_them() -> None:
    with pytest.raises(InvalidEndpointError, match="parentheses") as info:
        Endpoint(_handler)
    assert "@Endpoint(name=" in str(info.value)


def test_bare_endpoint_on_a_class_says_to_add_parentheses() -> None:
    class Model:
        def predict(self, data: dict[str, Any]) -> dict[str, Any]:
            return data

    with pytest.raises(InvalidEndpointError, match="parentheses"):
        Endpoint(Model)


# (options, phrases the message must contain: what is wrong and what to write instead)
INVALID = {
    "gpu-and-cpu": ({"gpu": GpuType.NVIDIA_H200, "cpu": "cpu3c-1-2"}, ["mutually exclusive", "gpu=...", "cpu=..."]),
    "workers-min-above-max": ({"workers": (3, 1)}, ["min is greater than max", "workers=(1, 3)"]),
    "workers-zero": ({"workers": 0}, ["workers must be >= 1", "e.g. workers=2"]),
    "workers-negative": ({"workers": -1}, ["workers must be >= 1", "e.g. workers=2"]),
    "workers-min-negative": ({"workers": (-1, 2)}, ["workers min must be >= 0", "workers=(0, 4)"]),
    "workers-max-zero": ({"workers": (0, 0)}, ["workers max must be >= 1", "workers=(0, 4)"]),
    "workers-bool": ({"workers": True}, ["workers must be N or (min, max)", "workers=(0, 4)"]),
    "workers-three-tuple": ({"workers": (0, 1, 2)}, ["workers must be N or (min, max)", "workers=(0, 4)"]),
    "workers-string": ({"workers": "2"}, ["workers must be N or (min, max)", "workers=2"]),
    "idle-timeout-negative": ({"idle_timeout": -1}, ["idle_timeout must be seconds >= 0", "idle_timeout=60"]),
    "idle-timeout-nan": ({"idle_timeout": float("nan")}, ["idle_timeout must be seconds >= 0", "idle_timeout=60"]),
    "idle-timeout-string": ({"idle_timeout": "60"}, ["idle_timeout must be seconds >= 0", "idle_timeout=60"]),
    "execution-timeout-negative": (
        {"execution_timeout_ms": -1},
        ["execution_timeout_ms must be >= 0", "execution_timeout_ms=600_000"],
    ),
    "execution-timeout-float": (
        {"execution_timeout_ms": 1.5},
        ["execution_timeout_ms must be an integer", "execution_timeout_ms=600_000"],
    ),
    "gpu-count-zero": ({"gpu_count": 0}, ["gpu_count must be >= 1", "gpu_count=2"]),
    "gpu-count-negative": ({"gpu_count": -2}, ["gpu_count must be >= 1", "gpu_count=2"]),
    "gpu-count-float": ({"gpu_count": 1.5}, ["gpu_count must be an integer", "gpu_count=2"]),
    "gpu-count-string": ({"gpu_count": "2"}, ["gpu_count must be an integer", "gpu_count=2"]),
    "gpu-count-bool": ({"gpu_count": True}, ["gpu_count must be an integer", "gpu_count=2"]),
    "gpu-count-on-cpu": ({"cpu": "cpu3c-1-2", "gpu_count": 2}, ["gpu_count needs a GPU endpoint", "drop gpu_count"]),
    "max-concurrency-zero": ({"max_concurrency": 0}, ["max_concurrency must be >= 1", "max_concurrency=4"]),
    "scaler-value-zero": ({"scaler_value": 0}, ["scaler_value must be >= 1", "scaler_value=4"]),
    "gpu-empty-list": ({"gpu": []}, ["gpu=[] lists no GPU", "gpu=GpuGroup.ANY"]),
    "gpu-wrong-type": ({"gpu": 42}, ["not a GPU selector", "gpu=GpuGroup.AMPERE_80"]),
    "gpu-nested-list": ({"gpu": [GpuType.NVIDIA_H200, [GpuGroup.ANY]]}, ["nested list", "gpu=GpuGroup.AMPERE_80"]),
    "cpu-empty": ({"cpu": ""}, ["unknown CPU instance type ''", "known: cpu3g-1-4"]),
    "cpu-not-string": ({"cpu": 4}, ["cpu takes CpuInstanceType values", "cpu='cpu3c-2-4'"]),
    "cpu-unknown-type": ({"cpu": "cpu3c-2-8"}, ["unknown CPU instance type 'cpu3c-2-8'", "did you mean"]),
    "cpu-empty-list": ({"cpu": []}, ["cpu=[] lists no instance type"]),
    "env-values-not-strings": ({"env": {"THREADS": 4}}, ["env must map strings to strings", "env={'HF_HOME'"]),
    "env-string": ({"env": "A=1"}, ["env must map strings to strings", "env={'HF_HOME'"]),
    "env-list": ({"env": ["A=1"]}, ["env must map strings to strings", "env={'HF_HOME'"]),
    "env-empty-list": ({"env": []}, ["env must map strings to strings", "env={'HF_HOME'"]),
    "scaler-type-unknown": ({"scaler_type": "FAST"}, ["scaler_type must be", "'QUEUE_DELAY' or 'REQUEST_COUNT'"]),
    "dependencies-string": ({"dependencies": "numpy"}, ["dependencies must be a list of strings", "['numpy>=1.26']"]),
    "id-needs-server": ({"id": "abc123"}, ["Endpoint(id=...)", "FLASHPOINT_URL"]),
}


@pytest.mark.parametrize(("options", "phrases"), INVALID.values(), ids=INVALID.keys())
def test_invalid_options_fail_at_decoration_with_advice(options: dict[str, Any], phrases: list[str]) -> None:
    with pytest.raises(InvalidEndpointError) as info:
        Endpoint(name="ep", **options)

    message = str(info.value)
    for phrase in phrases:
        assert phrase in message, (phrase, message)


@pytest.mark.parametrize("name", ["", " ", "my endpoint", "-leading-dash", "a" * 129, "x/y", 42])
def test_bad_name_says_what_a_name_may_hold(name: Any) -> None:
    with pytest.raises(InvalidEndpointError) as info:
        Endpoint(name=name, gpu=GpuGroup.ANY)
    message = str(info.value)
    assert "name must be a non-empty string of letters, digits" in message
    assert "e.g. @Endpoint(name='inference'" in message


def test_name_at_the_length_limit_is_accepted() -> None:
    assert spec_of(name="a" * 128).name == "a" * 128


def test_name_given_twice_is_an_error() -> None:
    with pytest.raises(InvalidEndpointError, match="name given twice.*keep one"):
        Endpoint("one", name="two")


@pytest.mark.parametrize(
    ("gpu", "suggestion"),
    [("H20O", "H200"), ("A100-SXM", "A100-SXM4-80GB"), ("AMPERE_8O", "AMPERE_80")],
)
def test_unknown_gpu_name_suggests_a_close_one(gpu: str, suggestion: str) -> None:
    with pytest.raises(UnknownGPUError) as info:
        Endpoint(name="ep", gpu=gpu)

    message = str(info.value)
    assert message.startswith("Endpoint 'ep': Unknown GPU")
    assert f"Did you mean {suggestion!r}" in message or f"Did you mean '{suggestion}'" in message, message
    assert suggestion in info.value.suggestions
    assert info.value.name == gpu


def test_unknown_gpu_in_a_list_is_reported() -> None:
    with pytest.raises(UnknownGPUError, match="Did you mean 'H200'"):
        Endpoint(name="ep", gpu=[GpuGroup.AMPERE_80, "H20O"])


def test_ambiguous_gpu_name_lists_the_matches_and_the_pool() -> None:
    with pytest.raises(UnknownGPUError) as info:
        Endpoint(name="ep", gpu="A100")

    message = str(info.value)
    assert "ambiguous" in message
    assert "NVIDIA A100 80GB PCIe" in message and "NVIDIA A100-SXM4-80GB" in message
    assert "GpuGroup.AMPERE_80" in message
    assert set(info.value.suggestions) == {"NVIDIA_A100_80GB_PCIe", "NVIDIA_A100_SXM4_80GB"}


@pytest.mark.parametrize(("option", "close"), [("gpus", "gpu"), ("worker", "workers"), ("idle_timout", "idle_timeout")])
def test_unknown_option_keyword_suggests_the_right_one(option: str, close: str) -> None:
    with pytest.raises(InvalidEndpointError) as info:
        Endpoint(name="ep", **{option: 1})

    message = str(info.value)
    assert f"unknown option {option!r} (did you mean {close!r}?)" in message
    assert "accepted: name, id, gpu, cpu" in message


def test_class_without_public_method_says_to_add_one() -> None:
    class Empty:
        def __init__(self) -> None:
            self.x = 1

        def _helper(self) -> None: ...

    with pytest.raises(InvalidEndpointError, match="no public method") as info:
        Endpoint(name="ep")(Empty)
    assert "async def predict(self, data)" in str(info.value)


@pytest.mark.parametrize("target", [42, "handler", None, [1, 2]])
def test_decorating_a_non_callable_is_an_error(target: Any) -> None:
    with pytest.raises(InvalidEndpointError, match="decorates a function or a class, not"):
        Endpoint(name="ep")(target)


# --- the spec: Flash's defaults, gpu forms, declared order -----------------------------------------------------


def test_defaults_match_flash() -> None:
    spec = spec_of(name="ep")

    assert (spec.workers_min, spec.workers_max) == (0, 1)
    assert spec.idle_timeout_s == 60
    assert spec.gpu_count == 1
    assert spec.execution_timeout_ms == 0
    assert spec.max_concurrency == 1
    assert spec.scaler_type is ServerlessScalerType.QUEUE_DELAY
    assert spec.scaler_value == 4
    assert spec.candidates == (ANY_GPU,)
    assert spec.cpu == () and spec.uses_gpu
    assert spec.env == {} and spec.dependencies == () and spec.system_dependencies == ()
    assert spec.kind == "function" and spec.methods == ()


def test_positional_name_is_the_name() -> None:
    assert Endpoint("inference", gpu=GpuGroup.ANY).spec.name == "inference"


@pytest.mark.parametrize(
    ("workers", "expected"),
    [(3, (0, 3)), (1, (0, 1)), ((0, 4), (0, 4)), ((2, 2), (2, 2)), ([1, 5], (1, 5))],
)
def test_workers_forms(workers: Any, expected: tuple[int, int]) -> None:
    spec = spec_of(name="ep", workers=workers)
    assert (spec.workers_min, spec.workers_max) == expected


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        (None, (ANY_GPU,)),
        (GpuGroup.ANY, (ANY_GPU,)),
        (GpuType.ANY, (ANY_GPU,)),
        ("any", (ANY_GPU,)),
        (GpuType.NVIDIA_H200, (H200,)),
        ("H200", (H200,)),
        ("NVIDIA H200", (H200,)),
        ("NVIDIA_H200", (H200,)),
        ("HOPPER_141", (H200,)),
        ("GpuGroup.HOPPER_141", (H200,)),
        ("a100 80gb pcie", (A100_PCIE,)),
        ("NVIDIA A100-SXM4-80GB", (A100_SXM,)),
        ("ampere_80", (A100_PCIE, A100_SXM)),
        (GpuGroup.AMPERE_80, (A100_PCIE, A100_SXM)),
        ("L40S", (L40S,)),
        (["H200", "AMPERE_48"], (H200, A40, A6000)),
        (["AMPERE_48", GpuType.NVIDIA_H200], (A40, A6000, H200)),
        ((GpuType.NVIDIA_H200, GpuType.NVIDIA_H200), (H200,)),
    ],
)
def test_gpu_forms_expand_to_ordered_candidates(gpu: Any, expected: tuple[Any, ...]) -> None:
    assert spec_of(name="ep", gpu=gpu).candidates == expected


def test_seed_hybrid_list_keeps_the_declared_order() -> None:
    spec = spec_of(
        name="hybrid-selection",
        gpu=[GpuType.NVIDIA_A100_80GB_PCIe, GpuGroup.AMPERE_48, GpuGroup.ANY],
    )
    assert spec.candidates == (A100_PCIE, A40, A6000, ANY_GPU)
    assert spec.describe_gpu() == "NVIDIA A100 80GB PCIe > NVIDIA A40 > NVIDIA RTX A6000 > ANY"


def test_cpu_endpoint_has_no_gpu_candidates() -> None:
    spec = spec_of(name="ep", cpu="cpu3c-1-2")

    assert spec.candidates == ()
    assert spec.cpu == ("cpu3c-1-2",)
    assert not spec.uses_gpu
    assert spec.describe_gpu() == "cpu=cpu3c-1-2"


def test_options_are_kept_in_the_spec() -> None:
    env = {"HF_HOME": "/data"}
    spec = spec_of(
        name="ep",
        gpu=GpuGroup.AMPERE_80,
        gpu_count=4,
        workers=(1, 2),
        idle_timeout=5.5,
        execution_timeout_ms=600_000,
        max_concurrency=8,
        env=env,
        dependencies=["numpy>=1.26"],
        system_dependencies=["ffmpeg"],
        scaler_type="request_count",
        scaler_value=2,
    )
    env["HF_HOME"] = "/changed"  # the spec is a snapshot taken at decoration time

    assert (spec.gpu_count, spec.workers_min, spec.workers_max) == (4, 1, 2)
    assert spec.idle_timeout_s == 5.5
    assert spec.execution_timeout_ms == 600_000
    assert spec.max_concurrency == 8
    assert spec.env == {"HF_HOME": "/data"}
    assert spec.dependencies == ("numpy>=1.26",)
    assert spec.system_dependencies == ("ffmpeg",)
    assert spec.scaler_type is ServerlessScalerType.REQUEST_COUNT
    assert spec.scaler_value == 2
    assert spec.describe_gpu() == "NVIDIA A100 80GB PCIe > NVIDIA A100-SXM4-80GB (x4)"


def test_spec_is_frozen() -> None:
    spec = spec_of(name="ep")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.gpu_count = 2  # type: ignore[misc]


# --- handles -------------------------------------------------------------------------------------------------------


def test_function_handle_keeps_name_doc_and_signature() -> None:
    @Endpoint(name="inference", gpu=GpuGroup.AMPERE_80)
    async def infer(data: dict[str, Any], scale: int = 1) -> dict[str, Any]:
        """Run inference."""
        return data

    assert isinstance(infer, EndpointFunction)
    assert infer.__name__ == "infer"
    assert infer.__doc__ == "Run inference."
    assert str(inspect.signature(infer)) == str(inspect.signature(infer.__wrapped__))
    assert infer.spec.name == "inference"
    assert infer.spec.kind == "function"
    assert repr(infer) == "<Endpoint 'inference' gpu=NVIDIA A100 80GB PCIe > NVIDIA A100-SXM4-80GB>"


def test_local_runs_a_sync_function_in_process() -> None:
    calls: list[int] = []

    @Endpoint(name="add")
    def add(a: int, b: int) -> int:
        calls.append(a + b)
        return a + b

    assert add.local(2, b=3) == 5
    assert calls == [5]


async def test_local_runs_an_async_function_in_process() -> None:
    @Endpoint(name="echo")
    async def echo(data: dict[str, Any]) -> dict[str, Any]:
        return {"echo": data}

    assert await echo.local({"x": 1}) == {"echo": {"x": 1}}


def test_class_endpoint_spec_lists_public_methods_in_definition_order() -> None:
    @Endpoint(name="model", gpu=GpuGroup.HOPPER_141)
    class Model:
        """A warm model."""

        def __init__(self) -> None:
            self.ready = True

        async def predict(self, data: dict[str, Any]) -> dict[str, Any]:
            return data

        def _private(self) -> None: ...

        def embed(self, text: str) -> list[float]:
            return [0.0]

        async def generate(self, prompt: str) -> str:
            return prompt

        limit = 3

    assert isinstance(Model, EndpointClass)
    assert Model.spec.kind == "class"
    assert Model.spec.methods == ("predict", "embed", "generate")
    assert Model.spec.candidates == (H200,)
    assert Model.__name__ == "Model"
    assert Model.__doc__ == "A warm model."


# --- payloads: what a call sends ----------------------------------------------------------------------------------


@Endpoint(name="infer-ep")
async def infer(data: dict[str, Any]) -> dict[str, Any]:
    return data


def test_positional_argument_binds_by_name() -> None:
    assert infer._payload(({"x": 1},), {}) == {"data": {"x": 1}}


def test_keyword_argument_binds_by_name() -> None:
    assert infer._payload((), {"data": {"x": 1}}) == {"data": {"x": 1}}


def test_json_payload_round_trips_through_decode_call() -> None:
    payload = infer._payload(({"x": [1, 2.5, None, "s", True]},), {})
    assert codec.decode_call(payload) == ((), {"data": {"x": [1, 2.5, None, "s", True]}})


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(({"x": 1}, 2), {}), ((), {}), ((), {"data": 1, "other": 2}), (({"x": 1},), {"data": 2})],
    ids=["extra-positional", "missing", "unexpected-keyword", "twice"],
)
def test_wrong_arguments_raise_type_error_naming_the_endpoint(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError) as info:
        infer._payload(args, kwargs)
    message = str(info.value)
    assert message.startswith("infer-ep(data: ")
    assert "dict[str, Any]" in message


@pytest.mark.parametrize(
    "value",
    [(1, 2), b"\x00\xffbytes", {1: "int key"}, {"nan": float("nan")}, [(1,), b"x"], {"nested": {"t": ("a",)}}],
    ids=["tuple", "bytes", "int-key", "nan", "nested-list", "nested-dict"],
)
def test_non_json_argument_travels_in_the_binary_envelope(value: Any) -> None:
    payload = infer._payload((value,), {})

    assert list(payload) == [codec.PICKLE_KEY]
    assert isinstance(payload[codec.PICKLE_KEY], str)
    args, kwargs = codec.decode_call(payload)
    assert args == ()
    assert list(kwargs) == ["data"]
    restored = kwargs["data"]
    # repr, not ==: it tells a tuple from a list and compares NaN (which never equals itself)
    assert type(restored) is type(value)
    assert repr(restored) == repr(value)


def test_positional_only_and_var_arguments_round_trip() -> None:
    @Endpoint(name="varargs")
    def fn(a: int, /, b: int, *rest: int, c: int = 0, **more: int) -> int:
        return a

    payload = fn._payload((1, 2, 3, 4), {"c": 5, "d": 6})

    # positional-only arguments cannot be keyword arguments: JSON ones travel beside them, as a list
    assert payload == {"c": 5, "d": 6, codec.ARGS_KEY: [1, 2, 3, 4]}
    # b is positional too: *rest received values, so by name it would arrive twice (fn(1, 3, 4, b=2) is a TypeError)
    args, kwargs = codec.decode_call(payload)
    assert (args, kwargs) == ((1, 2, 3, 4), {"c": 5, "d": 6})
    assert inspect.signature(fn.__wrapped__).bind(*args, **kwargs).arguments == {
        "a": 1,
        "b": 2,
        "rest": (3, 4),
        "c": 5,
        "more": {"d": 6},
    }


def test_arguments_before_an_empty_var_positional_stay_keywords() -> None:
    @Endpoint(name="varargs-empty")
    def fn(a: int, b: int = 2, *rest: int) -> int:
        return a

    assert fn._payload((1,), {}) == {"a": 1}  # plain JSON: nothing went to *rest


def test_keyword_only_and_defaults_are_plain_json() -> None:
    @Endpoint(name="kw")
    def fn(data: dict[str, Any], *, scale: int = 1) -> int:
        return scale

    assert fn._payload(({"x": 1},), {"scale": 3}) == {"data": {"x": 1}, "scale": 3}
    # defaults stay with the function: only what the caller passed travels
    assert fn._payload(({"x": 1},), {}) == {"data": {"x": 1}}


# --- class endpoints: instance handles and method calls -------------------------------------------------------------


@Endpoint(name="one-method")
class OneMethod:
    def __init__(self, size: int = 1) -> None:
        self.size = size

    async def predict(self, data: dict[str, Any]) -> dict[str, Any]:
        return data


@Endpoint(name="two-methods")
class TwoMethods:
    def __init__(self) -> None: ...

    async def predict(self, data: dict[str, Any]) -> dict[str, Any]:
        return data

    def embed(self, text: str, *, norm: bool = True) -> list[float]:
        return [0.0]


def test_single_method_payload_has_no_method_key() -> None:
    call = OneMethod().predict

    assert call._payload(({"x": 1},), {}) == {"data": {"x": 1}}
    assert call._payload((), {"data": {"x": 1}}) == {"data": {"x": 1}}


def test_several_methods_payload_names_the_method() -> None:
    model = TwoMethods()

    assert model.predict._payload(({"x": 1},), {}) == {"data": {"x": 1}, "method": "predict"}
    assert model.embed._payload(("hi",), {"norm": False}) == {"text": "hi", "norm": False, "method": "embed"}


def test_several_methods_binary_payload_still_names_the_method() -> None:
    payload = TwoMethods().embed._payload((b"raw",), {})

    assert payload["method"] == "embed"
    assert codec.decode_call({codec.PICKLE_KEY: payload[codec.PICKLE_KEY]}) == ((), {"text": b"raw"})


def test_method_call_with_wrong_arguments_names_endpoint_and_method() -> None:
    with pytest.raises(TypeError, match=r"^two-methods\.predict: "):
        TwoMethods().predict._payload((1, 2), {})


def test_unknown_method_lists_the_public_methods() -> None:
    with pytest.raises(AttributeError, match="no public method 'fit'; methods: predict, embed"):
        _ = TwoMethods().fit


def test_constructor_arguments_travel_with_the_instance() -> None:
    assert OneMethod()._init is None
    # bound to the constructor's names, as function arguments are: positional or not, one JSON object (so one
    # instance on the worker, and no pickle for a server to refuse)
    assert OneMethod(size=2)._init == {"size": 2}
    assert OneMethod(3)._init == {"size": 3}
    # what JSON cannot carry needs the envelope
    assert codec.decode_call(OneMethod((3,))._init) == ((), {"size": (3,)})


def test_constructor_arguments_that_do_not_fit_fail_at_the_call() -> None:
    with pytest.raises(TypeError, match=r"one-method OneMethod\(size: '?int'? = 1\): too many positional arguments"):
        OneMethod(1, 2)


@pytest.mark.parametrize(
    ("options", "advice"),
    [
        ({"worker_command": "python handler.py"}, "list of strings, e.g. ['python', 'handler.py']"),
        ({"worker_command": []}, "list of strings"),
        ({"worker_command": ["python", ""]}, "non-empty strings"),
        ({"worker_command": ["python", "h.py"], "worker_cwd": 3}, "worker_cwd must be a directory path"),
        ({"worker_cwd": "/srv"}, "give worker_command too"),
    ],
)
def test_worker_command_mistakes_fail_at_declaration(options: dict[str, Any], advice: str) -> None:
    with pytest.raises(InvalidEndpointError, match=re.escape(advice)):
        Endpoint(name="handler", **options)


def test_a_command_endpoint_runs_its_command_and_is_not_a_decorator(tmp_path: Path) -> None:
    handler = Endpoint(name="handler", gpu=GpuType.NVIDIA_H200, worker_command=["python", "h.py"], worker_cwd=tmp_path)
    assert handler.spec.kind == "command" and handler.spec.candidates == (H200,)
    assert handler.worker_target().command == ("python", "h.py") and handler.worker_target().cwd == str(tmp_path)
    with pytest.raises(InvalidEndpointError, match="cannot decorate"):

        @handler
        async def oops(data: dict) -> dict:
            return data
