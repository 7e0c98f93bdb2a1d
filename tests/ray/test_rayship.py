"""What a Ray worker ships to its node (``backends/rayship.py``): pure, no cluster needed.

It sits with the Ray tests (and their markers) because it belongs to the Ray backend; it starts nothing.
"""

from __future__ import annotations

import json
import os
import site
import stat
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from flashpoint.backends import rayship
from flashpoint.backends.local import LocalBackend
from flashpoint.backends.ray import RayBackend
from flashpoint.backends.rayship import (
    EnvironmentSetupError,
    import_root,
    installer_error,
    pack,
    script_root,
    unpack,
)
from flashpoint.errors import BackendError

pytestmark = [pytest.mark.ray, pytest.mark.slow]

PY = "/plane/bin/python"


def module(file: str | None) -> types.ModuleType:
    made = types.ModuleType("m")
    if file is not None:
        made.__file__ = file
    return made


def test_the_ray_backend_builds_environments_and_the_local_one_does_not() -> None:
    assert RayBackend.builds_environments is True
    assert getattr(LocalBackend, "builds_environments", False) is False


@pytest.mark.parametrize(
    ("name", "relative", "root"),
    [
        ("app", "apps/app.py", "apps"),
        ("pkg.sub.app", "apps/pkg/sub/app.py", "apps"),
        ("pkg", "apps/pkg/__init__.py", "apps"),
    ],
)
def test_import_root_is_the_folder_sys_path_holds_for_the_module(
    tmp_path: Path, name: str, relative: str, root: str
) -> None:
    assert import_root(name, {name: module(str(tmp_path / relative))}) == str((tmp_path / root).resolve())


def test_installed_modules_and_folders_holding_python_are_not_shipped(tmp_path: Path) -> None:
    site_file = os.path.join(site.getsitepackages()[0], "somepkg", "__init__.py")
    base_parent = str(Path(sys.base_prefix).resolve().parent / "app.py")  # e.g. ~/app.py beside ~/.pyenv
    flashpoint_root = str(Path(rayship.__file__).resolve().parents[2] / "app.py")
    home = str(Path.home() / "app.py")
    cases = {"somepkg": site_file, "app": base_parent, "other": flashpoint_root, "rootapp": "/rootapp.py", "h": home}
    for name, file in cases.items():
        assert import_root(name, {name: module(file)}) is None, name
    assert import_root("gone", {}) is None
    assert import_root("builtin", {"builtin": module(None)}) is None


def test_a_pickled_target_ships_its_bytes_and_nothing_else(tmp_path: Path) -> None:
    code = tmp_path / "code.pkl"
    code.write_bytes(b"pickled bytes")
    argv = [PY, "-m", "flashpoint.worker", "--pickle", str(code)]
    shipment = pack(argv, {"PYTHONPATH": "/a:/b"}, setup_timeout_s=60, upload=None)
    assert shipment.code == b"pickled bytes"
    assert shipment.runtime_env is None and shipment.app_root is None and shipment.requirements == ()
    assert shipment.env == {"PYTHONPATH": "/a:/b"}  # nothing to rewrite


def recording_upload(uri: str) -> tuple[list[str], Callable[[str], str]]:
    """An ``upload`` for ``pack`` that records the folders it was given and answers ``uri``."""
    uploaded: list[str] = []

    def upload(directory: str) -> str:
        uploaded.append(directory)
        return uri

    return uploaded, upload


def script(file: str | None, spec_name: str | None = None) -> types.ModuleType:
    made = module(file)
    made.__spec__ = None if spec_name is None else types.SimpleNamespace(name=spec_name)  # type: ignore[assignment]
    return made


