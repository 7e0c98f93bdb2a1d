"""The dashboard's cold-start column (decision 0118): a worker's phases as text, in the order the plane sends them,
numbers only (anything else a server sends is left out)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from flashpoint.api.dashboard import ASSETS
from tests.api.test_dashboard import package_text


def test_a_worker_s_phases_read_as_text(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    for name in ASSETS:  # fleet.js imports its siblings
        if name.endswith(".js"):
            (tmp_path / name).write_text(package_text(name))
    (tmp_path / "check.mjs").write_text(
        "globalThis.sessionStorage = { getItem: () => null };\n"
        'const { phasesText } = await import("./fleet.js");\n'
        "console.log(JSON.stringify([\n"
        "  phasesText({ process: 0.42, imports: 1.001, init: 35.2, first_job: 0.001 }),\n"
        '  phasesText(null), phasesText({ init: NaN, imports: "<b>1</b>" }),\n'
        "]));\n"
    )

    done = subprocess.run([node, "check.mjs"], cwd=tmp_path, capture_output=True, text=True, timeout=30)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["0.4 s process · 1.0 s imports · 35 s init · 0.0 s to first job", "", ""]
