"""``hosting.projectfiles``: a project's file rules stand apart from the loader, so packing a folder (``flashpoint
deploy``) imports no endpoint code, no discovery and no ``runpod_flash`` alias; the loader re-exports them as they
were. The rules themselves are tested through ``hosting.project`` (tests/hosting/test_project.py) and the packer
(tests/hosting/test_artifacts.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from flashpoint.hosting import project, projectfiles


def test_the_loader_re_exports_the_same_rules() -> None:
    for name in projectfiles.__all__:
        assert getattr(project, name) is getattr(projectfiles, name)


def test_packing_a_folder_loads_neither_the_discovery_nor_the_alias(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("raise SystemExit('a packed file is never imported')\n")
    script = (
        "import json, sys\n"
        "from flashpoint.hosting.artifacts import pack\n"
        f"assert pack(__import__('pathlib').Path({str(tmp_path)!r})).files == 1\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert not loaded & {"flashpoint.hosting.discovery", "flashpoint.hosting.project", "flashpoint.flash.alias", "app"}
