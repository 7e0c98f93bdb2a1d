"""rc2's GPU and CPU enums (``runpod/apps/gpu.py``): values, pools, and every form ``resolve_gpu_string`` takes."""

from __future__ import annotations

import pytest

from flashpoint.runpodapps.errors import InvalidResourceError
from flashpoint.runpodapps.gpu import (
    POOLS_TO_TYPES,
    CpuInstanceType,
    GpuGroup,
    GpuType,
    pool_for_gpu_type,
    resolve_gpu_string,
)


def test_these_are_rc2s_enums_not_flashpoints() -> None:
    import flashpoint

    assert GpuGroup is not flashpoint.GpuGroup
    assert GpuType is not flashpoint.GpuType
    assert GpuGroup.ANY.value == "any" and GpuType.ANY.value == "any"
    assert GpuType.NVIDIA_H100_PCIe.value == "NVIDIA H100 PCIe"
    assert CpuInstanceType.CPU5C_8_16 == "cpu5c-8-16"


def test_all_leaves_out_any() -> None:
    assert GpuGroup.ANY not in GpuGroup.all() and len(GpuGroup.all()) == len(GpuGroup) - 1
    assert GpuType.ANY not in GpuType.all() and len(GpuType.all()) == len(GpuType) - 1


def test_every_device_is_in_exactly_one_pool() -> None:
    for gpu_type in GpuType.all():
        owners = [group for group, types in POOLS_TO_TYPES.items() if gpu_type in types]
        assert len(owners) == 1, gpu_type
        assert pool_for_gpu_type(gpu_type) is owners[0]
    assert pool_for_gpu_type(GpuType.ANY) is None


def test_device_names() -> None:
    assert GpuGroup.ADA_80_PRO.device_names() == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL"]
    assert GpuGroup.ANY.device_names() == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("any", ["any"]),
        (" ANY ", ["any"]),
        ("ADA_24", ["ADA_24"]),
        ("blackwell_180", ["BLACKWELL_180"]),
        ("NVIDIA A100-SXM4-80GB", ["NVIDIA A100-SXM4-80GB"]),
        ("nvidia geforce rtx 3090", ["NVIDIA GeForce RTX 3090"]),
        ("NVIDIA_L4", ["NVIDIA L4"]),
        ("NVIDIA_RTX_A6000", ["NVIDIA RTX A6000"]),
        ("B200", ["NVIDIA B200"]),
        ("5090", ["NVIDIA GeForce RTX 5090"]),
        ("H200", ["NVIDIA H200"]),
        ("rtx_pro_6000", [gpu_type.value for gpu_type in POOLS_TO_TYPES[GpuGroup.BLACKWELL_96]]),
        ("A40", ["NVIDIA RTX A4000", "NVIDIA A40"]),  # a fragment: "RTX A4000" holds "A40" too
        (
            "ada generation",
            [
                "NVIDIA RTX 6000 Ada Generation",
                "NVIDIA RTX 4000 Ada Generation",
                "NVIDIA RTX 2000 Ada Generation",
            ],
        ),
    ],
)
def test_gpu_strings(text: str, expected: list[str]) -> None:
    assert resolve_gpu_string(text) == expected


@pytest.mark.parametrize("text", ["H1000", "TPU", "AMPERE_96", "", "  "])
def test_unknown_gpu_lists_the_options(text: str) -> None:
    if not text.strip():
        # an empty fragment is in every name: rc2 takes it as every device
        assert resolve_gpu_string(text) == [gpu_type.value for gpu_type in GpuType.all()]
        return
    with pytest.raises(InvalidResourceError) as raised:
        resolve_gpu_string(text)
    pools = ", ".join(group.value for group in GpuGroup.all())
    devices = ", ".join(gpu_type.value for gpu_type in GpuType.all())
    assert str(raised.value) == (
        f"unknown gpu '{text}'. use a pool id ({pools}), a device name ({devices}), or a fragment like '4090' or 'H100'"
    )
