"""``runpod`` as Runpod SDK 2.x's App surface while flashpoint's alias is installed (flash/runpodalias.py, decision
0108): the stand-in's names, a submodule import without any ``runpod`` on the path, a ``runpod`` package of
tmp_path's whose submodules and other names the stand-in lends, what the scope puts back, nesting; and, slow, the real
rc2 wheel in a virtual environment of its own (``rc2_venv``) where ``runpod.serverless`` is rc2's own module."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import flashpoint.runpodapps
from flashpoint.flash import alias, runpodalias
from tests.rc2venv import Rc2Venv

pytestmark = pytest.mark.usefixtures("restore_imports")

SRC = Path(__file__).resolve().parents[2] / "src"


def runpod_modules() -> dict[str, ModuleType]:
    return {name: module for name, module in sys.modules.items() if name.split(".")[0] == "runpod"}


@pytest.fixture
def no_runpod_imported() -> Iterator[None]:
    """No ``runpod`` module in ``sys.modules`` during the test (one another test imported is put back after)."""
    saved = runpod_modules()
    for name in saved:
        del sys.modules[name]
    yield
    for name in runpod_modules():
        del sys.modules[name]
    sys.modules.update(saved)


@pytest.fixture
def no_runpod_installed(monkeypatch: pytest.MonkeyPatch, no_runpod_imported: None) -> None:
    """An interpreter where no ``runpod`` can be found: the folders of ``sys.path`` that hold one (this venv's
    site-packages holds runpod 1.x) are left out for the test."""
    finder = importlib.machinery.PathFinder
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if finder.find_spec("runpod", [entry]) is None])
    importlib.invalidate_caches()
    assert finder.find_spec("runpod") is None


@pytest.fixture
def fake_runpod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_runpod_imported: None) -> Path:
    """A package named ``runpod`` first on ``sys.path``: its ``__init__`` (which records each run in ``runs``) defines
    ``api_key`` and an ``App`` of its own, its ``serverless`` subpackage ``start``. Returns its folder."""
    package = tmp_path / "site" / "runpod"
    (package / "serverless").mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            from pathlib import Path

            from .version import VERSION_TEXT

            with Path(__file__).with_name("runs").open("a") as runs:
                runs.write("init\\n")

            api_key = "x"
            App = "the installed package's App"
            """
        )
    )
    (package / "version.py").write_text('VERSION_TEXT = "1.99.0-fake"\n')
    (package / "serverless" / "__init__.py").write_text("def start(config):\n    return ('fake start', config)\n")
    monkeypatch.setattr(sys, "path", [str(package.parent), *sys.path])
    importlib.invalidate_caches()
    return package


def init_runs(package: Path) -> int:
    runs = package / "runs"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


# --------------------------------------------------------------------------------------------------------------------
# The stand-in


def test_import_runpod_gives_the_app_surface_of_flashpoint(no_runpod_imported: None) -> None:
    with alias.installed():
        import runpod
        import runpod.apps
        from runpod import App, GpuGroup, Queue, is_local
        from runpod.apps import App as AppsApp, RemoteExecutionError

        assert runpod.__name__ == "runpod"
        assert runpod.__version__ == runpodalias.VERSION == "2.0.0rc2+flashpoint"
        assert App is AppsApp is flashpoint.runpodapps.App
        assert (GpuGroup, Queue, is_local) == (
            flashpoint.runpodapps.GpuGroup,
            flashpoint.runpodapps.Queue,
            flashpoint.runpodapps.is_local,
        )
        assert runpod.apps is flashpoint.runpodapps and sys.modules["runpod.apps"] is flashpoint.runpodapps
        assert RemoteExecutionError is flashpoint.runpodapps.RemoteExecutionError
        assert runpod.current_context is flashpoint.runpodapps.current_context  # beyond rc2's lazy names
        assert runpod.__all__ == list(runpodalias.SURFACE)
        assert all(getattr(runpod, name) is getattr(flashpoint.runpodapps, name) for name in runpodalias.SURFACE)
        namespace: dict[str, object] = {}
        exec("from runpod import *", namespace)
        assert set(namespace) - {"__builtins__"} == set(runpodalias.SURFACE)


def test_without_any_runpod_a_submodule_import_says_to_install_it(no_runpod_installed: None) -> None:
    finders = list(sys.meta_path)

    with alias.installed():
        import runpod

        assert runpod.App is flashpoint.runpodapps.App  # the App surface needs nothing installed
        assert runpod.__path__ == []
        with pytest.raises(ModuleNotFoundError, match="pip install runpod") as caught:
            importlib.import_module("runpod.serverless")
        assert caught.value.name == "runpod.serverless"
        assert "flashpoint provides Runpod SDK 2.x's App API as `runpod`" in str(caught.value)
        with pytest.raises(AttributeError, match="module 'runpod' has no attribute 'api_key'.*pip install runpod"):
            runpod.api_key  # noqa: B018

    assert runpod_modules() == {} and sys.meta_path == finders
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("runpod")


