"""Import boundaries: ``import flashpoint`` and declaring endpoints stay free of the HTTP stack, the CLI and Ray.

Checked in a fresh interpreter, since this test process has imported plenty already.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

#: third-party packages only the server, the CLI, the Ray backend or a remote call may load
HEAVY = ("fastapi", "starlette", "pydantic", "typer", "uvicorn", "ray", "httpx", "cloudpickle", "rich")
#: flashpoint's own layers that the SDK reaches only on the first call (the embedded server or the client), or never
LAYERS = (
    "flashpoint.api",
    "flashpoint.hosting.server",
    "flashpoint.hosting.embedded",
    "flashpoint.hosting.plane",
    "flashpoint.sdk.client",
    "flashpoint.cli",
    "flashpoint.backends",
)

_REPORT = "import json, sys; print(json.dumps(sorted(sys.modules)))"


def _modules_after(code: str) -> list[str]:
    script = textwrap.dedent(code) + "\n" + _REPORT
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    modules: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return modules


def _loaded(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.fixture(scope="module")
def after_import() -> list[str]:
    return _modules_after("import flashpoint")


@pytest.fixture(scope="module")
def after_decorating() -> list[str]:
    return _modules_after(
        """
        from flashpoint import Endpoint, GpuGroup, GpuType

        @Endpoint(name="inference", gpu=[GpuType.NVIDIA_H200, GpuGroup.AMPERE_80], workers=(0, 2))
        async def infer(data: dict) -> dict:
            return data

        @Endpoint(name="model", gpu="HOPPER_141", gpu_count=2)
        class Model:
            def __init__(self) -> None: ...
            async def predict(self, data: dict) -> dict:
                return data

        assert infer.spec.name == "inference" and Model.spec.kind == "class"
        """
    )


def test_the_check_sees_what_it_looks_for() -> None:
    # Guard against a check that can never fail: a heavy package the script does import is seen.
    assert "cloudpickle" in _loaded(_modules_after("import flashpoint, cloudpickle"), HEAVY)


@pytest.mark.parametrize("package", HEAVY)
def test_import_flashpoint_loads_no_heavy_dependency(after_import: list[str], package: str) -> None:
    assert "flashpoint" in after_import
    assert _loaded(after_import, (package,)) == []


@pytest.mark.parametrize("package", HEAVY)
def test_declaring_endpoints_loads_no_heavy_dependency(after_decorating: list[str], package: str) -> None:
    assert "flashpoint.sdk.endpoint" in after_decorating
    assert _loaded(after_decorating, (package,)) == []


def test_import_and_declaring_load_no_server_layer(after_import: list[str], after_decorating: list[str]) -> None:
    assert _loaded(after_import, LAYERS) == []
    assert _loaded(after_decorating, LAYERS) == []


def test_the_ray_backend_module_loads_ray_only_when_it_talks_to_a_cluster() -> None:
    modules = _modules_after("import flashpoint.backends.ray, flashpoint.hosting.server, flashpoint.hosting.embedded")
    assert _loaded(modules, ("ray",)) == []
