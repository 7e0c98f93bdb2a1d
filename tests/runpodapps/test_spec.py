"""``ResourceSpec`` and its normalizers (rc2's ``runpod/apps/spec.py``): every normalizer and every check of
``validate()``, good and bad values, with rc2's exact messages."""

from __future__ import annotations

import re
from typing import Any

import pytest

from flashpoint.runpodapps import GlobalVolume, GpuGroup, GpuType, NetworkVolume, ResourceKind, ResourceSpec, RouteSpec
from flashpoint.runpodapps.datacenter import DataCenter
from flashpoint.runpodapps.errors import InvalidResourceError
from flashpoint.runpodapps.gpu import CpuInstanceType
from flashpoint.runpodapps.spec import (
    CUDA_VERSIONS,
    DEFAULT_WORKERS,
    normalize_cpu,
    normalize_cuda_version,
    normalize_datacenter,
    normalize_gpu,
    normalize_scaler_type,
    normalize_workers,
)
from flashpoint.runpodapps.volume import VolumeError

# --- normalizers ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        (None, (0, 3)),
        (5, (0, 5)),
        (1, (0, 1)),
        ((2, 4), (2, 4)),
        ([1, 1], (1, 1)),
        (("0", "2"), (0, 2)),
        ((0, 1), (0, 1)),
    ],
)
def test_workers_forms(workers: Any, expected: tuple[int, int]) -> None:
    assert normalize_workers(workers) == expected


@pytest.mark.parametrize(
    ("workers", "message"),
    [
        (0, "invalid worker range (0, 0)"),
        (-1, "invalid worker range (0, -1)"),
        ((-1, 2), "invalid worker range (-1, 2)"),
        ((1, 0), "invalid worker range (1, 0)"),
        ((3, 2), "workers min (3) cannot exceed max (2)"),
        ((1, 2, 3), "workers must be an int or (min, max) tuple, got (1, 2, 3)"),
        ("3", "workers must be an int or (min, max) tuple, got '3'"),
        (2.5, "workers must be an int or (min, max) tuple, got 2.5"),
    ],
)
def test_bad_workers(workers: Any, message: str) -> None:
    with pytest.raises(InvalidResourceError) as raised:
        normalize_workers(workers)
    assert str(raised.value) == message


def test_default_workers() -> None:
    assert DEFAULT_WORKERS == (0, 3)


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        (None, None),
        (GpuGroup.ADA_24, ["ADA_24"]),
        (GpuType.NVIDIA_H200, ["NVIDIA H200"]),
        ("any", ["any"]),
        ("ada_80_pro", ["ADA_80_PRO"]),
        ("NVIDIA B200", ["NVIDIA B200"]),
        ("nvidia l4", ["NVIDIA L4"]),
        ("NVIDIA_B200", ["NVIDIA B200"]),
        ("4090", ["NVIDIA GeForce RTX 4090"]),
        ("h100", ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL"]),
        ("A100", ["NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-80GB"]),
        ([GpuGroup.AMPERE_80, "L4", GpuType.ANY], ["AMPERE_80", "NVIDIA L4", "any"]),
        ([], []),
    ],
)
def test_gpu_forms(gpu: Any, expected: list[str] | None) -> None:
    assert normalize_gpu(gpu) == expected


def test_gpu_normalization_is_idempotent() -> None:
    once = normalize_gpu(["h100", GpuGroup.ADA_24, "any"])
    assert normalize_gpu(once) == once


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        (3, "gpu must be a GpuGroup, GpuType, or string, got int"),
        (("H100",), "gpu must be a GpuGroup, GpuType, or string, got tuple"),
        ([GpuGroup.ADA_24, None], "gpu must be a GpuGroup, GpuType, or string, got NoneType"),
        (CpuInstanceType.CPU3C_1_2, None),  # a str enum: resolved as the string "cpu3c-1-2", which no GPU matches
        ("H1000", None),
    ],
)
def test_bad_gpu(gpu: Any, message: str | None) -> None:
    with pytest.raises(InvalidResourceError) as raised:
        normalize_gpu(gpu)
    if message is not None:
        assert str(raised.value) == message
    else:
        assert str(raised.value).startswith("unknown gpu ")


