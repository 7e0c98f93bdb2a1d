"""Tests for flashpoint.gpus: the catalog against the seed, parsing, identification and candidate lists."""

from __future__ import annotations

import pickle
import re

import pytest

from flashpoint import gpus
from flashpoint.errors import InvalidEndpointError, UnknownGPUError
from flashpoint.gpus import (
    ANY_GPU,
    MODELS,
    AnyGPU,
    GpuGroup,
    GPUModel,
    GpuType,
    candidates,
    describe,
    identify,
    model_of,
    parse_gpu,
    pool_models,
)
from tests.conftest import seed_path

# --- the seed is the authority ------------------------------------------------------------------------------


def _seed_rows(kind: str) -> list[list[str]]:
    """The seed's table rows for `GpuType.X` or `GpuGroup.X`: [member name, column, column, ...]."""
    rows = []
    pattern = re.compile(rf"^`{kind}\.(\w+)`\t(.*)$")
    for line in seed_path().read_text(encoding="utf-8").splitlines():
        match = pattern.match(line)
        if match:
            rows.append([match.group(1), *(c.strip() for c in match.group(2).split("\t"))])
    assert rows, f"no {kind} table found in the seed"
    return rows


def _short_forms(model: GPUModel) -> set[str]:
    """The model's names without the "NVIDIA " / "GeForce " prefixes, as the seed's pool table writes them."""
    forms = set()
    for spelling in (model.name, *model.nvml_names):
        short = spelling.removeprefix("NVIDIA ").removeprefix("GeForce ")
        forms.add(short)
    return forms


def _models_named(entry: str) -> GPUModel:
    """The one model a "GPUs Included" entry names: exactly, else as the start of exactly one name."""
    exact = [m for m in MODELS if entry in _short_forms(m)]
    if exact:
        assert len(exact) == 1, (entry, exact)
        return exact[0]
    starts = [m for m in MODELS if any(f.startswith(entry + " ") for f in _short_forms(m))]
    assert len(starts) == 1, f"seed entry {entry!r} names {len(starts)} models: {starts}"
    return starts[0]


def _expand_included(cell: str) -> list[str]:
    # "RTX PRO 6000 Blackwell (Server, Workstation, Max-Q)" is three models sharing a stem.
    match = re.fullmatch(r"(.*?)\s*\((.*)\)", cell)
    if match:
        return [f"{match.group(1)} {variant.strip()}" for variant in match.group(2).split(",")]
    return [part.strip() for part in cell.split(",")]


def _vram_range(cell: str) -> tuple[int, int]:
    numbers = [int(n) for n in re.findall(r"\d+", cell)]
    return (min(numbers), max(numbers))


def test_gpu_type_members_are_the_seeds_in_order() -> None:
    assert [m.name for m in GpuType] == [row[0] for row in _seed_rows("GpuType")]


def test_gpu_group_members_are_the_seeds_in_order() -> None:
    assert [g.name for g in GpuGroup] == [row[0] for row in _seed_rows("GpuGroup")]
    assert all(g.value == g.name for g in GpuGroup if g is not GpuGroup.ANY)
    assert GpuGroup.ANY.value == "any"


def test_gpu_type_values_vram_and_architecture_match_the_seed() -> None:
    for member_name, model_column, vram, architecture in _seed_rows("GpuType"):
        member = GpuType[member_name]
        if member is GpuType.ANY:
            assert member.value == "any"
            continue
        model = model_of(member)
        assert model.member is member
        assert member.value == model.name
        # The seed writes "NVIDIA RTX 6000 Ada"; the driver (and the value) say "... Ada Generation".
        assert model_column == model.name or (
            model_column in model.nvml_names and model.name == f"{model_column} Generation"
        ), (member_name, model_column)
        assert f"{model.vram_gb}GB" == vram, member_name
        assert model.architecture == architecture, member_name


def test_pools_hold_the_seeds_models_in_the_seeds_order() -> None:
    for group_name, included, vram, _best_for in _seed_rows("GpuGroup"):
        group = GpuGroup[group_name]
        if group is GpuGroup.ANY:
            assert pool_models(group) == MODELS
            continue
        expected = [_models_named(entry) for entry in _expand_included(included)]
        assert list(pool_models(group)) == expected, group_name
        low, high = _vram_range(vram)
        for model in expected:
            assert model.pool is group
            assert low <= model.vram_gb <= high, (group_name, model.name)


