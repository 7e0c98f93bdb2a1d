"""The GPU catalog: the seed's GpuType and GpuGroup, the models behind them, and name parsing."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Final, TypeAlias, final

from flashpoint.errors import InvalidEndpointError, UnknownGPUError

__all__ = [
    "ANY_GPU",
    "MODELS",
    "AnyGPU",
    "Candidate",
    "GPUModel",
    "GpuGroup",
    "GpuSelector",
    "GpuType",
    "candidates",
    "describe",
    "gpu_model_label",
    "identify",
    "identify_label",
    "model_of",
    "parse_gpu",
    "pool_models",
]


class GpuType(str, Enum):
    """A specific GPU model, exactly the seed's ``GpuType`` members in the seed's order.

    The value is the model's canonical NVML name, the string ``nvidia-smi`` prints. For the Ada cards the
    seed's "GPU Model" column says ``NVIDIA RTX 6000 Ada`` but the member is ``..._ADA_GENERATION`` and the
    driver reports ``NVIDIA RTX 6000 Ada Generation``; the value follows the driver (as Runpod's own ids do),
    and the seed's spelling is kept as an alias in ``GPUModel.nvml_names``.
    """

    #: any available GPU
    ANY = "any"
    NVIDIA_RTX_A4000 = "NVIDIA RTX A4000"
    NVIDIA_RTX_A4500 = "NVIDIA RTX A4500"
    NVIDIA_RTX_4000_ADA_GENERATION = "NVIDIA RTX 4000 Ada Generation"
    NVIDIA_RTX_2000_ADA_GENERATION = "NVIDIA RTX 2000 Ada Generation"
    NVIDIA_RTX_A5000 = "NVIDIA RTX A5000"
    NVIDIA_L4 = "NVIDIA L4"
    NVIDIA_GEFORCE_RTX_3090 = "NVIDIA GeForce RTX 3090"
    NVIDIA_GEFORCE_RTX_4090 = "NVIDIA GeForce RTX 4090"
    NVIDIA_GEFORCE_RTX_5090 = "NVIDIA GeForce RTX 5090"
    NVIDIA_A40 = "NVIDIA A40"
    NVIDIA_RTX_A6000 = "NVIDIA RTX A6000"
    NVIDIA_RTX_6000_ADA_GENERATION = "NVIDIA RTX 6000 Ada Generation"
    NVIDIA_A100_80GB_PCIe = "NVIDIA A100 80GB PCIe"
    NVIDIA_A100_SXM4_80GB = "NVIDIA A100-SXM4-80GB"
    NVIDIA_H100_80GB_HBM3 = "NVIDIA H100 80GB HBM3"
    NVIDIA_RTX_PRO_6000_BLACKWELL_SERVER_EDITION = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    NVIDIA_RTX_PRO_6000_BLACKWELL_WORKSTATION_EDITION = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    NVIDIA_RTX_PRO_6000_BLACKWELL_MAX_Q_WORKSTATION_EDITION = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    NVIDIA_H200 = "NVIDIA H200"
    NVIDIA_B200 = "NVIDIA B200"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)

    @classmethod
    def all(cls) -> list[GpuType]:
        """Every GPU model, ``ANY`` excluded, as Flash's ``GpuType.all()``."""
        return [g for g in cls if g is not cls.ANY]

    @classmethod
    def is_gpu_type(cls, gpu_type: str) -> bool:
        """Whether a string is a GPU model's value (``"any"`` is not one), as in Flash."""
        return gpu_type in {g.value for g in cls.all()}


class GpuGroup(str, Enum):
    """A pool of similar GPUs, exactly the seed's ``GpuGroup`` members in the seed's order."""

    #: any available GPU
    ANY = "any"
    #: RTX A4000, RTX 4000 Ada, RTX 2000 Ada (16 GB)
    AMPERE_16 = "AMPERE_16"
    #: RTX A4500, RTX A5000, RTX 3090 (20-24 GB)
    AMPERE_24 = "AMPERE_24"
    #: L4, RTX 4090 (24 GB)
    ADA_24 = "ADA_24"
    #: RTX 5090 (32 GB)
    ADA_32_PRO = "ADA_32_PRO"
    #: A40, RTX A6000 (48 GB)
    AMPERE_48 = "AMPERE_48"
    #: L40S, L40, RTX 6000 Ada (48 GB)
    ADA_48_PRO = "ADA_48_PRO"
    #: A100 80GB PCIe, A100-SXM4-80GB (80 GB)
    AMPERE_80 = "AMPERE_80"
    #: H100 80GB HBM3 (80 GB)
    ADA_80_PRO = "ADA_80_PRO"
    #: RTX PRO 6000 Blackwell Server, Workstation, Max-Q (96 GB)
    BLACKWELL_96 = "BLACKWELL_96"
    #: H200 (141 GB)
    HOPPER_141 = "HOPPER_141"
    #: B200 (180 GB)
    BLACKWELL_180 = "BLACKWELL_180"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)

    @classmethod
    def all(cls) -> list[GpuGroup]:
        """Every pool, ``ANY`` excluded, each once (Flash's lists ``AMPERE_48`` twice)."""
        return [g for g in cls if g is not cls.ANY]

    @classmethod
    def to_gpu_ids_str(cls, gpu_types: Sequence[GpuType | GpuGroup]) -> str:
        """Runpod's ``gpuIds`` string for a selection, as Flash builds it: pools, and ``-model`` for each model of a
        pool reached only through explicit models that was not chosen. Pools are the seed's."""
        pools: set[str] = set()
        from_groups: set[GpuGroup] = set()
        explicit: set[str] = set()
        for item in gpu_types:
            if isinstance(item, GpuGroup):
                from_groups.add(item)
                pools.add(item.value)
                continue
            explicit.add(item.value)
            pool = next((group for group, names in _POOLS.items() if item.value in names), None)
            if pool is not None:
                pools.add(pool.value)
        tokens = set(pools)
        if explicit:
            for pool_id in pools:
                group = cls(pool_id)
                if group in from_groups:
                    continue
                tokens.update(f"-{name}" for name in _POOLS.get(group, ()) if name not in explicit)
        return cls.normalize_gpu_ids_str(",".join(tokens))

    @classmethod
    def normalize_gpu_ids_str(cls, gpu_ids_str: str) -> str:
        """A ``gpuIds`` string in canonical order (pools and models, then negations), as in Flash."""
        tokens = {token.strip() for token in gpu_ids_str.split(",") if token.strip()}
        ordered = sorted(tokens, key=lambda token: (token.startswith("-"), token.lstrip("-").lower()))
        return ",".join(ordered)

    @classmethod
    def from_gpu_ids_str(cls, gpu_ids_str: str) -> list[GpuGroup | GpuType]:
        """The selection a ``gpuIds`` string means, as in Flash: pools, a negated pool as its remaining models,
        then explicit models; unknown pool ids are ignored. Pools are the seed's."""
        pool_ids: list[str] = []
        models: list[GpuType] = []
        negated: set[str] = set()
        for token in gpu_ids_str.split(","):
            if token.startswith("-") and GpuType.is_gpu_type(token[1:]):
                negated.add(token[1:])
            elif GpuType.is_gpu_type(token):
                models.append(GpuType(token))
            else:
                pool_ids.append(token)
        out: list[GpuGroup | GpuType] = []
        for pool_id in pool_ids:
            try:
                group = cls(pool_id)
            except ValueError:
                continue
            names = _POOLS.get(group, ())
            if any(name in negated for name in names):
                out.extend(GpuType(name) for name in names if name not in negated and GpuType.is_gpu_type(name))
            else:
                out.append(group)
        out.extend(models)
        return out