@pytest.mark.parametrize(
    ("cpu", "expected"),
    [
        (None, None),
        ("cpu3c-2-4", ["cpu3c-2-4"]),
        (CpuInstanceType.CPU5C_2_4, ["cpu5c-2-4"]),
        (["cpu3g-1-4", "anything-goes"], ["cpu3g-1-4", "anything-goes"]),
    ],
)
def test_cpu_forms(cpu: Any, expected: list[str] | None) -> None:
    assert normalize_cpu(cpu) == expected


@pytest.mark.parametrize(
    ("cpu", "message"),
    [
        (("cpu3c-2-4",), "cpu must be an instance id string or list, got tuple"),
        (4, "cpu must be an instance id string or list, got int"),
        ([], "cpu must contain non-empty instance ids"),
        ("", "cpu must contain non-empty instance ids"),
        (["  "], "cpu must contain non-empty instance ids"),
        (["cpu3c-2-4", 3], "cpu must contain non-empty instance ids"),
    ],
)
def test_bad_cpu(cpu: Any, message: str) -> None:
    with pytest.raises(InvalidResourceError) as raised:
        normalize_cpu(cpu)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("scaler", "expected"),
    [
        (None, None),
        ("QUEUE_DELAY", "QUEUE_DELAY"),
        ("request_count", "REQUEST_COUNT"),
        (" queue_delay ", "QUEUE_DELAY"),
    ],
)
def test_scaler_types(scaler: str | None, expected: str | None) -> None:
    assert normalize_scaler_type(scaler) == expected


def test_bad_scaler_type() -> None:
    with pytest.raises(InvalidResourceError) as raised:
        normalize_scaler_type("FAST")
    assert str(raised.value) == "scaler_type must be one of ['QUEUE_DELAY', 'REQUEST_COUNT'], got 'FAST'"


@pytest.mark.parametrize("version", sorted(CUDA_VERSIONS))
def test_cuda_versions(version: str) -> None:
    assert normalize_cuda_version(version) == version
    assert normalize_cuda_version(f" {version} ") == version


@pytest.mark.parametrize("version", ["12", "11.7", "13.1", "cuda12.4", ""])
def test_bad_cuda_versions(version: str) -> None:
    with pytest.raises(InvalidResourceError) as raised:
        normalize_cuda_version(version)
    assert str(raised.value) == (
        "min_cuda_version must be one of 11.8, 12.0, 12.1, 12.2, 12.3, 12.4, 12.5, 12.6, 12.7, 12.8, 12.9, 13.0, "
        f"got {version!r}"
    )


def test_cuda_version_as_a_float_is_its_text() -> None:
    assert normalize_cuda_version(12.4) == "12.4"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("datacenter", "expected"),
    [
        (None, None),
        ("US-CA-2", ["US-CA-2"]),
        ("eu_ro_1", ["EU-RO-1"]),
        (" eur-no-1 ", ["EUR-NO-1"]),
        (DataCenter.US_KS_2, ["US-KS-2"]),
        (["us-il-1", DataCenter.EU_CZ_1], ["US-IL-1", "EU-CZ-1"]),
        ([], []),
    ],
)
def test_datacenter_forms(datacenter: Any, expected: list[str] | None) -> None:
    assert normalize_datacenter(datacenter) == expected


@pytest.mark.parametrize(
    ("datacenter", "message"),
    [
        ("MARS-1", "invalid datacenter: 'MARS-1'"),
        (["US-CA-2", "nowhere"], "invalid datacenter: ['US-CA-2', 'nowhere']"),
        ([3], "invalid datacenter: [3]"),
        (7, "invalid datacenter: 7"),
    ],
)
def test_bad_datacenter(datacenter: Any, message: str) -> None:
    with pytest.raises(InvalidResourceError) as raised:
        normalize_datacenter(datacenter)
    assert str(raised.value) == message


