"""Runpod Flash's public names in flashpoint (issue 11, point 1): values, signatures, and the legacy aliases' warnings.

The tables here are runpod-flash 1.21's, read from its source; ``test_flash_surface.py`` checks them against the
installed package itself.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from enum import Enum
from typing import Any

import pytest

import flashpoint
from flashpoint import (
    CPU_DATACENTERS,
    DEFAULT_WORKERS_MAX,
    DEFAULT_WORKERS_MIN,
    CpuInstanceType,
    CpuLiveLoadBalancer,
    CpuLiveServerless,
    CpuLoadBalancerSlsResource,
    CpuServerlessEndpoint,
    CudaVersion,
    DataCenter,
    FlashApp,
    GpuGroup,
    GpuType,
    LiveLoadBalancer,
    LiveServerless,
    LoadBalancerSlsResource,
    NetworkVolume,
    PodTemplate,
    ResourceManager,
    ServerlessEndpoint,
    ServerlessScalerType,
    ServerlessType,
    remote,
)
from flashpoint.errors import InvalidEndpointError
from flashpoint.flash import names as flash_module
from flashpoint.sdk.endpoint import EndpointFunction

#: runpod_flash.__all__ (1.21.0)
FLASH_ALL = (
    "Endpoint",
    "EndpointJob",
    "remote",
    "CPU_DATACENTERS",
    "CpuInstanceType",
    "CpuLiveLoadBalancer",
    "CpuLiveServerless",
    "CpuLoadBalancerSlsResource",
    "CpuServerlessEndpoint",
    "CudaVersion",
    "DataCenter",
    "GpuGroup",
    "GpuType",
    "LiveLoadBalancer",
    "LiveServerless",
    "LoadBalancerSlsResource",
    "NetworkVolume",
    "PodTemplate",
    "ResourceManager",
    "ServerlessEndpoint",
    "ServerlessScalerType",
    "ServerlessType",
    "FlashApp",
    "DEFAULT_WORKERS_MIN",
    "DEFAULT_WORKERS_MAX",
)

#: Flash names flashpoint does not export yet, with the point that adds them
PENDING: dict[str, str] = {}

DEPRECATED = (
    "CpuLiveLoadBalancer",
    "CpuLiveServerless",
    "CpuLoadBalancerSlsResource",
    "CpuServerlessEndpoint",
    "LiveLoadBalancer",
    "LiveServerless",
    "LoadBalancerSlsResource",
    "ServerlessEndpoint",
)


def _members(enum: type[Enum]) -> dict[str, Any]:
    return {member.name: member.value for member in enum}


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees the aliases as if for the first time in the process."""
    monkeypatch.setattr(flash_module, "_warned", set())
    yield


# --- names --------------------------------------------------------------------------------------------------------


def test_every_flash_name_imports_from_flashpoint() -> None:
    missing = [name for name in FLASH_ALL if name not in PENDING and not hasattr(flashpoint, name)]
    assert missing == []
    assert all(name in flashpoint.__all__ for name in FLASH_ALL if name not in PENDING)


def test_pending_names_are_really_missing() -> None:
    # when a pending name lands, drop it from PENDING (and from test_flash_surface's allow-list)
    assert [name for name in PENDING if hasattr(flashpoint, name)] == []


def test_flash_module_exports_are_in_the_package() -> None:
    assert set(flash_module.__all__) <= set(flashpoint.__all__)


# --- value tables -------------------------------------------------------------------------------------------------