@dataclass(frozen=True, slots=True)
class GPUModel:
    """One GPU model of the catalog, as NVML names it."""

    #: canonical NVML name, e.g. "NVIDIA H200"
    name: str
    #: the seed's VRAM figure (marketing GB)
    vram_gb: int
    #: the seed's architecture column: "Ampere", "Ada Lovelace", "Hopper", "Blackwell"
    architecture: str
    #: the GpuType member, or None for models the seed pools but does not list (L40, L40S)
    member: GpuType | None
    #: the seed's GpuGroup that holds this model
    pool: GpuGroup | None
    #: other spellings of the same model (the seed's column where it differs, older drivers)
    nvml_names: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name


# (member or canonical name, VRAM GB, architecture, aliases), in the seed's GpuType table order.
_CATALOG: Final[tuple[tuple[GpuType | str, int, str, tuple[str, ...]], ...]] = (
    (GpuType.NVIDIA_RTX_A4000, 16, "Ampere", ()),
    (GpuType.NVIDIA_RTX_A4500, 20, "Ampere", ()),
    (GpuType.NVIDIA_RTX_4000_ADA_GENERATION, 16, "Ada Lovelace", ("NVIDIA RTX 4000 Ada",)),
    (GpuType.NVIDIA_RTX_2000_ADA_GENERATION, 16, "Ada Lovelace", ("NVIDIA RTX 2000 Ada",)),
    (GpuType.NVIDIA_RTX_A5000, 24, "Ampere", ()),
    (GpuType.NVIDIA_L4, 24, "Ada Lovelace", ()),
    (GpuType.NVIDIA_GEFORCE_RTX_3090, 24, "Ampere", ()),
    (GpuType.NVIDIA_GEFORCE_RTX_4090, 24, "Ada Lovelace", ()),
    (GpuType.NVIDIA_GEFORCE_RTX_5090, 32, "Blackwell", ()),
    (GpuType.NVIDIA_A40, 48, "Ampere", ()),
    (GpuType.NVIDIA_RTX_A6000, 48, "Ampere", ()),
    (GpuType.NVIDIA_RTX_6000_ADA_GENERATION, 48, "Ada Lovelace", ("NVIDIA RTX 6000 Ada",)),
    (GpuType.NVIDIA_A100_80GB_PCIe, 80, "Ampere", ()),
    (GpuType.NVIDIA_A100_SXM4_80GB, 80, "Ampere", ()),
    (GpuType.NVIDIA_H100_80GB_HBM3, 80, "Hopper", ()),
    (GpuType.NVIDIA_RTX_PRO_6000_BLACKWELL_SERVER_EDITION, 96, "Blackwell", ()),
    (GpuType.NVIDIA_RTX_PRO_6000_BLACKWELL_WORKSTATION_EDITION, 96, "Blackwell", ()),
    (GpuType.NVIDIA_RTX_PRO_6000_BLACKWELL_MAX_Q_WORKSTATION_EDITION, 96, "Blackwell", ()),
    (GpuType.NVIDIA_H200, 141, "Hopper", ()),
    (GpuType.NVIDIA_B200, 180, "Blackwell", ()),
    # In ADA_48_PRO but without a GpuType member; real hardware still reports them.
    ("NVIDIA L40S", 48, "Ada Lovelace", ()),
    ("NVIDIA L40", 48, "Ada Lovelace", ()),
)

