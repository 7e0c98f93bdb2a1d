"""Every ``Endpoint(...)`` option of Runpod Flash 1.21 is accepted, validated at decoration, and kept in the spec with
its local meaning (issue 11, point 2). The engine's side (CPU capacity, datacenters, the CUDA floor) is tested
through the test door in ``tests/scheduler``; volumes in ``tests/fleet/test_volumes.py``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from flashpoint import (
    CpuInstanceType,
    CudaVersion,
    DataCenter,
    Endpoint,
    GpuGroup,
    NetworkVolume,
    PodTemplate,
)
from flashpoint.errors import InvalidEndpointError
from flashpoint.scheduler.optionnotes import option_notes
from flashpoint.spec import EndpointSpec


def spec_of(**options: Any) -> EndpointSpec:
    return Endpoint(name="ep", **options).spec


@pytest.mark.parametrize(
    ("cpu", "expected"),
    [
        ("cpu3c-2-4", ("cpu3c-2-4",)),
        (CpuInstanceType.CPU5C_4_8, ("cpu5c-4-8",)),
        (" CPU3G-1-4 ", ("cpu3g-1-4",)),
        # an ordered fallback, kept as written, duplicates dropped
        (["cpu5c-8-16", CpuInstanceType.CPU3C_2_4, "cpu5c-8-16"], ("cpu5c-8-16", "cpu3c-2-4")),
        (("cpu3g-2-8",), ("cpu3g-2-8",)),
    ],
)
def test_cpu_takes_instance_types_in_order(cpu: Any, expected: tuple[str, ...]) -> None:
    spec = spec_of(cpu=cpu)
    assert spec.cpu == expected
    assert not spec.uses_gpu and spec.candidates == ()
    assert spec.describe_gpu() == "cpu=" + " > ".join(expected)


@pytest.mark.parametrize(
    ("datacenter", "expected"),
    [
        (None, ()),
        (DataCenter.EU_RO_1, ("EU-RO-1",)),
        ("us_ks_2", ("US-KS-2",)),  # Flash's spellings normalise to its values
        ([DataCenter.US_CA_2, "EU-RO-1", "us-ca-2"], ("US-CA-2", "EU-RO-1")),
        ("rack-a", ("rack-a",)),  # a datacenter label of the user's own fleet
    ],
)
def test_datacenter_becomes_labels(datacenter: Any, expected: tuple[str, ...]) -> None:
    assert spec_of(datacenter=datacenter).datacenters == expected


@pytest.mark.parametrize(
    ("version", "expected"),
    [(None, None), (CudaVersion.V12_8, "12.8"), ("12.4", "12.4"), (" 13.0 ", "13.0"), ("12", "12")],
)
def test_min_cuda_version_is_kept_for_gpu_endpoints(version: Any, expected: str | None) -> None:
    assert spec_of(gpu=GpuGroup.ANY, min_cuda_version=version).min_cuda_version == expected


def test_min_cuda_version_is_checked_but_dropped_for_cpu_endpoints() -> None:
    # Flash floors the CUDA version of GPU endpoints only
    assert spec_of(cpu="cpu3c-1-2", min_cuda_version="12.8").min_cuda_version is None
    with pytest.raises(InvalidEndpointError, match="min_cuda_version takes a CudaVersion"):
        spec_of(cpu="cpu3c-1-2", min_cuda_version="twelve")


def test_template_env_reaches_the_workers_under_the_endpoints_own_env() -> None:
    template = PodTemplate(env=[{"key": "A", "value": "from-template"}, {"key": "B", "value": "b"}])
    spec = spec_of(template=template, env={"A": "from-endpoint"})
    assert spec.env == {"A": "from-endpoint", "B": "b"}
    assert spec.template == template


def test_cloud_only_settings_are_recorded_as_given() -> None:
    spec = spec_of(
        flashboot=False,
        accelerate_downloads=True,
        template=PodTemplate(imageName="my/image:1", containerDiskInGb=100, env={"X": "1"}),
    )
    assert spec.flashboot is False and spec.accelerate_downloads is True
    assert spec.cloud_only == (
        "flashboot=False",
        "accelerate_downloads=True",
        "template.imageName='my/image:1'",
        "template.containerDiskInGb=100",
    )
    assert spec_of().cloud_only == ()  # nothing given, nothing to say


def test_volumes_are_kept_in_order() -> None:
    first, second = NetworkVolume(name="models"), NetworkVolume(id="vol_1", datacenter="US-KS-2")
    assert spec_of(volume=first).volumes == (first,)
    assert spec_of(volume=[first, second]).volumes == (first, second)


INVALID = {
    "cpu-and-gpu": ({"cpu": "cpu3c-1-2", "gpu": GpuGroup.ANY}, "gpu and cpu are mutually exclusive"),
    "cpu-unknown": ({"cpu": ["cpu3c-1-2", "cpu9x-1-1"]}, "unknown CPU instance type 'cpu9x-1-1'"),
    "datacenter-path": ({"datacenter": "../x"}, "datacenter takes DataCenter values or datacenter labels"),
    "datacenter-number": ({"datacenter": [1]}, "datacenter takes DataCenter values"),
    "cuda-garbage": ({"min_cuda_version": "12.x"}, "min_cuda_version takes a CudaVersion or a version string"),
    "cuda-number": ({"min_cuda_version": 12.8}, "min_cuda_version takes a CudaVersion"),
    "volume-string": ({"volume": "models"}, "volume takes NetworkVolume(name=...)"),
    "volume-empty-list": ({"volume": []}, "volume=[] lists no volume"),
    "template-dict": ({"template": {"env": []}}, "template takes a PodTemplate"),
    "flashboot-string": ({"flashboot": "yes"}, "flashboot must be True or False"),
    "accelerate-int": ({"accelerate_downloads": 1}, "accelerate_downloads must be True or False"),
}


@pytest.mark.parametrize(("options", "phrase"), INVALID.values(), ids=INVALID.keys())
def test_bad_flash_options_fail_at_decoration(options: dict[str, Any], phrase: str) -> None:
    with pytest.raises(InvalidEndpointError, match=re.escape(phrase)):
        spec_of(**options)


def test_image_is_refused_with_the_local_way_to_run_a_prebuilt_worker() -> None:
    with pytest.raises(InvalidEndpointError) as info:
        Endpoint(name="vllm", image="runpod/worker-v1-vllm:stable", gpu=GpuGroup.ANY)
    message = str(info.value)
    assert "image='runpod/worker-v1-vllm:stable'" in message
    assert "worker_command=[...]" in message and "runpod.serverless.start" in message


def test_name_is_derived_from_what_is_decorated_as_flash_does() -> None:
    @Endpoint(gpu=GpuGroup.ANY)
    async def summarise(text: str) -> str:
        return text

    @Endpoint(cpu="cpu3c-1-2")
    class Tokenizer:
        def encode(self, text: str) -> list[int]:
            return []

    assert summarise.spec.name == "summarise"
    assert Tokenizer.spec.name == "Tokenizer" and Tokenizer.spec.kind == "class"


def test_an_unnamed_endpoint_validates_its_options_at_once() -> None:
    with pytest.raises(InvalidEndpointError, match="^Endpoint: workers must be"):
        Endpoint(gpu=GpuGroup.ANY, workers="many")


def test_notes_say_what_each_cloud_option_means_here(tmp_path: Path) -> None:
    spec = spec_of(
        volume=NetworkVolume(name="models", size=50),
        template=PodTemplate(imageName="img", env={"HF_HOME": "/v"}),
        flashboot=False,
    )
    mounted = option_notes(spec, volumes_root=tmp_path, can_mount=True)
    assert mounted[0].startswith(f"volume 'models' is the directory {tmp_path / 'models'} on each node")
    assert "at /runpod-volume" in mounted[0] and "size (50 GB) is not enforced" in mounted[0]
    assert mounted[1] == "template env (HF_HOME) reaches the workers"
    assert mounted[2].startswith("flashboot=False, template.imageName='img': Runpod cloud settings")
    plain = option_notes(spec, volumes_root=tmp_path, can_mount=False)
    assert "/runpod-volume needs workers running as root on Linux" in plain[0]
    assert option_notes(spec_of(), volumes_root=tmp_path, can_mount=True) == ()


async def test_explain_says_what_the_cloud_options_mean_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.scheduler.door import open_door

    monkeypatch.setenv("FLASHPOINT_VOLUMES_DIR", str(tmp_path))
    door = await open_door("NVIDIA_H200:1")
    door.endpoint(name="cloudy", gpu=GpuGroup.ANY, volume=NetworkVolume(name="models"), flashboot=False)
    door.endpoint(name="plain", gpu=GpuGroup.ANY)
    notes = door.plane.explain_endpoint("cloudy").notes
    assert notes[0].startswith(f"volume 'models' is the directory {tmp_path / 'models'} on each node")
    assert notes[1].startswith("flashboot=False: Runpod cloud settings")
    assert "note: flashboot=False" in str(door.plane.explain_endpoint("cloudy"))
    assert door.plane.explain_endpoint("plain").notes == ()