def test_cpu_instance_types() -> None:
    assert _members(CpuInstanceType) == {
        "CPU3G_1_4": "cpu3g-1-4",
        "CPU3G_2_8": "cpu3g-2-8",
        "CPU3G_4_16": "cpu3g-4-16",
        "CPU3G_8_32": "cpu3g-8-32",
        "CPU3C_1_2": "cpu3c-1-2",
        "CPU3C_2_4": "cpu3c-2-4",
        "CPU3C_4_8": "cpu3c-4-8",
        "CPU3C_8_16": "cpu3c-8-16",
        "CPU5C_1_2": "cpu5c-1-2",
        "CPU5C_2_4": "cpu5c-2-4",
        "CPU5C_4_8": "cpu5c-4-8",
        "CPU5C_8_16": "cpu5c-8-16",
    }
    assert CpuInstanceType("cpu3c-1-2") is CpuInstanceType.CPU3C_1_2
    assert CpuInstanceType.CPU3C_1_2 == "cpu3c-1-2"  # type: ignore[comparison-overlap]
    assert f"{CpuInstanceType.CPU3G_8_32}" == str(CpuInstanceType.CPU3G_8_32) == "cpu3g-8-32"
    assert (CpuInstanceType.CPU3G_8_32.vcpus, CpuInstanceType.CPU3G_8_32.memory_gb) == (8, 32)
    assert all(t.memory_gb == t.vcpus * (4 if t.value.startswith("cpu3g") else 2) for t in CpuInstanceType)


def test_datacenters() -> None:
    assert _members(DataCenter) == {
        "US_CA_2": "US-CA-2",
        "US_IL_1": "US-IL-1",
        "US_KS_2": "US-KS-2",
        "US_MO_1": "US-MO-1",
        "US_MO_2": "US-MO-2",
        "US_NC_2": "US-NC-2",
        "US_NE_1": "US-NE-1",
        "US_WA_1": "US-WA-1",
        "EU_CZ_1": "EU-CZ-1",
        "EU_RO_1": "EU-RO-1",
        "EUR_NO_1": "EUR-NO-1",
    }
    assert CPU_DATACENTERS == frozenset({DataCenter.EU_RO_1})
    assert DataCenter.all() == list(DataCenter)
    assert DataCenter.from_string(" eu_ro_1 ") is DataCenter.EU_RO_1
    with pytest.raises(ValueError, match="Unknown datacenter 'US-GA-2'. Valid datacenters: US-CA-2"):
        DataCenter.from_string("US-GA-2")


def test_cuda_versions() -> None:
    assert _members(CudaVersion) == {
        "V11_8": "11.8",
        **{f"V12_{minor}": f"12.{minor}" for minor in range(10)},
        "V13_0": "13.0",
    }
    assert list(CudaVersion)[0] is CudaVersion.V11_8


def test_serverless_types_and_scaler_types() -> None:
    assert _members(ServerlessType) == {"QB": "QB", "LB": "LB"}
    assert _members(ServerlessScalerType) == {"QUEUE_DELAY": "QUEUE_DELAY", "REQUEST_COUNT": "REQUEST_COUNT"}


def test_default_workers() -> None:
    assert (DEFAULT_WORKERS_MIN, DEFAULT_WORKERS_MAX) == (0, 1)


# --- GpuType / GpuGroup helpers -----------------------------------------------------------------------------------


def test_gpu_type_helpers() -> None:
    assert GpuType.all() == [g for g in GpuType if g is not GpuType.ANY]
    assert len(GpuType.all()) == 20
    assert GpuType.is_gpu_type("NVIDIA H200")
    assert not GpuType.is_gpu_type("any")
    assert not GpuType.is_gpu_type("HOPPER_141")


def test_gpu_group_all_lists_each_pool_once() -> None:
    assert GpuGroup.all() == [g for g in GpuGroup if g is not GpuGroup.ANY]
    assert len(GpuGroup.all()) == len(set(GpuGroup.all())) == 11