# The seed's GpuGroup table, "GPUs Included" column, in its order. The seed wins over Runpod's code.
_POOLS: Final[dict[GpuGroup, tuple[str, ...]]] = {
    GpuGroup.AMPERE_16: (
        GpuType.NVIDIA_RTX_A4000.value,
        GpuType.NVIDIA_RTX_4000_ADA_GENERATION.value,
        GpuType.NVIDIA_RTX_2000_ADA_GENERATION.value,
    ),
    GpuGroup.AMPERE_24: (
        GpuType.NVIDIA_RTX_A4500.value,
        GpuType.NVIDIA_RTX_A5000.value,
        GpuType.NVIDIA_GEFORCE_RTX_3090.value,
    ),
    GpuGroup.ADA_24: (GpuType.NVIDIA_L4.value, GpuType.NVIDIA_GEFORCE_RTX_4090.value),
    GpuGroup.ADA_32_PRO: (GpuType.NVIDIA_GEFORCE_RTX_5090.value,),
    GpuGroup.AMPERE_48: (GpuType.NVIDIA_A40.value, GpuType.NVIDIA_RTX_A6000.value),
    GpuGroup.ADA_48_PRO: ("NVIDIA L40S", "NVIDIA L40", GpuType.NVIDIA_RTX_6000_ADA_GENERATION.value),
    GpuGroup.AMPERE_80: (GpuType.NVIDIA_A100_80GB_PCIe.value, GpuType.NVIDIA_A100_SXM4_80GB.value),
    GpuGroup.ADA_80_PRO: (GpuType.NVIDIA_H100_80GB_HBM3.value,),
    GpuGroup.BLACKWELL_96: (
        GpuType.NVIDIA_RTX_PRO_6000_BLACKWELL_SERVER_EDITION.value,
        GpuType.NVIDIA_RTX_PRO_6000_BLACKWELL_WORKSTATION_EDITION.value,
        GpuType.NVIDIA_RTX_PRO_6000_BLACKWELL_MAX_Q_WORKSTATION_EDITION.value,
    ),
    GpuGroup.HOPPER_141: (GpuType.NVIDIA_H200.value,),
    GpuGroup.BLACKWELL_180: (GpuType.NVIDIA_B200.value,),
}