# --- ResourceSpec.validate -----------------------------------------------------------------------------------------


def spec(**options: Any) -> ResourceSpec:
    return ResourceSpec(**{"kind": ResourceKind.QUEUE, "name": "r", **options})


def test_a_spec_is_normalized_on_construction() -> None:
    made = spec(
        kind="api",
        gpu="h100",
        workers=4,
        scaler_type="request_count",
        min_cuda_version="12.4",
        datacenter="us_ca_2",
        mounts={"/runpod-volume/": NetworkVolume("data")},
    )
    assert made.kind is ResourceKind.API
    assert made.gpu == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL"]
    assert made.workers == (0, 4)
    assert made.scaler_type == "REQUEST_COUNT"
    assert made.min_cuda_version == "12.4"
    assert made.datacenter == ["US-CA-2"]
    assert list(made.mounts or {}) == ["/runpod-volume"]
    assert made.effective_scaler_type == "REQUEST_COUNT"
    assert not made.is_cpu


def test_defaults() -> None:
    made = spec()
    assert (made.gpu, made.cpu, made.workers, made.mounts, made.datacenter) == (None, None, (0, 3), {}, None)
    assert made.effective_scaler_type == "QUEUE_DELAY"
    assert spec(kind=ResourceKind.API).effective_scaler_type == "REQUEST_COUNT"
    assert spec(cpu="cpu3c-1-2").is_cpu


