"""Every example in examples/ runs as a script, on simulated GPUs, and prints what its docstring promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: per example: the simulated fleet it runs on, and lines (or line starts) its output must contain
EXPECTED: dict[str, tuple[str, list[str]]] = {
    "quickstart.py": (
        "NVIDIA_A100_80GB_PCIe:2",
        [
            "GPUs are simulated: FLASHPOINT_SIMULATED_GPUS=NVIDIA_A100_80GB_PCIe:2",
            "result: {'echo': 'HELLO', 'gpu': 'NVIDIA A100 80GB PCIe'",
            "final status: COMPLETED",
            "output: {'echo': 'A RED FOX', 'gpu': 'NVIDIA A100 80GB PCIe'",
            "ran on: NVIDIA A100 80GB PCIe (simulated), device [",
            "endpoint quickstart: ",
        ],
    ),
    "in_queue.py": (
        "NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2",
        [
            "status: IN_QUEUE",
            "(IN_QUEUE): can never run on this fleet",
            "  position 1 of 1 in the queue of b200-only",
            "  - NVIDIA B200: not_in_fleet (no node has NVIDIA B200)",
            "cancelled: CANCELLED",
            "the fallback ran on: NVIDIA H200",
        ],
    ),
    "class_endpoint.py": (
        "NVIDIA L40S:1",
        [
            "hi, ada (call 1 on NVIDIA L40S)",
            "hi, grace (call 2 on NVIDIA L40S)",
            "HI, LINUS (CALL 3 ON NVIDIA L40S)",
        ],
    ),
    "pipeline.py": (
        "NVIDIA_A100_80GB_PCIe:1",
        [
            "words: ['a', 'banana', 'and', 'an', 'apple']",
            "vectors: [[1, 1], [6, 3], [3, 1], [2, 1], [5, 1]]",
            "embedded on: NVIDIA A100 80GB PCIe",
        ],
    ),
}


def test_every_example_is_covered() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str, tmp_path: Path) -> None:
    gpus, expected = EXPECTED[name]
    env = {
        **os.environ,
        "FLASHPOINT_SIMULATED_GPUS": gpus,
        "FLASHPOINT_STATE_DIR": str(tmp_path / "state"),
        "PYTHONUNBUFFERED": "1",
    }

    # Run from tmp_path, as a user would run a copied script: nothing may depend on the repository's cwd.
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    for text in expected:
        assert text in result.stdout, f"{text!r} missing from:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