def test_an_installed_runpod_lends_its_submodules_and_other_names(fake_runpod: Path) -> None:
    with alias.installed():
        import runpod
        import runpod.serverless

        assert runpod.__path__ == [str(fake_runpod)]
        assert runpod.serverless.__file__ == str(fake_runpod / "serverless" / "__init__.py")
        assert runpod.serverless.start({"handler": None}) == ("fake start", {"handler": None})
        assert init_runs(fake_runpod) == 0  # importing runpod and its submodules never ran the package's __init__

        assert runpod.api_key == "x"  # first use of a name the stand-in lacks: the real __init__ runs, once
        assert runpod.VERSION_TEXT == "1.99.0-fake"  # its relative import found version.py in the real folder
        assert init_runs(fake_runpod) == 1
        assert runpod.App is flashpoint.runpodapps.App  # the App surface stays flashpoint's
        assert runpod.__version__ == "2.0.0rc2+flashpoint"
        assert sys.modules["runpod"] is runpod  # the real __init__ ran into a module of its own

    assert runpod_modules() == {}


def test_the_scope_puts_back_a_runpod_imported_before(fake_runpod: Path) -> None:
    import runpod  # the installed package, imported before the scope (its __init__ runs: once)
    import runpod.serverless

    before = runpod_modules()
    assert runpod.App == "the installed package's App" and init_runs(fake_runpod) == 1

    with alias.installed():
        import runpod as inside

        assert inside is not before["runpod"] and inside.App is flashpoint.runpodapps.App
        assert "runpod.serverless" not in sys.modules  # the real one's submodules are set aside too
        import runpod.serverless as serverless_inside

        assert serverless_inside is not before["runpod.serverless"]  # loaded afresh, under the stand-in

    assert runpod_modules() == before
    import runpod as after

    assert after is before["runpod"] and after.App == "the installed package's App"


def test_installs_nest(fake_runpod: Path) -> None:
    finders = list(sys.meta_path)
    restore_outer = runpodalias.install()
    outer = sys.modules["runpod"]
    importlib.import_module("runpod.serverless")

    restore_inner = runpodalias.install()
    inner = sys.modules["runpod"]
    assert inner is not outer and inner.App is outer.App is flashpoint.runpodapps.App
    assert "runpod.serverless" not in sys.modules
    restore_inner()

    assert sys.modules["runpod"] is outer  # the inner install put back the outer one's state
    assert sys.modules["runpod.serverless"].start({}) == ("fake start", {})
    assert importlib.import_module("runpod.apps") is flashpoint.runpodapps  # the outer finder still answers
    restore_outer()

    assert runpod_modules() == {} and sys.meta_path == finders


def test_flash_alias_installs_both_stand_ins(no_runpod_imported: None) -> None:
    with alias.installed() as flash_alias:
        assert sys.modules["runpod_flash"] is flash_alias
        assert sys.modules["runpod"].App is flashpoint.runpodapps.App
    assert "runpod_flash" not in sys.modules and "runpod" not in sys.modules


# --------------------------------------------------------------------------------------------------------------------
# The real rc2 wheel

RC2_CHECK = """
import importlib.util, json, sys

real = importlib.util.find_spec("runpod")
from flashpoint.flash import alias
import flashpoint.runpodapps as apps

with alias.installed():
    from runpod import App, GpuGroup
    import runpod
    import runpod.serverless
    import runpod.apps

    inside = {
        "app_is_flashpoints": App is apps.App and GpuGroup is apps.GpuGroup,
        "apps_is_flashpoints": runpod.apps is apps,
        "version": runpod.__version__,
        "path": runpod.__path__,
        "serverless_file": runpod.serverless.__file__,
        "start_module": runpod.serverless.start.__module__,
    }

import runpod
after = {"version": runpod.__version__, "app_module": runpod.App.__module__, "file": runpod.__file__}
print(json.dumps({"real": list(real.submodule_search_locations), "inside": inside, "after": after}))
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_with_rc2_installed_the_app_surface_is_flashpoints_and_serverless_rc2s(rc2_venv: Rc2Venv) -> None:
    run = subprocess.run(
        [str(rc2_venv.python), "-c", RC2_CHECK],
        env=rc2_venv.env(PYTHONPATH=str(SRC)),  # flashpoint importable (its alias needs the standard library only)
        cwd=rc2_venv.root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.splitlines()[-1])
    real_folder = result["real"][0]
    assert real_folder.startswith(str(rc2_venv.root))  # the venv's rc2, not this venv's runpod 1.x
    inside = result["inside"]
    assert inside["app_is_flashpoints"] and inside["apps_is_flashpoints"]
    assert inside["version"] == "2.0.0rc2+flashpoint"
    assert inside["path"] == [real_folder]
    assert inside["serverless_file"] == str(Path(real_folder) / "serverless" / "__init__.py")
    assert inside["start_module"].startswith("runpod.serverless")
    # after the scope, `import runpod` is rc2 itself
    assert result["after"]["version"] == "2.0.0rc2"
    assert result["after"]["app_module"].startswith("runpod.apps")
    assert result["after"]["file"] == str(Path(real_folder) / "__init__.py")
