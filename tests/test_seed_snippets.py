"""Every code snippet of the seed runs as written once ``runpod_flash`` is replaced by ``flashpoint`` (DESIGN.md §1).

The seed is plain text without code fences, so the snippets are found by their shape: a block starts at a line
``from runpod_flash import ...`` or ``@Endpoint(`` and runs through the decorated functions until prose resumes; a
one-line snippet is a line starting ``gpu=`` (with any comment lines right after it). The number found is checked
against a count made by hand, so a parser bug cannot pass silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from flashpoint import Endpoint
from flashpoint.gpus import ANY_GPU, Candidate, GpuType, model_of
from flashpoint.sdk.endpoint import EndpointFunction
from tests.conftest import seed_path

#: what a snippet without its own import (the multi-GPU one, the one-liners) is run after
PRELUDE = "from flashpoint import Endpoint, GpuGroup, GpuType\n"

PCIE = model_of(GpuType.NVIDIA_A100_80GB_PCIe)
SXM = model_of(GpuType.NVIDIA_A100_SXM4_80GB)
A40 = model_of(GpuType.NVIDIA_A40)
A6000 = model_of(GpuType.NVIDIA_RTX_A6000)
L4 = model_of(GpuType.NVIDIA_L4)
RTX4090 = model_of(GpuType.NVIDIA_GEFORCE_RTX_4090)
AMPERE_80 = (PCIE, SXM)
THREE_POOLS = (PCIE, SXM, A40, A6000, L4, RTX4090)


# --- the extractor -----------------------------------------------------------------------------------------------

_BLOCK_START = re.compile(r"^(from runpod_flash import |@Endpoint\()")
_ONE_LINER = re.compile(r"^gpu=")
#: a line at column 0 that still belongs to a code block (anything else at column 0 is prose)
_CODE_AT_COLUMN_0 = re.compile(r"^(#|@|async def |def |class |from |import |\)|\]|gpu=)")


@dataclass(frozen=True)
class Snippet:
    #: 1-based line of the seed where the snippet starts
    line: int
    #: "block" (imports and/or decorated functions) or "line" (a lone `gpu=...`)
    kind: str
    #: the snippet as the seed writes it
    text: str

    @property
    def code(self) -> str:
        """The snippet with runpod_flash replaced, prefixed with the prelude when it has no import of its own."""
        code = self.text.replace("runpod_flash", "flashpoint")
        return code if code.startswith("from flashpoint import") else PRELUDE + code


def extract_snippets(text: str) -> list[Snippet]:
    lines = text.splitlines()
    snippets: list[Snippet] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _BLOCK_START.match(line):
            end = i + 1
            while end < len(lines) and (
                not lines[end].strip() or lines[end][0].isspace() or _CODE_AT_COLUMN_0.match(lines[end])
            ):
                end += 1
            body = lines[i:end]
            while body and not body[-1].strip():
                body.pop()
            snippets.append(Snippet(i + 1, "block", "\n".join(body) + "\n"))
            i = end
        elif _ONE_LINER.match(line):
            end = i + 1
            while end < len(lines) and lines[end].startswith("#"):
                end += 1
            snippets.append(Snippet(i + 1, "line", "\n".join(lines[i:end]) + "\n"))
            i = end
        else:
            i += 1
    return snippets


def _snippets() -> list[Snippet]:
    return extract_snippets(seed_path().read_text(encoding="utf-8"))


def _run(snippet: Snippet) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"seed_snippet_line_{snippet.line}"}
    exec(compile(snippet.code, f"<seed line {snippet.line}>", "exec"), namespace)
    return namespace


# --- counted by hand -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    #: how the snippet starts
    first_line: str
    #: for blocks: decorated function name -> (endpoint name, candidates, gpu_count, (workers min, max))
    endpoints: dict[str, tuple[str, tuple[Candidate, ...], int, tuple[int, int]]]
    #: for one-liners: the candidates `gpu` expands to
    gpu: tuple[Candidate, ...] | None = None


EXPECTED = [
    # Using GPU pools
    Expected(
        "from runpod_flash import Endpoint, GpuGroup",
        {
            "infer": ("inference", AMPERE_80, 1, (0, 1)),
            "flexible_infer": ("flexible", THREE_POOLS, 1, (0, 1)),
            "dev_infer": ("development", (ANY_GPU,), 1, (0, 1)),
        },
    ),
    # Using specific GPU types
    Expected(
        "from runpod_flash import Endpoint, GpuType",
        {
            "infer": ("inference", (PCIE,), 1, (0, 1)),
            "flexible_infer": ("flexible", (PCIE, SXM, A40), 1, (0, 1)),
        },
    ),
    # Advanced fallback strategies: the declared order survives, ANY last
    Expected(
        "from runpod_flash import Endpoint, GpuGroup, GpuType",
        {"infer": ("hybrid-selection", (PCIE, A40, A6000, ANY_GPU), 1, (0, 1))},
    ),
    # GPU selection behavior
    Expected("gpu=GpuGroup.AMPERE_80  # Only A100 80GB", {}, AMPERE_80),
    Expected("gpu=[GpuGroup.AMPERE_80, GpuGroup.AMPERE_48, GpuGroup.ADA_24]", {}, THREE_POOLS),
    Expected("gpu=GpuGroup.ANY  # Fastest provisioning, unpredictable GPU type", {}, (ANY_GPU,)),
    # Multi-GPU workers: `workers=2` means (0, 2)
    Expected("@Endpoint(", {"train": ("multi-gpu-training", AMPERE_80, 4, (0, 2))}),
    # Handling unavailability
    Expected("gpu=[GpuGroup.AMPERE_80, GpuGroup.AMPERE_48, GpuGroup.ADA_24]", {}, THREE_POOLS),
    Expected("gpu=GpuGroup.ANY", {}, (ANY_GPU,)),
]


def test_every_snippet_is_found() -> None:
    snippets = _snippets()

    assert [s.text.splitlines()[0] for s in snippets] == [e.first_line for e in EXPECTED]
    assert [s.kind for s in snippets] == ["block"] * 3 + ["line"] * 3 + ["block"] + ["line"] * 2
    # a block ends with the body of its last decorated function, never with prose
    for snippet in snippets:
        if snippet.kind == "block":
            assert snippet.text.rstrip("\n").endswith("\n    ..."), snippet.text
    # the "# Tries: ..." comment under the fallback one-liner belongs to it
    assert snippets[4].text.splitlines()[1].startswith("# Tries: A100")


def test_extractor_stops_at_prose() -> None:
    text = "Intro\n\nfrom runpod_flash import Endpoint\n\n@Endpoint(name='a')\nasync def f():\n    ...\n\nProse.\n"
    (snippet,) = extract_snippets(text)
    assert snippet.text == "from runpod_flash import Endpoint\n\n@Endpoint(name='a')\nasync def f():\n    ...\n"
    assert snippet.line == 3


@pytest.mark.parametrize("index", range(len(EXPECTED)), ids=[f"snippet-{i}" for i in range(len(EXPECTED))])
def test_snippet_runs_as_written(index: int) -> None:
    snippets = _snippets()
    assert len(snippets) == len(EXPECTED)
    snippet, expected = snippets[index], EXPECTED[index]
    assert "runpod_flash" not in snippet.code

    namespace = _run(snippet)

    if snippet.kind == "line":
        assert expected.gpu is not None
        assert Endpoint(name="seed-one-liner", gpu=namespace["gpu"]).spec.candidates == expected.gpu
        return
    decorated = re.findall(r"^async def (\w+)", snippet.text, flags=re.MULTILINE)
    assert decorated == list(expected.endpoints)
    assert snippet.text.count("@Endpoint(") == len(decorated)
    for function, (name, cands, gpu_count, workers) in expected.endpoints.items():
        handle = namespace[function]
        assert isinstance(handle, EndpointFunction), (function, handle)
        assert handle.__name__ == function
        spec = handle.spec
        assert spec.name == name
        assert spec.candidates == cands
        assert spec.gpu_count == gpu_count
        assert (spec.workers_min, spec.workers_max) == workers
        assert spec.kind == "function"