def test_models_are_the_gpu_types_in_seed_order_then_l40s_and_l40() -> None:
    members = [m for m in GpuType if m is not GpuType.ANY]
    assert [m.member for m in MODELS[: len(members)]] == members
    assert [(m.name, m.member) for m in MODELS[len(members) :]] == [("NVIDIA L40S", None), ("NVIDIA L40", None)]
    assert len({m.name for m in MODELS}) == len(MODELS)


def test_every_model_is_in_exactly_one_pool() -> None:
    for model in MODELS:
        holders = [g for g in GpuGroup if g is not GpuGroup.ANY and model in pool_models(g)]
        assert holders == [model.pool], model.name


def test_the_seed_wins_over_runpods_code_for_l4_and_a4500() -> None:
    assert model_of(GpuType.NVIDIA_L4).pool is GpuGroup.ADA_24
    assert model_of(GpuType.NVIDIA_RTX_A4500).pool is GpuGroup.AMPERE_24


# --- enums, models, ANY ---------------------------------------------------------------------------------------


def test_enums_print_as_their_values() -> None:
    assert str(GpuType.NVIDIA_H200) == "NVIDIA H200"
    assert f"{GpuType.NVIDIA_A100_SXM4_80GB}" == "NVIDIA A100-SXM4-80GB"
    assert str(GpuGroup.AMPERE_80) == f"{GpuGroup.AMPERE_80}" == "AMPERE_80"
    assert str(GpuType.ANY) == str(GpuGroup.ANY) == "any"
    assert GpuType("NVIDIA H200") is GpuType.NVIDIA_H200


def test_model_of_any_is_an_error() -> None:
    with pytest.raises(ValueError, match="ANY"):
        model_of(GpuType.ANY)


def test_gpu_model_is_frozen_and_prints_its_name() -> None:
    model = model_of(GpuType.NVIDIA_H200)
    assert str(model) == "NVIDIA H200"
    assert (model.vram_gb, model.architecture, model.pool) == (141, "Hopper", GpuGroup.HOPPER_141)
    with pytest.raises(AttributeError):
        model.vram_gb = 1  # type: ignore[misc]


def test_any_gpu_is_a_singleton_that_survives_pickling() -> None:
    assert AnyGPU() is ANY_GPU
    assert pickle.loads(pickle.dumps(ANY_GPU)) is ANY_GPU
    assert repr(ANY_GPU) == "ANY"
    assert describe(ANY_GPU) == "ANY"
    assert describe(model_of(GpuType.NVIDIA_H200)) == "NVIDIA H200"


def test_all_names_exist() -> None:
    for name in gpus.__all__:
        assert hasattr(gpus, name), name


# --- parse_gpu -------------------------------------------------------------------------------------------------

