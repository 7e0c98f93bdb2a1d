"""discovery: loading endpoints from app files and modules written to tmp_path."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flashpoint import ConfigError
from flashpoint.hosting.discovery import load_endpoints, load_module, split_target
from flashpoint.sdk.endpoint import EndpointClass, EndpointFunction
from flashpoint.worker.handler import load_target

APP = """
from flashpoint import Endpoint, GpuGroup, GpuType

@Endpoint(name="inference", gpu=GpuGroup.AMPERE_80)
async def infer(data: dict) -> dict:
    return {"ok": True}

@Endpoint(name="model", gpu=[GpuType.NVIDIA_H200, GpuGroup.ANY])
class Model:
    async def predict(self, data: dict) -> dict:
        return data

def helper() -> int:
    return 1
"""


pytestmark = pytest.mark.usefixtures("restore_imports")


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def test_a_file_gives_every_endpoint_in_definition_order(tmp_path: Path) -> None:
    path = write(tmp_path, "app_order.py", APP)

    endpoints = load_endpoints(str(path))

    assert list(endpoints) == ["inference", "model"]
    assert isinstance(endpoints["inference"], EndpointFunction)
    assert isinstance(endpoints["model"], EndpointClass)


def test_a_file_is_registered_under_a_stable_importable_name(tmp_path: Path) -> None:
    path = write(tmp_path, "app_stable.py", APP)

    infer = load_endpoints(str(path))["inference"]

    module = sys.modules["app_stable"]
    assert module.__file__ is not None and Path(module.__file__) == path.resolve()
    assert infer.__wrapped__.__module__ == "app_stable"
    assert load_target("app_stable:infer") is infer.__wrapped__  # what a worker does with the endpoint's import path
    # A worker subprocess inherits sys.path (as PYTHONPATH) and imports the module by the same name.
    probe = subprocess.run(
        [sys.executable, "-c", "import app_stable; print(app_stable.infer.spec.name)"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "inference"


def test_loading_the_same_file_twice_reuses_the_module(tmp_path: Path) -> None:
    path = write(tmp_path, "app_twice.py", APP)

    first = load_endpoints(str(path))
    second = load_endpoints(str(path))

    assert first["inference"] is second["inference"]


def test_attr_names_one_endpoint_by_attribute_or_by_name(tmp_path: Path) -> None:
    path = write(tmp_path, "app_attr.py", APP)

    by_attr = load_endpoints(f"{path}:infer")
    by_name = load_endpoints(f"{path}:inference")

    assert list(by_attr) == ["inference"]
    assert by_attr["inference"] is by_name["inference"]


def test_unknown_attr_suggests_close_names(tmp_path: Path) -> None:
    path = write(tmp_path, "app_typo.py", APP)

    with pytest.raises(ConfigError, match=r"no endpoint 'infr'; did you mean 'infer'"):
        load_endpoints(f"{path}:infr")


def test_attr_that_is_not_an_endpoint_says_to_decorate_it(tmp_path: Path) -> None:
    path = write(tmp_path, "app_plain.py", APP)

    with pytest.raises(ConfigError, match=r"helper is a function, not an endpoint; decorate it with @Endpoint"):
        load_endpoints(f"{path}:helper")


def test_missing_file_names_the_path_and_close_files(tmp_path: Path) -> None:
    write(tmp_path, "my_app.py", APP)

    with pytest.raises(ConfigError, match=r"no such file: .*my_ap\.py.*did you mean .*my_app\.py"):
        load_endpoints(str(tmp_path / "my_ap.py"))


def test_import_error_includes_the_original_error(tmp_path: Path) -> None:
    path = write(tmp_path, "app_broken.py", "import flashpoint_no_such_dependency\n")

    with pytest.raises(ConfigError, match=r"ModuleNotFoundError: No module named 'flashpoint_no_such_dep") as info:
        load_endpoints(str(path))

    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    assert "app_broken" not in sys.modules


def test_syntax_error_is_reported_with_its_location(tmp_path: Path) -> None:
    path = write(tmp_path, "app_syntax.py", "def broken(:\n")

    with pytest.raises(ConfigError, match=r"importing .*app_syntax\.py failed: SyntaxError"):
        load_endpoints(str(path))


def test_an_invalid_endpoint_is_reported_as_the_decorator_worded_it(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "app_badgpu.py",
        """
        from flashpoint import Endpoint

        @Endpoint(name="x", gpu="H20O")
        def f() -> None: ...
        """,
    )

    with pytest.raises(ConfigError, match=r"UnknownGPUError: Endpoint 'x'"):
        load_endpoints(str(path))


def test_a_module_without_endpoints_says_how_to_declare_one(tmp_path: Path) -> None:
    path = write(tmp_path, "app_empty.py", "x = 1\n")

    with pytest.raises(ConfigError, match=r"declares no endpoint: decorate a function or class"):
        load_endpoints(str(path))


def test_two_endpoints_with_one_name_and_other_options_are_refused(tmp_path: Path) -> None:
    # with the same options they are one endpoint serving both (tests/sdk/test_shared_names.py)
    path = write(
        tmp_path,
        "app_dupe.py",
        """
        from flashpoint import Endpoint

        @Endpoint(name="same")
        def a() -> None: ...

        @Endpoint(name="same", workers=2)
        def b() -> None: ...
        """,
    )

    with pytest.raises(ConfigError, match=r"two endpoints are named 'same' with different options"):
        load_endpoints(str(path))


def test_a_file_inside_a_package_gets_its_dotted_name_and_relative_imports_work(tmp_path: Path) -> None:
    write(tmp_path, "shop/__init__.py", "")
    write(tmp_path, "shop/gpus.py", "from flashpoint import GpuGroup\nCHOICE = GpuGroup.AMPERE_80\n")
    path = write(
        tmp_path,
        "shop/serving.py",
        """
        from flashpoint import Endpoint
        from .gpus import CHOICE

        @Endpoint(name="shop", gpu=CHOICE)
        async def serve(data: dict) -> dict:
            return data
        """,
    )

    endpoints = load_endpoints(str(path))

    assert endpoints["shop"].__wrapped__.__module__ == "shop.serving"
    assert "shop.serving" in sys.modules


def test_a_dotted_module_name_is_imported(tmp_path: Path) -> None:
    write(tmp_path, "dotted_pkg/__init__.py", "")
    write(tmp_path, "dotted_pkg/app.py", APP)
    sys.path.insert(0, str(tmp_path))  # restored by the restore_imports fixture

    endpoints = load_endpoints("dotted_pkg.app:model")

    assert list(endpoints) == ["model"]


def test_an_unknown_module_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"no module named 'flashpoint_no_such_app'"):
        load_endpoints("flashpoint_no_such_app.serving")


def test_a_module_whose_import_fails_inside_is_not_called_missing(tmp_path: Path) -> None:
    write(tmp_path, "inner_fail.py", "import flashpoint_missing_dependency\n")
    sys.path.insert(0, str(tmp_path))

    with pytest.raises(ConfigError, match=r"importing module 'inner_fail' failed: ModuleNotFoundError"):
        load_endpoints("inner_fail")


def test_a_file_named_like_a_loaded_module_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "json.py", APP)

    with pytest.raises(ConfigError, match=r"module 'json': that name is already taken .* rename the file"):
        load_endpoints(str(path))


def test_a_file_name_that_is_not_an_identifier_asks_for_a_rename(tmp_path: Path) -> None:
    path = write(tmp_path, "my-app.py", APP)

    with pytest.raises(ConfigError, match=r"'my-app' is not a Python identifier; rename it, e.g. to 'my_app'"):
        load_endpoints(str(path))


def test_load_module_returns_the_module(tmp_path: Path) -> None:
    path = write(tmp_path, "app_module.py", APP)

    module = load_module(str(path))

    assert module.__name__ == "app_module"
    assert module.helper() == 1


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("app.py", ("app.py", None)),
        ("app.py:infer", ("app.py", "infer")),
        ("pkg.mod:Model", ("pkg.mod", "Model")),
        ("pkg.mod", ("pkg.mod", None)),
        ("C:\\apps\\app.py", ("C:\\apps\\app.py", None)),
        ("C:\\apps\\app.py:infer", ("C:\\apps\\app.py", "infer")),
        ("app.py:my-endpoint", ("app.py", "my-endpoint")),
    ],
)
def test_split_target(target: str, expected: tuple[str, str | None]) -> None:
    assert split_target(target) == expected


def test_an_empty_target_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"no app given"):
        load_endpoints(" ")