def _build_models() -> tuple[GPUModel, ...]:
    pool_of = {name: group for group, names in _POOLS.items() for name in names}
    models = []
    for ident, vram_gb, architecture, aliases in _CATALOG:
        member = ident if isinstance(ident, GpuType) else None
        name = ident.value if isinstance(ident, GpuType) else ident
        models.append(GPUModel(name, vram_gb, architecture, member, pool_of.get(name), aliases))
    return tuple(models)


#: every model of the catalog: the seed's GpuType table order, then L40S and L40
MODELS: Final[tuple[GPUModel, ...]] = _build_models()

_BY_NAME: Final[dict[str, GPUModel]] = {m.name: m for m in MODELS}
_BY_MEMBER: Final[dict[GpuType, GPUModel]] = {m.member: m for m in MODELS if m.member is not None}
_POOL_MODELS: Final[dict[GpuGroup, tuple[GPUModel, ...]]] = {
    group: tuple(_BY_NAME[name] for name in names) for group, names in _POOLS.items()
}


@final
class AnyGPU:
    """The ``ANY`` candidate: matches every device, also ones the catalog does not recognise."""

    __slots__ = ()
    _instance: ClassVar[AnyGPU | None] = None

    def __new__(cls) -> AnyGPU:
        # A singleton, so `c is ANY_GPU` and equality agree, also after a pickle round trip.
        if AnyGPU._instance is None:
            AnyGPU._instance = object.__new__(cls)
        return AnyGPU._instance

    def __repr__(self) -> str:
        return "ANY"

    def __str__(self) -> str:
        return "ANY"

    def __reduce__(self) -> str:
        return "ANY_GPU"


#: the one AnyGPU instance
ANY_GPU: Final[AnyGPU] = AnyGPU()

#: one entry of an ordered candidate list
Candidate: TypeAlias = GPUModel | AnyGPU
#: what a user may write for ``gpu=``
GpuSelector: TypeAlias = GpuType | GpuGroup | GPUModel | str

_Parsed: TypeAlias = GpuType | GpuGroup | GPUModel

_HINT: Final = (
    "Write a GpuType name (NVIDIA_H200), a GpuGroup name (HOPPER_141), an NVML name ('NVIDIA H200'), "
    "a short name ('H200') or 'any'; `flashpoint gpus` lists the catalog."
)


def model_of(member: GpuType) -> GPUModel:
    """The model behind a GpuType member.

    Raises:
        ValueError: for ``GpuType.ANY``, which is no single model (use ``candidates``).
    """
    try:
        return _BY_MEMBER[member]
    except KeyError:
        raise ValueError(f"{member!r} is not a single GPU model; candidates() expands it to ANY_GPU") from None


