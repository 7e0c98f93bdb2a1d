"""``runpod_flash`` as flashpoint (flash.alias): scoped install and restore, the stand-in's surface, and its three
users: discovery, the worker loading code (import and unpickle), ``flashpoint run``. Real processes and Runpod Flash's
own client: tests/e2e/test_flash_client.py."""

from __future__ import annotations

import importlib
import importlib.util
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import cloudpickle
import pytest
from typer.testing import CliRunner

import flashpoint
from flashpoint.cli import app
from flashpoint.flash import alias as flashalias
from flashpoint.hosting.discovery import load_endpoints
from flashpoint.sdk.endpoint import EndpointClass, EndpointFunction
from flashpoint.worker.handler import load_target, load_targets

pytestmark = pytest.mark.usefixtures("restore_imports")

FLASH_APP = """
import runpod_flash as rf
from runpod_flash import CpuInstanceType, Endpoint, GpuGroup

@Endpoint(name="alias-{tag}-infer", gpu=GpuGroup.ANY, workers=(0, 2))
async def infer(prompt: str) -> dict:
    return {{"prompt": prompt, "group": rf.GpuGroup.ANY.value}}

@Endpoint(name="alias-{tag}-model", cpu=CpuInstanceType.CPU3C_1_2)
class Model:
    def predict(self, x: int) -> int:
        return 2 * x
"""


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


def flash_modules() -> dict[str, ModuleType]:
    return {name: module for name, module in sys.modules.items() if name.split(".")[0] == "runpod_flash"}


@pytest.fixture
def fake_flash() -> Iterator[ModuleType]:
    """A "real" runpod_flash already imported (with a submodule), as where runpod-flash is installed; removed after."""
    package, core = ModuleType("runpod_flash"), ModuleType("runpod_flash.core")
    package.Endpoint = "the real one"  # type: ignore[attr-defined]
    package.__path__ = []
    sys.modules.update({"runpod_flash": package, "runpod_flash.core": core})
    yield package
    for name in flash_modules():
        del sys.modules[name]


# --------------------------------------------------------------------------------------------------------------------
# The stand-in and its scope


def test_the_alias_is_flashpoint_inside_the_scope_and_gone_after() -> None:
    assert importlib.util.find_spec("runpod_flash") is None, "runpod-flash is installed here: these tests assume not"
    finders = list(sys.meta_path)

    with flashalias.installed() as alias:
        import runpod_flash
        from runpod_flash import Endpoint, GpuGroup, remote

        assert runpod_flash is alias and runpod_flash.__name__ == "runpod_flash"
        assert (Endpoint, GpuGroup, remote) == (flashpoint.Endpoint, flashpoint.GpuGroup, flashpoint.remote)
        assert runpod_flash.__version__ == flashpoint.__version__  # a script that prints it learns what runs it

    assert flash_modules() == {} and sys.meta_path == finders
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("runpod_flash")