L40S = next(m for m in MODELS if m.name == "NVIDIA L40S")
L40 = next(m for m in MODELS if m.name == "NVIDIA L40")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # GpuType member names
        ("NVIDIA_H200", GpuType.NVIDIA_H200),
        ("nvidia_a100_80gb_pcie", GpuType.NVIDIA_A100_80GB_PCIe),
        (
            "NVIDIA_RTX_PRO_6000_BLACKWELL_MAX_Q_WORKSTATION_EDITION",
            GpuType.NVIDIA_RTX_PRO_6000_BLACKWELL_MAX_Q_WORKSTATION_EDITION,
        ),
        ("GpuType.NVIDIA_B200", GpuType.NVIDIA_B200),
        # GpuGroup member names
        ("HOPPER_141", GpuGroup.HOPPER_141),
        ("ampere_80", GpuGroup.AMPERE_80),
        ("Ada-48-Pro", GpuGroup.ADA_48_PRO),
        ("GpuGroup.BLACKWELL_96", GpuGroup.BLACKWELL_96),
        # NVML names
        ("NVIDIA H200", GpuType.NVIDIA_H200),
        ("a100 80gb pcie", GpuType.NVIDIA_A100_80GB_PCIe),
        ("NVIDIA A100-SXM4-80GB", GpuType.NVIDIA_A100_SXM4_80GB),
        ("NVIDIA H100 80GB HBM3", GpuType.NVIDIA_H100_80GB_HBM3),
        ("NVIDIA GeForce RTX 4090", GpuType.NVIDIA_GEFORCE_RTX_4090),
        ("NVIDIA RTX 6000 Ada Generation", GpuType.NVIDIA_RTX_6000_ADA_GENERATION),
        ("NVIDIA RTX 6000 Ada", GpuType.NVIDIA_RTX_6000_ADA_GENERATION),
        ("NVIDIA L40S", L40S),
        # without the vendor prefixes
        ("H200", GpuType.NVIDIA_H200),
        ("  h200 ", GpuType.NVIDIA_H200),
        ("RTX 4090", GpuType.NVIDIA_GEFORCE_RTX_4090),
        ("GeForce RTX 3090", GpuType.NVIDIA_GEFORCE_RTX_3090),
        ("A100-SXM4-80GB", GpuType.NVIDIA_A100_SXM4_80GB),
        ("RTX A6000", GpuType.NVIDIA_RTX_A6000),
        ("RTX 2000 Ada", GpuType.NVIDIA_RTX_2000_ADA_GENERATION),
        ("L4", GpuType.NVIDIA_L4),
        ("L40S", L40S),
        ("l40", L40),
        # words that pick out exactly one model
        ("H100", GpuType.NVIDIA_H100_80GB_HBM3),
        ("A100 PCIe", GpuType.NVIDIA_A100_80GB_PCIe),
        ("RTX PRO 6000 Blackwell Max-Q", GpuType.NVIDIA_RTX_PRO_6000_BLACKWELL_MAX_Q_WORKSTATION_EDITION),
        # any
        ("ANY", GpuGroup.ANY),
        ("any", GpuGroup.ANY),
        # enum members pass through
        (GpuType.NVIDIA_A40, GpuType.NVIDIA_A40),
        (GpuGroup.ADA_24, GpuGroup.ADA_24),
    ],
)
def test_parse_gpu_accepts_the_forms_users_type(text: str, expected: object) -> None:
    assert parse_gpu(text) == expected


@pytest.mark.parametrize(
    ("text", "matches", "pool"),
    [
        ("A100", {"NVIDIA_A100_80GB_PCIe", "NVIDIA_A100_SXM4_80GB"}, "GpuGroup.AMPERE_80"),
        ("a100 80gb", {"NVIDIA_A100_80GB_PCIe", "NVIDIA_A100_SXM4_80GB"}, "GpuGroup.AMPERE_80"),
        (
            "RTX PRO 6000",
            {
                "NVIDIA_RTX_PRO_6000_BLACKWELL_SERVER_EDITION",
                "NVIDIA_RTX_PRO_6000_BLACKWELL_WORKSTATION_EDITION",
                "NVIDIA_RTX_PRO_6000_BLACKWELL_MAX_Q_WORKSTATION_EDITION",
            },
            "GpuGroup.BLACKWELL_96",
        ),
    ],
)
def test_parse_gpu_refuses_ambiguous_names(text: str, matches: set[str], pool: str) -> None:
    with pytest.raises(UnknownGPUError, match="ambiguous") as info:
        parse_gpu(text)
    assert set(info.value.suggestions) == matches
    assert info.value.name == text
    assert pool in str(info.value)
    assert "Pick one" in str(info.value)


def test_parse_gpu_does_not_guess_between_different_rtx_6000s() -> None:
    with pytest.raises(UnknownGPUError, match="ambiguous") as info:
        parse_gpu("RTX 6000")
    assert "NVIDIA_RTX_6000_ADA_GENERATION" in info.value.suggestions


@pytest.mark.parametrize(
    ("text", "suggestion"),
    [
        ("H20", "H200"),
        ("NVIDIA H2000", "NVIDIA H200"),
        ("AMPERE_8", "AMPERE_80"),
        ("4090", "RTX 4090"),
        ("A100 80GB PCI", "A100 80GB PCIe"),
    ],
)
def test_parse_gpu_suggests_close_names(text: str, suggestion: str) -> None:
    with pytest.raises(UnknownGPUError, match="Did you mean") as info:
        parse_gpu(text)
    assert suggestion in info.value.suggestions
    assert "flashpoint gpus" in str(info.value)