def pool_models(group: GpuGroup) -> tuple[GPUModel, ...]:
    """The models of a pool, in the order the seed's GpuGroup table lists them; ``ANY`` gives ``MODELS``."""
    if group is GpuGroup.ANY:
        return MODELS
    return _POOL_MODELS[group]


# --- identify: NVML device names -------------------------------------------------------------------------


def _nvml_key(name: str) -> str:
    key = " ".join(name.split()).casefold()
    # Some drivers and tools drop the vendor prefix ("GeForce RTX 3090", "H200").
    return key if key.startswith("nvidia ") else f"nvidia {key}"


_BY_NVML: Final[dict[str, GPUModel]] = {_nvml_key(spelling): m for m in MODELS for spelling in (m.name, *m.nvml_names)}

#: a device reporting less than this share of the model's VRAM is a smaller sibling or a MIG slice
_MIN_MEMORY_SHARE: Final = 0.85


def identify(nvml_name: str, memory_mb: int | None = None) -> GPUModel | None:
    """The catalog model of a physical device, from the name NVML reports.

    The name is matched exactly, ignoring case, surrounding and repeated whitespace and a missing
    ``NVIDIA `` prefix. Similar but different cards are not confused: ``NVIDIA H200 NVL``,
    ``NVIDIA A100-SXM4-40GB`` and ``NVIDIA H100 PCIe`` give None.

    When ``memory_mb`` (MiB, as NVML reports total memory) is given and is below 85% of the model's VRAM,
    the device is not that model (a smaller variant under the same name, or a MIG slice) and None is
    returned. The seed's figures are marketing GB, and drivers reserve some memory, hence the margin.

    Returns:
        The model, or None when the device matches no model (``ANY`` can still use it).
    """
    model = _BY_NVML.get(_nvml_key(nvml_name))
    if model is None:
        return None
    if memory_mb is not None and memory_mb < model.vram_gb * 1024 * _MIN_MEMORY_SHARE:
        return None
    return model


def gpu_model_label(nvml_name: str) -> str:
    """The value of a Ray node's ``gpu-model`` label for a device NVML calls ``nvml_name``: spaces become hyphens.

    Ray labels follow Kubernetes' syntax (at most 63 of ``[A-Za-z0-9._-]``, alphanumeric at both ends), so any other
    character becomes a hyphen too. Example: ``gpu_model_label("NVIDIA A100 80GB PCIe") == "NVIDIA-A100-80GB-PCIe"``.
    """
    label = re.sub(r"[^A-Za-z0-9._-]+", "-", " ".join(nvml_name.split()))
    return label[:63].strip("-_.")


_BY_LABEL: Final[dict[str, GPUModel]] = {
    gpu_model_label(spelling).casefold(): m
    for m in MODELS
    for spelling in (m.name, *m.nvml_names, *(f"NVIDIA {s}" for s in m.nvml_names if not s.startswith("NVIDIA")))
}


def identify_label(label: str) -> GPUModel | None:
    """The catalog model a ``gpu-model`` node label names (the inverse of ``gpu_model_label``), or None.

    As with ``identify``, similar cards are not confused: ``NVIDIA-H200-NVL`` gives None, not the H200.
    """
    return _BY_LABEL.get(gpu_model_label(label).casefold())


# --- parse_gpu: names users type -------------------------------------------------------------------------


def _key(text: str) -> str:
    # Spaces, underscores and hyphens are interchangeable: NVIDIA_A100_SXM4_80GB == "NVIDIA A100-SXM4-80GB".
    return re.sub(r"[\s_\-]+", " ", text.casefold()).strip()


def _strip_vendor(spelling: str) -> list[str]:
    """``spelling`` and its forms without "NVIDIA " / "GeForce " prefixes, e.g. "RTX 4090"."""
    forms = [spelling]
    rest = spelling
    for prefix in ("nvidia ", "geforce "):
        if _key(rest).startswith(prefix):
            rest = rest.strip()[len(prefix) :].strip()
            forms.append(rest)
    if _key(spelling).startswith("nvidia geforce "):
        forms.append("NVIDIA " + rest)  # "NVIDIA RTX 4090"
    return forms


