"""The target contract and the payload helpers (rc2's ``runpod/apps/targets.py``): ``args_to_input``, the job
options, ``unwrap_job_output`` (every branch), and what an ``InvocationTarget`` answers by default."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from flashpoint.runpodapps import RemoteExecutionError, ResourceKind, ResourceSpec
from flashpoint.runpodapps.targets import (
    DEFAULT_TIMEOUT_SECONDS,
    FINAL_STATUSES,
    InvocationTarget,
    args_to_input,
    build_job_options,
    merge_job_options,
    unwrap_job_output,
)


def transcribe(url: str, language: str = "en", *, beam: int = 1) -> None: ...


class Model:
    def generate(self, prompt: str, tokens: int = 8) -> None: ...

    @classmethod
    def build(cls, size: int) -> None: ...


@pytest.mark.parametrize(
    ("fn", "args", "kwargs", "expected"),
    [
        (transcribe, ("u",), {}, {"url": "u"}),
        (transcribe, ("u", "fr"), {"beam": 4}, {"url": "u", "language": "fr", "beam": 4}),
        (transcribe, (), {"url": "u"}, {"url": "u"}),
        (transcribe, (), {}, {"__empty": True}),
        (lambda: None, (), {}, {"__empty": True}),
        (Model.generate, ("hi",), {}, {"prompt": "hi"}),  # self is skipped
        (Model.build.__func__, (3,), {}, {"size": 3}),  # type: ignore[attr-defined] # cls is skipped
        (lambda **kw: None, (), {"a": 1}, {"a": 1}),
    ],
)
def test_args_to_input(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], expected: dict[str, Any]) -> None:
    assert args_to_input(fn, args, kwargs) == expected


def test_too_many_positional_arguments() -> None:
    with pytest.raises(TypeError) as raised:
        args_to_input(transcribe, ("u", "fr", 3, 4), {})
    # keyword-only parameters count among the names rc2 maps onto
    assert str(raised.value) == "transcribe() got 4 positional args, expected at most 3"


def test_a_positional_and_a_keyword_for_one_parameter() -> None:
    with pytest.raises(TypeError) as raised:
        args_to_input(transcribe, ("u",), {"url": "v"})
    assert str(raised.value) == "transcribe() got multiple values for argument 'url'"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, {}),
        ({"webhook": "https://hook"}, {"webhook": "https://hook"}),
        ({"execution_timeout": 60, "ttl": 600}, {"policy": {"executionTimeout": 60, "ttl": 600}}),
        ({"low_priority": False}, {"policy": {"lowPriority": False}}),
        ({"s3_config": {"bucketName": "b"}}, {"s3Config": {"bucketName": "b"}}),
    ],
)
def test_build_job_options(options: dict[str, Any], expected: dict[str, Any]) -> None:
    assert build_job_options(**options) == expected


def test_merge_job_options_accumulates_policy() -> None:
    base = {"webhook": "a", "policy": {"ttl": 1, "lowPriority": True}}
    merged = merge_job_options(base, {"webhook": "b", "policy": {"ttl": 2, "executionTimeout": 5}})
    assert merged == {"webhook": "b", "policy": {"ttl": 2, "lowPriority": True, "executionTimeout": 5}}
    assert base == {"webhook": "a", "policy": {"ttl": 1, "lowPriority": True}}  # untouched
    assert merge_job_options({}, {"policy": {"ttl": 1}}) == {"policy": {"ttl": 1}}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"status": "COMPLETED", "output": {"text": "hi"}}, {"text": "hi"}),
        ({"status": "COMPLETED", "output": None}, None),
        ({"status": "COMPLETED", "output": [1, 2]}, [1, 2]),
        ({"status": "COMPLETED", "output": {"error": None, "x": 1}}, "raises"),
        ({"text": "bare"}, {"text": "bare"}),  # no output field: the data itself
    ],
)
def test_unwrap_outputs(data: dict[str, Any], expected: Any) -> None:
    if expected == "raises":
        with pytest.raises(RemoteExecutionError, match="^remote execution failed: None$"):
            unwrap_job_output(data)
        return
    assert unwrap_job_output(data) == expected


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"status": "FAILED", "error": "boom"}, "boom"),
        ({"status": "COMPLETED", "error": "late"}, "late"),
        ({"status": "FAILED", "output": {"error": "in output"}}, "in output"),
        ({"status": "FAILED", "output": [{"x": 1}, {"error": "first"}, {"error": "last"}, "s"]}, "last"),
        ({"status": "FAILED", "output": [{"x": 1}]}, "unknown"),
        ({"status": "FAILED", "output": "text"}, "unknown"),
        ({"status": "FAILED"}, "unknown"),
        ({"status": "FAILED", "error": "", "output": {"error": ""}}, "unknown"),
        ({"status": "COMPLETED", "output": {"error": "handler said"}}, "handler said"),
        ({"error": "no status"}, "no status"),
    ],
)
def test_unwrap_failures(data: dict[str, Any], message: str) -> None:
    with pytest.raises(RemoteExecutionError) as raised:
        unwrap_job_output(data)
    assert str(raised.value) == f"remote execution failed: {message}"


def test_constants() -> None:
    assert DEFAULT_TIMEOUT_SECONDS == 300.0
    assert FINAL_STATUSES == {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}


class Minimal(InvocationTarget):
    async def invoke(self, payload: dict[str, Any], *, timeout: float = 1.0) -> Any:
        return payload

    async def submit(self, payload: dict[str, Any]) -> dict[str, Any]:
        return {"id": "j"}


def test_invoke_and_submit_are_required() -> None:
    assert InvocationTarget.__abstractmethods__ == {"invoke", "submit"}
    with pytest.raises(TypeError):
        InvocationTarget()  # type: ignore[abstract]


async def test_the_defaults_say_what_a_target_lacks() -> None:
    target = Minimal()
    spec = ResourceSpec(kind=ResourceKind.QUEUE, name="t")
    assert target.build_payload(transcribe, spec, ("u",), {}) == {"input": {"url": "u"}}
    assert target.unwrap({"status": "COMPLETED", "output": 3}) == 3
    for call, what in [
        (target.job_status("j"), "support job status"),
        (target.cancel_job("j"), "support job cancellation"),
        (target.retry_job("j"), "support job retries"),
        (target.wait({"id": "j"}, timeout=1), "support job polling"),
        (target.request("GET", "/", timeout=1), "serve http routes"),
    ]:
        with pytest.raises(NotImplementedError) as raised:
            await call
        assert str(raised.value) == f"Minimal does not {what}"
    with pytest.raises(NotImplementedError, match="^Minimal does not support job streaming$"):
        target.stream_job("j", timeout=1)


def test_rc2s_method_signatures() -> None:
    expected = {
        "build_payload": "(self, fn, spec, args, kwargs)",
        "unwrap": "(self, data)",
        "invoke": "(self, payload, *, timeout)",
        "submit": "(self, payload)",
        "job_status": "(self, job_id)",
        "cancel_job": "(self, job_id)",
        "retry_job": "(self, job_id)",
        "stream_job": "(self, job_id, *, timeout)",
        "wait": "(self, job_data, *, timeout, on_status=None)",
        "request": "(self, method, path, body=None, *, timeout)",
    }
    found = {}
    for name in expected:
        signature = inspect.signature(getattr(InvocationTarget, name))
        bare = [parameter.replace(annotation=inspect.Parameter.empty) for parameter in signature.parameters.values()]
        found[name] = str(signature.replace(parameters=bare, return_annotation=inspect.Signature.empty))
    assert found == expected