@pytest.mark.parametrize("text", ["H100 PCIe", "NVIDIA H200 NVL", "T4", "pcie"])
def test_parse_gpu_does_not_confuse_other_cards(text: str) -> None:
    with pytest.raises(UnknownGPUError) as info:
        parse_gpu(text)
    assert "ambiguous" not in str(info.value)


@pytest.mark.parametrize("text", ["", "   ", "_-"])
def test_parse_gpu_rejects_empty_names(text: str) -> None:
    with pytest.raises(UnknownGPUError, match="empty"):
        parse_gpu(text)


@pytest.mark.parametrize("value", [None, 3, ["H200"]])
def test_parse_gpu_rejects_non_strings(value: object) -> None:
    with pytest.raises(UnknownGPUError, match="must be a string"):
        parse_gpu(value)  # type: ignore[arg-type]


def test_unknown_gpu_error_is_an_invalid_endpoint_error() -> None:
    with pytest.raises(InvalidEndpointError):
        parse_gpu("nope")


# --- identify --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nvml_name", "memory_mb", "expected"),
    [
        # memory totals as NVML reports them on real cards (MiB)
        ("NVIDIA H200", 143771, "NVIDIA H200"),
        ("NVIDIA A100-SXM4-80GB", 81920, "NVIDIA A100-SXM4-80GB"),
        ("NVIDIA A100 80GB PCIe", 81920, "NVIDIA A100 80GB PCIe"),
        ("NVIDIA H100 80GB HBM3", 81559, "NVIDIA H100 80GB HBM3"),
        ("NVIDIA L40S", 46068, "NVIDIA L40S"),
        ("NVIDIA L40", 46068, "NVIDIA L40"),
        ("NVIDIA L4", 23034, "NVIDIA L4"),
        ("NVIDIA A40", 46068, "NVIDIA A40"),
        ("NVIDIA RTX A4500", 20470, "NVIDIA RTX A4500"),
        ("NVIDIA GeForce RTX 4090", 24564, "NVIDIA GeForce RTX 4090"),
        ("NVIDIA GeForce RTX 5090", 32607, "NVIDIA GeForce RTX 5090"),
        ("NVIDIA RTX 6000 Ada Generation", 49140, "NVIDIA RTX 6000 Ada Generation"),
        ("NVIDIA RTX 4000 Ada Generation", 20475, "NVIDIA RTX 4000 Ada Generation"),
        ("NVIDIA RTX 2000 Ada Generation", 16380, "NVIDIA RTX 2000 Ada Generation"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
        ("NVIDIA B200", 183359, "NVIDIA B200"),
        # tolerated spellings
        ("  nvidia h200\n", None, "NVIDIA H200"),
        ("H200", None, "NVIDIA H200"),
        ("GeForce RTX 3090", 24576, "NVIDIA GeForce RTX 3090"),
        ("NVIDIA  A100 80GB  PCIe", None, "NVIDIA A100 80GB PCIe"),
        ("NVIDIA RTX 6000 Ada", None, "NVIDIA RTX 6000 Ada Generation"),
    ],
)
def test_identify_known_devices(nvml_name: str, memory_mb: int | None, expected: str) -> None:
    model = identify(nvml_name, memory_mb)
    assert model is not None
    assert model.name == expected


@pytest.mark.parametrize(
    "nvml_name",
    [
        "NVIDIA H200 NVL",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA H100 PCIe",
        "NVIDIA H100 NVL",
        "NVIDIA RTX 4000 SFF Ada Generation",
        "Tesla T4",
        "NVIDIA A100 SXM4 80GB",  # NVML never drops the hyphens; this is not a real device name
        "",
    ],
)
def test_identify_unknown_devices(nvml_name: str) -> None:
    assert identify(nvml_name) is None
    assert identify(nvml_name, 200_000) is None


@pytest.mark.parametrize(
    ("nvml_name", "memory_mb"),
    [
        ("NVIDIA H200", 40_000),  # a MIG slice or a smaller card under the same name
        ("NVIDIA A100 80GB PCIe", 40_960),  # a 40 GB card cannot be the 80 GB model
        ("NVIDIA GeForce RTX 4090", 12_000),
    ],
)
def test_identify_rejects_too_little_memory(nvml_name: str, memory_mb: int) -> None:
    assert identify(nvml_name) is not None
    assert identify(nvml_name, memory_mb) is None