def test_the_alias_has_flashs_public_names_only_and_they_are_flashpoints_objects() -> None:
    alias = flashalias.alias_module()
    assert set(alias.__all__) <= set(flashalias.FLASH_NAMES)
    assert [name for name in flashalias.FLASH_NAMES if hasattr(flashpoint, name)] == alias.__all__
    assert all(getattr(alias, name) is getattr(flashpoint, name) for name in alias.__all__)
    assert not hasattr(alias, "EndpointClient")  # flashpoint's own names stay flashpoint's
    with flashalias.installed():
        namespace: dict[str, Any] = {}
        exec("from runpod_flash import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(alias.__all__)


def test_flashs_internal_modules_are_refused_with_the_reason() -> None:
    with flashalias.installed(), pytest.raises(ModuleNotFoundError, match="provides its public names only") as caught:
        importlib.import_module("runpod_flash.core.resources")
    assert caught.value.name == "runpod_flash.core"


def test_a_real_runpod_flash_is_shadowed_only_inside_the_scope(fake_flash: ModuleType) -> None:
    before = flash_modules()

    with flashalias.installed():
        import runpod_flash

        assert runpod_flash is flashalias.alias_module()
        assert runpod_flash.Endpoint is flashpoint.Endpoint
        assert "runpod_flash.core" not in sys.modules  # the real one's submodules are set aside too
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("runpod_flash.core")

    assert flash_modules() == before
    import runpod_flash

    assert runpod_flash is fake_flash and runpod_flash.Endpoint == "the real one"


def test_scopes_nest_and_an_alias_dropped_inside_comes_back() -> None:
    with flashalias.installed() as outer:
        with flashalias.installed() as inner:
            assert inner is outer
            del sys.modules["runpod_flash"]  # someone drops it: the next import finds the same stand-in
            assert importlib.import_module("runpod_flash") is outer
        assert sys.modules["runpod_flash"] is outer  # the inner scope restored the outer one's state
    assert flash_modules() == {}


def test_import_flashpoint_never_installs_the_alias() -> None:
    code = (
        "import sys, flashpoint, flashpoint.hosting.discovery, flashpoint.worker.handler\n"
        "assert 'runpod_flash' not in sys.modules\n"
        "try:\n    import runpod_flash\nexcept ModuleNotFoundError:\n    print('absent')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "absent"


# --------------------------------------------------------------------------------------------------------------------
# Discovery: `flashpoint serve app.py` loads a Flash app as it is


def test_discovery_loads_a_flash_app_with_flashpoints_endpoint(tmp_path: Path) -> None:
    path = write(tmp_path, "flash_app_plain.py", FLASH_APP.format(tag="plain"))

    endpoints = load_endpoints(str(path))

    assert list(endpoints) == ["alias-plain-infer", "alias-plain-model"]
    assert isinstance(endpoints["alias-plain-infer"], EndpointFunction)
    assert isinstance(endpoints["alias-plain-model"], EndpointClass)
    assert endpoints["alias-plain-infer"].spec.workers_max == 2
    assert flash_modules() == {}  # the scope ended with the load


def test_discovery_prefers_the_alias_over_an_installed_runpod_flash(tmp_path: Path, fake_flash: ModuleType) -> None:
    path = write(tmp_path, "flash_app_shadow.py", FLASH_APP.format(tag="shadow"))

    endpoints = load_endpoints(str(path))

    assert isinstance(endpoints["alias-shadow-infer"], EndpointFunction)
    assert sys.modules["flash_app_shadow"].rf is flashalias.alias_module()
    assert sys.modules["runpod_flash"] is fake_flash  # the program's own runpod_flash is back


# --------------------------------------------------------------------------------------------------------------------
# Workers: importing and unpickling an endpoint's code


def test_a_worker_imports_a_flash_app_by_name_and_by_file(tmp_path: Path, fake_flash: ModuleType) -> None:
    write(tmp_path, "flash_app_worker.py", FLASH_APP.format(tag="worker"))
    sys.path.insert(0, str(tmp_path))  # as a worker's PYTHONPATH would (restored by restore_imports)

    infer = load_target(import_path="flash_app_worker:infer")
    model = load_target(import_path=f"{tmp_path / 'flash_app_worker.py'}:Model")

    assert infer.__module__ == "flash_app_worker" and infer.__name__ == "infer"
    assert model().predict(3) == 6
    assert sys.modules["runpod_flash"] is fake_flash


def test_a_worker_unpickles_code_that_names_runpod_flash(tmp_path: Path) -> None:
    # Given code shipped from an aliased module: cloudpickle pickles the module it uses by its name, runpod_flash
    with flashalias.installed():
        import runpod_flash as rf

        def region() -> str:
            return str(rf.GpuGroup.ANY.value)

        data = cloudpickle.dumps(region)
    assert b"runpod_flash" in data
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(data)  # what a worker without the alias would do
    shipped = tmp_path / "code.pkl"
    shipped.write_bytes(data)

    # When a worker loads it; Then it resolves runpod_flash to flashpoint, and leaves nothing installed
    assert load_target(pickle_file=str(shipped))() == "any"
    assert flash_modules() == {}


def test_a_shared_endpoints_table_imports_each_flash_member(tmp_path: Path) -> None:
    write(tmp_path, "flash_app_table.py", FLASH_APP.format(tag="table"))
    sys.path.insert(0, str(tmp_path))

    table = load_targets({"flashpoint.targets": {"infer": "flash_app_table:infer", "Model": "flash_app_table:Model"}})

    assert list(table) == ["infer", "Model"] and table["Model"]().predict(1) == 2


# --------------------------------------------------------------------------------------------------------------------
# flashpoint run SCRIPT: as `python SCRIPT`, with the alias (the embedded run with workers: the e2e test)

runner = CliRunner()

SCRIPT = """
import sys
import runpod_flash
from runpod_flash import Endpoint
from sibling import WORD

print("name", __name__, "argv", sys.argv[1:], "word", WORD, "endpoint", Endpoint.__module__)
if sys.argv[1:2] == ["raise"]:
    raise ValueError("from the script")
sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    write(tmp_path, "sibling.py", "WORD = 'next door'\n")
    return write(tmp_path, "flash_script.py", SCRIPT)


def test_run_runs_a_script_as_main_with_its_arguments_and_exit_status(script: Path) -> None:
    path, argv = list(sys.path), list(sys.argv)

    result = runner.invoke(app, ["run", str(script), "3", "--help", "-x"])

    # every word after SCRIPT is the script's, --help included; its folder is first on sys.path (sibling imports)
    assert result.exit_code == 3, result.output
    assert "name __main__ argv ['3', '--help', '-x'] word next door endpoint flashpoint.sdk.endpoint" in result.output
    assert (sys.path, sys.argv) == (path, argv) and flash_modules() == {}


def test_run_prints_the_scripts_traceback_and_exits_1(script: Path) -> None:
    result = runner.invoke(app, ["run", str(script), "raise"])

    assert result.exit_code == 1
    assert 'raise ValueError("from the script")' in result.output and "ValueError: from the script" in result.output
    assert "runpy" not in result.output  # the traceback starts at the script, as python's does


def test_run_refuses_a_missing_script(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", str(tmp_path / "nope.py")])

    assert result.exit_code != 0
    assert "no such file" in str(result.exception)