def test_gpu_ids_strings() -> None:
    assert GpuGroup.to_gpu_ids_str([GpuGroup.AMPERE_80]) == "AMPERE_80"
    # an explicit model: its pool, minus the pool's other models (the seed's pools)
    assert GpuGroup.to_gpu_ids_str([GpuType.NVIDIA_A100_80GB_PCIe]) == "AMPERE_80,-NVIDIA A100-SXM4-80GB"
    assert GpuGroup.to_gpu_ids_str([GpuType.NVIDIA_A100_80GB_PCIe, GpuGroup.AMPERE_80]) == "AMPERE_80"
    assert GpuGroup.to_gpu_ids_str([GpuType.NVIDIA_H200]) == "HOPPER_141"
    assert GpuGroup.normalize_gpu_ids_str(" -B, a ,C,a") == "a,C,-B"
    assert GpuGroup.from_gpu_ids_str("AMPERE_80,-NVIDIA A100-SXM4-80GB") == [GpuType.NVIDIA_A100_80GB_PCIe]
    assert GpuGroup.from_gpu_ids_str("HOPPER_141,NVIDIA L4,NOT_A_POOL") == [GpuGroup.HOPPER_141, GpuType.NVIDIA_L4]
    selections: list[list[GpuType | GpuGroup]] = [
        [GpuGroup.ADA_24],
        [GpuType.NVIDIA_RTX_A4000],
        [GpuType.NVIDIA_L4, GpuGroup.HOPPER_141],
    ]
    for selection in selections:
        assert set(GpuGroup.from_gpu_ids_str(GpuGroup.to_gpu_ids_str(selection))) == set(selection)


# --- NetworkVolume, PodTemplate -------------------------------------------------------------------------------------


def test_network_volume() -> None:
    assert [(f.name, f.default) for f in dataclasses.fields(NetworkVolume)] == [
        ("name", None),
        ("id", None),
        ("size", 100),
        ("datacenter", DataCenter.EU_RO_1),
    ]
    volume = NetworkVolume(name="models", size=50, datacenter="us-ca-2")  # type: ignore[arg-type]
    assert volume.datacenter is volume.dataCenterId is DataCenter.US_CA_2
    assert NetworkVolume(id="abc").name is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        volume.size = 60  # type: ignore[misc]
    with pytest.raises(ValueError, match="either 'name' or 'id'"):
        NetworkVolume()
    with pytest.raises(ValueError, match="must not be empty"):
        NetworkVolume(name="  ")
    for size in (9, 4097, True):
        with pytest.raises(ValueError, match="10 to 4096"):
            NetworkVolume(name="v", size=size)
    with pytest.raises(ValueError, match="Unknown datacenter"):
        NetworkVolume(name="v", datacenter="nowhere")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        NetworkVolume("v")  # type: ignore[call-arg]


def test_pod_template() -> None:
    assert {f.name: f.default for f in dataclasses.fields(PodTemplate) if f.name != "config"} == {
        "advancedStart": False,
        "containerDiskInGb": 64,
        "containerRegistryAuthId": "",
        "dockerArgs": "",
        "env": (),
        "imageName": "",
        "name": "",
        "ports": "",
        "startScript": "",
    }
    assert PodTemplate().config == {}
    template = PodTemplate(containerDiskInGb=100, env=[{"key": "A", "value": "1"}])  # type: ignore[list-item]
    assert template.env == (("A", "1"),)
    assert PodTemplate(env={"A": "1", "B": "2"}).env_dict == {"A": "1", "B": "2"}  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="env entries"):
        PodTemplate(env=[{"name": "A"}])  # type: ignore[list-item]


def test_cloud_management_names_import_and_say_what_they_are() -> None:
    with pytest.raises(NotImplementedError, match="Runpod's cloud"):
        FlashApp("app")
    with pytest.raises(NotImplementedError, match="Runpod's cloud"):
        ResourceManager()


# --- legacy aliases -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", DEPRECATED)
def test_legacy_resource_warns_once_per_name(name: str, fresh_warnings: None) -> None:
    cls = getattr(flashpoint, name)
    with pytest.warns(DeprecationWarning, match=rf"flashpoint\.{name} is deprecated") as record:
        cls(name="ep")
    assert len(record) == 1
    assert record[0].filename == __file__  # attributed to the caller
    cls(name="again")  # no second warning (warnings are errors in this suite)


def test_warnings_are_per_name(fresh_warnings: None) -> None:
    with pytest.deprecated_call():
        LiveServerless(name="a")
    with pytest.deprecated_call():
        ServerlessEndpoint(name="b")
    LiveServerless(name="c")