def test_validate_again_is_a_no_op() -> None:
    made = spec(gpu=["4090", GpuGroup.ANY], cpu=None, datacenter=["eu-ro-1"], workers=(1, 2))
    before = (made.gpu, made.workers, made.datacenter)
    made.validate()
    assert (made.gpu, made.workers, made.datacenter) == before


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"kind": "job"}, InvalidResourceError, "invalid resource kind: 'job'"),
        ({"gpu": "L4", "cpu": "cpu3c-1-2"}, InvalidResourceError, "resource 'r': gpu and cpu are mutually exclusive"),
        ({"name": ""}, InvalidResourceError, "resource name must be a non-empty string"),
        ({"name": 3}, InvalidResourceError, "resource name must be a non-empty string"),
        ({"gpu_count": 0}, InvalidResourceError, "resource 'r': gpu_count must be >= 1"),
        ({"max_concurrency": 0}, InvalidResourceError, "resource 'r': max_concurrency must be >= 1, got 0"),
        ({"execution_timeout_ms": -1}, InvalidResourceError, "resource 'r': execution_timeout_ms must be >= 0"),
        ({"scaler_value": 0}, InvalidResourceError, "resource 'r': scaler_value must be >= 1"),
        ({"container_disk_gb": 0}, InvalidResourceError, "resource 'r': container_disk_gb must be >= 1"),
        (
            {"cpu": "cpu3c-1-2", "min_cuda_version": "12.4"},
            InvalidResourceError,
            "resource 'r': min_cuda_version has no effect on cpu resources",
        ),
        (
            {"kind": ResourceKind.TASK, "model": "meta-llama/Llama-3.1-8B"},
            InvalidResourceError,
            "resource 'r': platform-cached models are only available on queue and api resources; tasks download "
            "weights themselves",
        ),
        ({"schedule": ""}, InvalidResourceError, "cron must be a non-empty string"),
        ({"schedule": 5}, InvalidResourceError, "cron must be a non-empty string"),
        ({"routes": [("GET", "/x", "x")]}, InvalidResourceError, "routes must contain RouteSpec values"),
        (
            {"routes": [RouteSpec("FETCH", "/x", "x")]},
            InvalidResourceError,
            "method must be one of ['DELETE', 'GET', 'PATCH', 'POST', 'PUT']",
        ),
        ({"routes": [RouteSpec("GET", "x", "x")]}, InvalidResourceError, "path must start with '/', got: 'x'"),
        (
            {"routes": [RouteSpec("POST", "/ping", "p")]},
            InvalidResourceError,
            "path '/ping' is reserved by the worker runtime (reserved: /_runpod/sync, /execute, /ping)",
        ),
        (
            {"routes": [RouteSpec("GET", "/x", "a"), RouteSpec("GET", "/x", "b")]},
            InvalidResourceError,
            "duplicate route GET /x on r",
        ),
        # mounts: rc2's VolumeError, in validate()'s order
        ({"mounts": [("/a", NetworkVolume("v"))]}, VolumeError, "mounts must map absolute paths to volume objects"),
        ({"mounts": {"data": NetworkVolume("v")}}, VolumeError, "mount paths must be absolute paths without '..'"),
        ({"mounts": {"/a/../b": NetworkVolume("v")}}, VolumeError, "mount paths must be absolute paths without '..'"),
        ({"mounts": {"//a": NetworkVolume("v")}}, VolumeError, "mount paths must be absolute paths without '..'"),
        ({"mounts": {"/a": "v"}}, VolumeError, "mounts require NetworkVolume or GlobalVolume references"),
        (
            {"mounts": {"/a": NetworkVolume("v"), "/a/": GlobalVolume("g")}},
            VolumeError,
            "duplicate mount path '/a'",
        ),
        (
            {"kind": "task", "mounts": {"/data": NetworkVolume("v"), "/data/sub": GlobalVolume("g")}},
            VolumeError,
            "mount paths must not overlap",
        ),
        (
            {"kind": "task", "mounts": {"/a": NetworkVolume("v"), "/b": NetworkVolume("w")}},
            VolumeError,
            "resources support at most one network volume",
        ),
        (
            {"kind": "task", "mounts": {"/a": GlobalVolume("v"), "/b": GlobalVolume("w")}},
            VolumeError,
            "resources support at most one global volume",
        ),
        (
            {"mounts": {"/data": NetworkVolume("v")}},
            VolumeError,
            "endpoints support one volume mounted at /runpod-volume",
        ),
        (
            {"kind": "api", "mounts": {"/runpod-volume": NetworkVolume("v"), "/g": GlobalVolume("g")}},
            VolumeError,
            "endpoints support one volume mounted at /runpod-volume",
        ),
        (
            {"cpu": "cpu3c-1-2", "mounts": {"/runpod-volume": GlobalVolume("g")}},
            VolumeError,
            "global volumes require gpu compute",
        ),
        # the order of the checks: the gpu is read before the name
        ({"gpu": "nope", "name": ""}, InvalidResourceError, None),
    ],
)
def test_bad_specs(options: dict[str, Any], error: type[Exception], message: str | None) -> None:
    with pytest.raises(error) as raised:
        spec(**options)
    assert type(raised.value) is error
    if message is None:
        assert re.match(r"unknown gpu 'nope'\. use a pool id \(", str(raised.value))
    else:
        assert str(raised.value) == message


@pytest.mark.parametrize(
    "options",
    [
        {"kind": "task", "mounts": {"/data": NetworkVolume("v"), "/models": GlobalVolume("g")}},
        {"kind": "task", "cpu": "cpu3c-1-2", "mounts": {"/data": NetworkVolume("v")}},
        {"mounts": {"/runpod-volume": GlobalVolume("g")}},
        {"kind": "api", "mounts": {"/runpod-volume": NetworkVolume("v")}},
        {"model": "meta-llama/Llama-3.1-8B", "schedule": "0 * * * *"},
        {"routes": [RouteSpec("GET", "/x", "a"), RouteSpec("POST", "/x", "b")]},
        {"container_disk_gb": 1, "gpu_count": 8, "max_concurrency": 4, "execution_timeout_ms": 0},
    ],
)
def test_good_specs(options: dict[str, Any]) -> None:
    spec(**options)


def test_a_later_mutation_is_checked_on_the_next_validate() -> None:
    made = spec()
    made.gpu = "B300"
    with pytest.raises(InvalidResourceError, match="unknown gpu 'B300'"):
        made.validate()


def test_route_spec_is_frozen() -> None:
    route = RouteSpec("GET", "/x", "x")
    with pytest.raises(AttributeError):
        route.method = "POST"  # type: ignore[misc]