def _build_names() -> tuple[dict[str, _Parsed], dict[str, str]]:
    """Normalised name -> target, and normalised name -> the spelling shown in suggestions."""
    targets: dict[str, _Parsed] = {}
    shown: dict[str, str] = {}

    def add(spelling: str, target: _Parsed) -> None:
        key = _key(spelling)
        previous = targets.setdefault(key, target)
        if previous != target:  # pragma: no cover - guards the tables above
            raise AssertionError(f"GPU name {spelling!r} is claimed by {previous!r} and {target!r}")
        shown.setdefault(key, spelling)

    for m in MODELS:
        target: _Parsed = m.member if m.member is not None else m
        spellings = [m.name, *m.nvml_names] + ([m.member.name] if m.member is not None else [])
        for spelling in spellings:
            for form in _strip_vendor(spelling):
                add(form, target)
    for group in GpuGroup:
        add(group.name, group)
    return targets, shown


_NAMES, _SHOWN = _build_names()


def _label(target: _Parsed) -> str:
    if isinstance(target, GpuGroup):
        return f"GpuGroup.{target.name}"
    if isinstance(target, GpuType):
        return f"{target.value} (GpuType.{target.name})"
    return target.name


def _ambiguous(text: str, matches: list[_Parsed]) -> UnknownGPUError:
    listed = ", ".join(_label(t) for t in matches[:8])
    if len(matches) > 8:
        listed += f", and {len(matches) - 8} more"
    pools: list[GpuGroup] = []
    for t in matches:
        model = model_of(t) if isinstance(t, GpuType) else t if isinstance(t, GPUModel) else None
        if model is not None and model.pool is not None and model.pool not in pools:
            pools.append(model.pool)
    advice = "Pick one"
    if len(pools) == 1:
        advice += f", or use the pool GpuGroup.{pools[0].name} to accept any of them"
    elif pools:
        advice += ", or use pools: " + ", ".join(f"GpuGroup.{p.name}" for p in pools)
    return UnknownGPUError(
        f"GPU name {text!r} is ambiguous: it matches {listed}. {advice}.",
        name=text,
        suggestions=[t.name for t in matches],
    )


def parse_gpu(text: str) -> GpuType | GpuGroup | GPUModel:
    """Parse a GPU name a user typed (CLI, HTTP, config, ``gpu="..."``).

    Accepted, ignoring case, with spaces, underscores and hyphens interchangeable: GpuType member names
    (``"NVIDIA_H200"``), GpuGroup member names (``"ampere_80"``), NVML names (``"NVIDIA A100-SXM4-80GB"``),
    names without the ``NVIDIA ``/``GeForce `` prefix (``"H200"``, ``"RTX 4090"``, ``"L40S"``), ``"any"``,
    and a leading ``GpuType.``/``GpuGroup.``. Some of a name's words, starting with its first, also work
    when they pick out exactly one target (``"H100"``, ``"A100 PCIe"``, ``"RTX PRO 6000 Blackwell Max-Q"``).

    Returns:
        The GpuType member when the model has one, the GPUModel for L40 and L40S, the GpuGroup for pools,
        ``GpuGroup.ANY`` for "any".

    Raises:
        UnknownGPUError: the name is empty, unknown (with close matches in ``suggestions``) or ambiguous
            (``"A100"``: the matches are in ``suggestions``).
    """
    if isinstance(text, (GpuType, GpuGroup)):
        return text
    if not isinstance(text, str):
        raise UnknownGPUError(
            f"GPU name must be a string, got {type(text).__name__} {text!r}. {_HINT}", name=repr(text)
        )
    query = re.sub(r"^\s*gpu(type|group)\s*\.", "", text, flags=re.IGNORECASE)
    key = _key(query)
    if not key:
        raise UnknownGPUError(f"GPU name is empty. {_HINT}", name=text)
    if key == "any":
        return GpuGroup.ANY
    exact = _NAMES.get(key)
    if exact is not None:
        return exact
    # Some of a name's words, starting with its first, count when they pick exactly one target: "H100" and
    # "A100 PCIe" do; "A100" and "RTX 6000" are ambiguous; "H100 PCIe" (a word no catalog H100 has) is a miss.
    words = key.split()
    matches: list[_Parsed] = []
    for name, target in _NAMES.items():
        name_words = name.split()
        if name_words[0] == words[0] and set(words) <= set(name_words) and target not in matches:
            matches.append(target)
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise _ambiguous(text, matches)
    suggestions: list[str] = []
    seen: list[_Parsed] = []
    for close in difflib.get_close_matches(key, list(_NAMES), n=10, cutoff=0.6):
        if _NAMES[close] not in seen:
            seen.append(_NAMES[close])
            suggestions.append(_SHOWN[close])
    suggestions = suggestions[:3]
    did_you_mean = f" Did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else ""
    raise UnknownGPUError(f"Unknown GPU {text!r}.{did_you_mean} {_HINT}", name=text, suggestions=suggestions)