def test_identify_threshold_is_85_percent_of_the_seeds_vram() -> None:
    limit = 141 * 1024 * 0.85
    assert identify("NVIDIA H200", int(limit) + 1) is not None
    assert identify("NVIDIA H200", int(limit) - 1) is None


# --- candidates ------------------------------------------------------------------------------------------------

H200 = model_of(GpuType.NVIDIA_H200)
A40 = model_of(GpuType.NVIDIA_A40)
A6000 = model_of(GpuType.NVIDIA_RTX_A6000)
A100_PCIE = model_of(GpuType.NVIDIA_A100_80GB_PCIe)
A100_SXM = model_of(GpuType.NVIDIA_A100_SXM4_80GB)
L4 = model_of(GpuType.NVIDIA_L4)
RTX_4090 = model_of(GpuType.NVIDIA_GEFORCE_RTX_4090)
RTX_6000_ADA = model_of(GpuType.NVIDIA_RTX_6000_ADA_GENERATION)


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        (GpuType.NVIDIA_H200, (H200,)),
        (GpuGroup.AMPERE_48, (A40, A6000)),
        (GpuGroup.ADA_48_PRO, (L40S, L40, RTX_6000_ADA)),
        (GpuType.ANY, (ANY_GPU,)),
        (GpuGroup.ANY, (ANY_GPU,)),
        ("any", (ANY_GPU,)),
        ("H200", (H200,)),
        ("AMPERE_80", (A100_PCIE, A100_SXM)),
        (L40S, (L40S,)),
        # the seed's hybrid example
        ([GpuType.NVIDIA_A100_80GB_PCIe, GpuGroup.AMPERE_48, GpuGroup.ANY], (A100_PCIE, A40, A6000, ANY_GPU)),
        # the seed's pool fallback: "Tries: A100 -> A40/A6000 -> RTX 4090"
        (
            [GpuGroup.AMPERE_80, GpuGroup.AMPERE_48, GpuGroup.ADA_24],
            (A100_PCIE, A100_SXM, A40, A6000, L4, RTX_4090),
        ),
        # the seed's type fallback
        (
            [GpuType.NVIDIA_A100_80GB_PCIe, GpuType.NVIDIA_A100_SXM4_80GB, GpuType.NVIDIA_A40],
            (A100_PCIE, A100_SXM, A40),
        ),
        # declared order is kept, never sorted
        ([GpuType.NVIDIA_A40, GpuType.NVIDIA_H200], (A40, H200)),
        ([GpuType.NVIDIA_H200, GpuType.NVIDIA_A40], (H200, A40)),
        ((GpuGroup.ADA_24, "H200"), (L4, RTX_4090, H200)),
        # duplicates dropped, first occurrence wins
        ([GpuType.NVIDIA_RTX_A6000, GpuGroup.AMPERE_48], (A6000, A40)),
        ([GpuGroup.AMPERE_80, GpuType.NVIDIA_A100_80GB_PCIe, "A100-SXM4-80GB"], (A100_PCIE, A100_SXM)),
        # nothing after ANY
        ([GpuType.NVIDIA_H200, GpuGroup.ANY, GpuType.NVIDIA_A40], (H200, ANY_GPU)),
        (["any", GpuType.NVIDIA_H200], (ANY_GPU,)),
    ],
)
def test_candidates_keep_the_declared_order(gpu: object, expected: tuple[object, ...]) -> None:
    assert candidates(gpu) == expected  # type: ignore[arg-type]


def test_candidates_of_an_empty_list_is_an_error() -> None:
    with pytest.raises(InvalidEndpointError, match=r"gpu=\[\].*GpuGroup\.ANY"):
        candidates([])


@pytest.mark.parametrize("gpu", [42, None, [GpuType.NVIDIA_H200, 3.5], [[GpuType.NVIDIA_H200]]])
def test_candidates_of_a_wrong_type_names_the_accepted_types(gpu: object) -> None:
    with pytest.raises(InvalidEndpointError, match="GpuType, a GpuGroup") as info:
        candidates(gpu)  # type: ignore[arg-type]
    assert not isinstance(info.value, UnknownGPUError)


def test_candidates_of_an_unknown_name_suggests() -> None:
    with pytest.raises(UnknownGPUError, match="H200"):
        candidates(["H20"])