def test_importing_the_aliases_does_not_warn() -> None:
    namespace: dict[str, Any] = {}
    exec("from flashpoint import *", namespace)
    assert namespace["LiveServerless"] is LiveServerless


def test_legacy_resource_maps_onto_endpoint_options(fresh_warnings: None) -> None:
    with pytest.deprecated_call():
        gpu = LiveServerless(name="gpu", gpus=[GpuGroup.AMPERE_80], workersMax=3, idleTimeout=5, env={"A": "1"})
    assert gpu.endpoint_options() == {
        "name": "gpu",
        "gpu": [GpuGroup.AMPERE_80],
        "workers": (0, 3),
        "idle_timeout": 5,
        "env": {"A": "1"},
    }
    with pytest.deprecated_call():
        cpu = CpuLiveServerless(name="cpu")
    assert cpu.endpoint_options() == {"name": "cpu", "cpu": [CpuInstanceType.CPU3G_2_8]}
    with pytest.deprecated_call():
        cpu2 = CpuServerlessEndpoint(name="cpu2", instanceIds=[CpuInstanceType.CPU3C_1_2], workersMin=1)
    assert cpu2.endpoint_options() == {"name": "cpu2", "cpu": [CpuInstanceType.CPU3C_1_2], "workers": (1, 1)}
    with pytest.raises(TypeError, match="unknown field 'gpuz'"):
        LiveServerless(name="x", gpuz=[])
    with pytest.raises(TypeError, match="name is required"):
        LiveServerless(gpus=[])
    assert "LiveServerless(name='gpu'" in repr(gpu)


def test_remote_warns_once_and_behaves_as_endpoint(fresh_warnings: None) -> None:
    with pytest.deprecated_call():
        config = LiveServerless(name="legacy", gpus=[GpuType.NVIDIA_H200], workersMin=0, workersMax=2)
    with pytest.warns(DeprecationWarning, match=r"flashpoint\.remote is deprecated") as record:
        decorator = remote(resource_config=config, dependencies=["numpy"])
    assert len(record) == 1

    @decorator
    async def legacy(x: int) -> int:
        return x + 1

    assert isinstance(legacy, EndpointFunction)
    assert legacy.spec.name == "legacy"
    assert (legacy.spec.workers_min, legacy.spec.workers_max) == (0, 2)
    assert legacy.spec.dependencies == ("numpy",)

    @remote(config, local=True)  # no second warning
    def plain(x: int) -> int:
        return x

    assert plain(3) == 3


def test_remote_on_a_cpu_config(fresh_warnings: None) -> None:
    with pytest.deprecated_call():
        config = CpuLiveServerless(name="cpu-legacy", instanceIds=[CpuInstanceType.CPU3C_2_4])
    with pytest.deprecated_call():

        @remote(config)
        async def work(x: int) -> int:
            return x

    assert work.spec.cpu == ("cpu3c-2-4",)
    assert not work.spec.uses_gpu


@pytest.mark.parametrize(
    "cls", [LiveLoadBalancer, CpuLiveLoadBalancer, LoadBalancerSlsResource, CpuLoadBalancerSlsResource]
)
def test_remote_routes_are_refused_until_routes_exist(cls: type[Any], fresh_warnings: None) -> None:
    with pytest.deprecated_call():
        config = cls(name="lb")
    with pytest.deprecated_call(), pytest.raises(InvalidEndpointError, match="HTTP routes"):
        remote(config, method="POST", path="/x")


def test_remote_rejects_what_is_not_a_legacy_config(fresh_warnings: None) -> None:
    with pytest.deprecated_call(), pytest.raises(InvalidEndpointError, match="resource_config"):
        remote(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown argument 'bogus'"):
        remote(ServerlessEndpoint, bogus=1)  # type: ignore[arg-type]


def test_remote_signature_is_flashs() -> None:
    assert list(inspect.signature(remote).parameters) == [
        "resource_config",
        "dependencies",
        "system_dependencies",
        "accelerate_downloads",
        "local",
        "method",
        "path",
        "extra",
    ]