# --- candidates: the ordered fallback list -----------------------------------------------------------------

_ACCEPTED: Final = (
    "give a GpuType, a GpuGroup, a GPU name string or a list of them, "
    "e.g. gpu=GpuGroup.AMPERE_80 or gpu=[GpuType.NVIDIA_H200, GpuGroup.ANY]"
)


def _expand(gpu: object) -> tuple[Candidate, ...]:
    if isinstance(gpu, AnyGPU) or gpu is GpuType.ANY or gpu is GpuGroup.ANY:
        return (ANY_GPU,)
    if isinstance(gpu, GpuType):
        return (model_of(gpu),)
    if isinstance(gpu, GpuGroup):
        return pool_models(gpu)
    if isinstance(gpu, GPUModel):
        return (gpu,)
    if isinstance(gpu, str):
        return _expand(parse_gpu(gpu))
    raise InvalidEndpointError(f"gpu={gpu!r} ({type(gpu).__name__}) is not a GPU selector: {_ACCEPTED}")


def candidates(gpu: GpuSelector | Sequence[GpuSelector]) -> tuple[Candidate, ...]:
    """Expand ``gpu=`` into the ordered candidate list that placement walks.

    A GpuType is its model; a GpuGroup its pool's models in the seed's order; ``ANY`` (either enum, or
    ``"any"``) is ``ANY_GPU``; strings go through ``parse_gpu``. A list is concatenated in the order
    written, duplicates dropped (the first occurrence wins) and nothing after ``ANY_GPU`` kept, since
    ``ANY`` already matches every device. The declared order is the policy: it is never sorted.

    Example:
        ``candidates([GpuType.NVIDIA_A100_80GB_PCIe, GpuGroup.AMPERE_48, GpuGroup.ANY])`` is
        (A100 80GB PCIe, A40, RTX A6000, ANY_GPU).

    Raises:
        InvalidEndpointError: an empty list or a value of the wrong type.
        UnknownGPUError: a string that names no GPU, or several.
    """
    if isinstance(gpu, (str, GPUModel, AnyGPU)):
        items: Sequence[object] = (gpu,)
    elif isinstance(gpu, Sequence):
        items = gpu
        if not items:
            raise InvalidEndpointError(
                "gpu=[] lists no GPU: give at least one GpuType or GpuGroup, e.g. gpu=GpuGroup.ANY"
            )
    else:
        items = (gpu,)
    result: list[Candidate] = []
    for item in items:
        if isinstance(item, Sequence) and not isinstance(item, str):
            raise InvalidEndpointError(f"gpu=... contains the nested list {item!r}: {_ACCEPTED}")
        for candidate in _expand(item):
            if candidate not in result:
                result.append(candidate)
            if candidate is ANY_GPU:
                return tuple(result)
    return tuple(result)


def describe(c: Candidate) -> str:
    """A candidate for people: the model name, or ``"ANY"``."""
    return "ANY" if isinstance(c, AnyGPU) else c.name