def test_a_pickled_target_ships_its_scripts_folder_when_the_script_imported_modules_from_it(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    uploaded, upload = recording_upload("gcs://_ray_pkg_script.zip")
    code = tmp_path / "code.pkl"
    code.write_bytes(b"pickled bytes")
    modules = {"__main__": script(str(folder / "main.py")), "helpers": module(str(folder / "helpers.py"))}
    env = {"PYTHONPATH": os.pathsep.join([str(folder), "/elsewhere"])}
    argv = [PY, "-m", "flashpoint.worker", "--pickle", str(code)]
    shipment = pack(argv, env, setup_timeout_s=60, upload=upload, modules=modules)
    assert uploaded == [str(folder.resolve())]
    assert shipment.code == b"pickled bytes" and shipment.app_root == str(folder.resolve())
    assert shipment.runtime_env == {"working_dir": "gcs://_ray_pkg_script.zip", "config": {"setup_timeout_seconds": 60}}
    assert shipment.env["PYTHONPATH"] == "/elsewhere"  # the actor puts its working directory in front
    # ship_code=False: nothing is uploaded
    assert pack(argv, env, setup_timeout_s=60, upload=None, modules=modules).runtime_env is None


@pytest.mark.parametrize(
    ("case", "modules", "expected"),
    [
        ("a helper beside the script", {"__main__": "p/main.py", "helpers": "p/helpers.py"}, "p"),
        ("a package beside the script", {"__main__": "p/main.py", "tools": "p/tools/__init__.py"}, "p"),
        ("a module of a package beside it", {"__main__": "p/main.py", "tools.io": "p/tools/io.py"}, "p"),
        ("nothing imported from the folder", {"__main__": "p/main.py", "other": "q/other.py"}, None),
        ("a module below the folder on a path of its own", {"__main__": "p/main.py", "io": "p/lib/io.py"}, None),
        ("no script file (python -c, a notebook)", {"__main__": None, "helpers": "p/helpers.py"}, None),
        ("python -m pkg.tool: the root is above pkg", {"__main__": "p/pkg/tool.py", "pkg": "p/pkg/__init__.py"}, "p"),
    ],
)
def test_script_root(tmp_path: Path, case: str, modules: dict[str, str | None], expected: str | None) -> None:
    def file(relative: str | None) -> str | None:
        return None if relative is None else str(tmp_path / relative)

    main = modules["__main__"]
    spec_name = "pkg.tool" if main is not None and main.endswith("pkg/tool.py") else None
    loaded = {name: module(file(path)) for name, path in modules.items() if name != "__main__"}
    loaded["__main__"] = script(file(main), spec_name)
    assert script_root(loaded) == (None if expected is None else str((tmp_path / expected).resolve())), case


def test_an_unreadable_code_file_is_a_backend_error(tmp_path: Path) -> None:
    argv = [PY, "-m", "flashpoint.worker", "--pickle", str(tmp_path / "missing.pkl")]
    with pytest.raises(BackendError, match="cannot read the endpoint's code file"):
        pack(argv, {}, setup_timeout_s=60, upload=None)


def test_an_app_module_ships_its_folder_as_the_working_dir(tmp_path: Path) -> None:
    app = tmp_path / "apps"
    uploaded, upload = recording_upload("gcs://_ray_pkg_0123.zip")
    modules = {"app": module(str(app / "app.py"))}
    env = {"PYTHONPATH": os.pathsep.join([str(app), "/elsewhere"])}
    argv = [PY, "-m", "flashpoint.worker", "--routes", "--import", "app:serve"]
    shipment = pack(argv, env, setup_timeout_s=60, upload=upload, modules=modules)
    assert uploaded == [str(app.resolve())]
    assert shipment.runtime_env == {"working_dir": "gcs://_ray_pkg_0123.zip", "config": {"setup_timeout_seconds": 60}}
    assert shipment.app_root == str(app.resolve())
    assert shipment.env["PYTHONPATH"] == "/elsewhere"  # the actor puts its working directory in front
    # ship_code=False: nothing is uploaded, the node must have the app's path
    assert pack(argv, env, setup_timeout_s=60, upload=None, modules=modules).runtime_env is None


def test_a_failed_upload_is_a_backend_error_with_rays_reason(tmp_path: Path) -> None:
    def upload(directory: str) -> str:
        raise ValueError("Package size (600.00MiB) exceeds the maximum size of 512.00MiB")

    modules = {"app": module(str(tmp_path / "app.py"))}
    argv = [PY, "-m", "flashpoint.worker", "--import", "app:f"]
    with pytest.raises(BackendError, match=r"cannot ship the app's folder .* exceeds the maximum size.*\.rayignore"):
        pack(argv, {}, setup_timeout_s=60, upload=upload, modules=modules)


def test_dependencies_become_a_pip_runtime_env_and_leave_the_hosts_site_packages_out_of_the_path() -> None:
    host_site = site.getsitepackages()[0]
    path = ["/app", host_site, os.path.join(host_site, "ray", "thirdparty_files"), "/other/venv/lib/site-packages"]
    env = {"FLASHPOINT_DEPENDENCIES": json.dumps(["six==1.15.0"]), "PYTHONPATH": os.pathsep.join(["", *path])}
    shipment = pack([PY, "-m", "flashpoint.worker", "--import", "app:f"], env, setup_timeout_s=90.4, upload=None)
    assert shipment.requirements == ("six==1.15.0",)
    assert shipment.runtime_env == {"pip": {"packages": ["six==1.15.0"]}, "config": {"setup_timeout_seconds": 90}}
    assert shipment.env["PYTHONPATH"] == "/app"


@pytest.mark.parametrize("listed", ["not json", '{"six": 1}', "[1]"])
def test_a_malformed_dependency_list_is_a_backend_error(listed: str) -> None:
    with pytest.raises(BackendError, match="FLASHPOINT_DEPENDENCIES"):
        pack([PY], {"FLASHPOINT_DEPENDENCIES": listed}, setup_timeout_s=60, upload=None)


def test_a_users_command_travels_as_it_is(tmp_path: Path) -> None:
    # "--pickle" and "--import" after "--" are the user's own arguments
    argv = [PY, "-m", "flashpoint.worker.launch", "--", PY, "handler.py", "--pickle", "x", "--import", "y:z"]
    shipment = pack(argv, {}, setup_timeout_s=60, upload=lambda d: pytest.fail("nothing to upload"))
    assert shipment.code is None and shipment.runtime_env is None


def test_unpack_writes_the_code_to_a_private_file_and_runs_this_interpreter(tmp_path: Path) -> None:
    argv = [PY, "-m", "flashpoint.worker", "--pickle", "/plane/code/ep.pkl"]
    unpacked = unpack(argv, {"PYTHONPATH": "/a"}, None, plane_python=PY, code=b"bytes")
    try:
        assert unpacked.argv[0] == sys.executable
        path = unpacked.argv[-1]
        assert path != "/plane/code/ep.pkl" and Path(path).read_bytes() == b"bytes"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert unpacked.code_dir is not None and stat.S_IMODE(os.stat(unpacked.code_dir).st_mode) == 0o700
        assert unpacked.env == {"PYTHONPATH": "/a"} and unpacked.cwd is None
    finally:
        rayship.remove_code(unpacked.code_dir)
    assert unpacked.code_dir is not None and not os.path.exists(unpacked.code_dir)


def test_unpack_refuses_code_for_a_command_that_loads_none() -> None:
    with pytest.raises(BackendError, match="no --pickle"):
        unpack([PY, "-m", "flashpoint.worker", "--import", "a:b"], {}, None, plane_python=PY, code=b"x")


def test_unpack_runs_in_the_working_dir_and_imports_from_it_first(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # where Ray unpacked the app's folder: the actor's working directory
    argv = [PY, "-m", "flashpoint.worker", "--import", "app:f"]
    unpacked = unpack(argv, {"PYTHONPATH": "/a"}, None, plane_python=PY, working_dir=True)
    assert unpacked.cwd == os.getcwd()
    assert unpacked.env["PYTHONPATH"] == os.pathsep.join([os.getcwd(), "/a"])


def test_unpack_gives_a_python_command_this_interpreter_too() -> None:
    argv = [PY, "-m", "flashpoint.worker.launch", "--", PY, "handler.py"]
    assert unpack(argv, {}, "/srv", plane_python=PY).argv == [
        sys.executable,
        "-m",
        "flashpoint.worker.launch",
        "--",
        sys.executable,
        "handler.py",
    ]
    other = ["/usr/bin/node", "server.js"]
    assert unpack(other, {}, None, plane_python=PY).argv == other


PIP_FAILURE = """Failed to set up runtime environment.
Could not create the actor because its associated runtime env failed to be created.
Traceback (most recent call last):
  File "runtime_env_agent.py", line 561, in _create_runtime_env_with_retry
ray._private.runtime_env.utils.SubprocessCalledProcessError: Run cmd[13] failed with the following details.
Last 50 lines of stdout:
    Looking in indexes: https://pypi.org/simple
    ERROR: Could not find a version that satisfies the requirement nope==1 (from versions: none)
    ERROR: No matching distribution found for nope==1
"""


def test_installer_error_keeps_pips_own_words() -> None:
    assert installer_error(PIP_FAILURE) == (
        "ERROR: Could not find a version that satisfies the requirement nope==1 (from versions: none)\n"
        "ERROR: No matching distribution found for nope==1"
    )
    timeout = "Failed to set up runtime environment.\nFailed to install runtime_env within the timeout of 5 seconds."
    assert installer_error(timeout) == "Failed to install runtime_env within the timeout of 5 seconds."
    assert installer_error("one\ntwo\n\nthree") == "one\ntwo\nthree"
    assert len(installer_error("x" * 5000)) <= 1503


def test_an_environment_setup_error_is_a_backend_error_carrying_the_installer_words() -> None:
    error = EnvironmentSetupError("worker w: ...", requirements=["a"], installer="ERROR: no")
    assert isinstance(error, BackendError) and error.requirements == ("a",) and error.installer == "ERROR: no"
