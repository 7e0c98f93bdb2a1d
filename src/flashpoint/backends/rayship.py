"""Ray backend: what a worker takes to a node that shares nothing with the plane but the Ray cluster.

An endpoint's ``dependencies`` become the actor's ``pip`` runtime_env (Ray builds it on the node); a pickled target's
bytes travel as an argument of the actor's ``start``; an app module's import root travels as the actor's
``working_dir`` (a package the plane uploads to the cluster), and so does a script's folder when the script imported
modules of its own from it (its pickled functions use them by reference). A user's command is the node's own and
travels as it is.

Plane side: :func:`pack` (pure, given the upload function) says what a launch ships. Node side, inside the actor:
:func:`unpack` writes the code where the worker reads it and rewrites its command and import path. Ray itself is
imported by ``backends/ray.py`` only; this module never imports it.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashpoint.errors import BackendError

__all__ = [
    "EXCLUDES",
    "EnvironmentSetupError",
    "Shipment",
    "Unpacked",
    "import_root",
    "installer_error",
    "pack",
    "script_root",
    "unpack",
]

#: the variable the plane lists an endpoint's pip requirements in (a JSON list)
DEPENDENCIES_ENV = "FLASHPOINT_DEPENDENCIES"
#: never shipped with an app's directory; Ray also leaves out what its ``.gitignore`` and ``.rayignore`` name
EXCLUDES = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "__pycache__",
    "*.pyc",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    "node_modules",
)
#: the installer's lines kept in an error (its last ones; pip says what went wrong at the end)
_ERROR_LINES = 8
_ERROR_CHARS = 1500


class EnvironmentSetupError(BackendError):
    """Ray could not set up a worker's environment on its node (a requirement pip cannot install, or not in time).

    A failed start like any other ``BackendError``; ``installer`` holds the installer's own last lines, which the
    message ends with.
    """

    code = "environment_setup_failed"

    def __init__(self, message: str, *, requirements: Sequence[str] = (), installer: str = "") -> None:
        super().__init__(message)
        self.requirements = tuple(requirements)
        self.installer = installer


@dataclass(frozen=True, slots=True)
class Shipment:
    """What one worker launch takes to its node besides its command and environment."""

    #: the actor's ``runtime_env`` (``pip``, ``working_dir``, ``config``); None: the node's own environment
    runtime_env: dict[str, Any] | None = None
    #: a pickled target's bytes, which the actor writes to a file of its own
    code: bytes | None = None
    #: the plane's import root of the app module shipped as the working directory (None: nothing shipped)
    app_root: str | None = None
    #: the endpoint's pip requirements
    requirements: tuple[str, ...] = ()
    #: the worker's environment with its import path rewritten for the node
    env: dict[str, str] = field(default_factory=dict)


def requirements_of(env: Mapping[str, str]) -> tuple[str, ...]:
    """The pip requirements the plane put in a worker's environment (``FLASHPOINT_DEPENDENCIES``)."""
    try:
        listed = json.loads(env.get(DEPENDENCIES_ENV) or "[]")
    except ValueError:
        raise BackendError(f"{DEPENDENCIES_ENV} is not a JSON list: {env.get(DEPENDENCIES_ENV)!r}") from None
    if not isinstance(listed, list) or not all(isinstance(r, str) for r in listed):
        raise BackendError(f"{DEPENDENCIES_ENV} is not a JSON list of strings: {listed!r}")
    return tuple(listed)


def _value_after(argv: Sequence[str], flag: str) -> str | None:
    """The argument after ``flag`` in flashpoint's own worker command (not inside a user's command after ``--``)."""
    head = list(argv[: argv.index("--")]) if "--" in argv else list(argv)
    if flag in head and head.index(flag) + 1 < len(head):
        return head[head.index(flag) + 1]
    return None


def _installation() -> list[Path]:
    """Directories that belong to this Python installation and flashpoint: a module there is installed, not an app's."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        dirs.add(site.getusersitepackages())
    dirs.add(str(Path(__file__).resolve().parents[2]))  # flashpoint's own import root (site-packages, or src/)
    return [Path(d).resolve() for d in dirs]


def import_root(module_name: str, modules: Mapping[str, Any] | None = None) -> str | None:
    """The directory the plane imports ``module_name`` from (the folder ``sys.path`` holds for it), when that is an
    app's own folder that may be shipped: None for a module not loaded here or without a file, one installed in this
    Python (site-packages, the prefixes, flashpoint's own import root), and the filesystem root, a home folder or a
    folder that holds the Python installation (``~/.pyenv``): far too much to ship."""
    module = (sys.modules if modules is None else modules).get(module_name)
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not file:
        return None
    path = Path(file).resolve()
    root = path.parent
    for _ in range(module_name.count(".") + (1 if path.stem == "__init__" else 0)):
        root = root.parent
    if root == Path(root.anchor) or root == Path.home().resolve() or root in Path(sys.base_prefix).resolve().parents:
        return None  # the filesystem root, a home folder, or a folder holding the Python installation
    for installed in _installation():
        if root == installed or installed in root.parents:
            return None
    return str(root)


def script_root(modules: Mapping[str, Any] | None = None) -> str | None:
    """The script's folder (``__main__``'s import root), when the script imported modules of its own from there.

    A pickled target holds the script's functions by value but what they use from those modules (``from helpers
    import tokenize``) by reference, so the node must import them: the folder travels as the working directory, as an
    app module's does. None when the script imported nothing from its folder (nothing to ship), or has no file or an
    unshippable folder (``import_root``).
    """
    loaded = dict(sys.modules if modules is None else modules)
    main = loaded.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None) or "__main__"  # `python -m pkg.tool`: the import root is above pkg
    loaded[name] = main
    root = import_root(name, loaded)
    if root is None:
        return None
    inside = root + os.sep
    for other, module in loaded.items():
        file = getattr(module, "__file__", None)
        if module is main or not isinstance(file, str) or not os.path.realpath(file).startswith(inside):
            continue
        if import_root(other, loaded) == root:  # imported from that folder (not a data file's module elsewhere)
            return root
    return None


def _site_dirs() -> list[Path]:
    dirs = set(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.add(site.getusersitepackages())
    return [Path(os.path.realpath(d)) for d in dirs]


def _pythonpath(entries: Sequence[str], *, drop_site: bool, drop_root: str | None) -> list[str]:
    """The plane's import path for a worker on a node: without the host's site-packages (and folders inside them,
    such as Ray's ``thirdparty_files``) when the worker runs in its own environment (``PYTHONPATH`` comes before
    site-packages: the host's would beat the environment's pins), and without the app's folder when that travels as
    the working directory (the actor puts its own in front)."""
    site_dirs = _site_dirs() if drop_site else []
    kept = []
    for entry in entries:
        if not entry:
            continue
        real = Path(os.path.realpath(entry))
        if drop_site and (
            real.name in ("site-packages", "dist-packages") or any(real == d or d in real.parents for d in site_dirs)
        ):
            continue
        if drop_root is not None and str(real) == drop_root:
            continue
        kept.append(entry)
    return kept


def pack(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    setup_timeout_s: float,
    upload: Callable[[str], str] | None,
    modules: Mapping[str, Any] | None = None,
) -> Shipment:
    """What a worker started with ``argv`` and ``env`` ships to its node. Blocking: ``upload(directory) -> uri``
    packs an app module's folder into the cluster (None: nothing is uploaded, the node must have the app's path).

    Raises:
        BackendError: the code file cannot be read, or the upload failed (Ray's reason, e.g. a folder over its size
            limit, is in the message).
    """
    requirements = requirements_of(env)
    code = None
    pickle_file = _value_after(argv, "--pickle")
    if pickle_file is not None:
        try:
            code = Path(pickle_file).read_bytes()
        except OSError as exc:
            raise BackendError(f"cannot read the endpoint's code file {pickle_file}: {exc.strerror or exc}") from None
    root = None
    target = _value_after(argv, "--import")
    if target is not None and upload is not None:
        root = import_root(target.partition(":")[0], modules)
    elif pickle_file is not None and upload is not None:
        root = script_root(modules)
    runtime_env: dict[str, Any] = {}
    if requirements:
        runtime_env["pip"] = {"packages": list(requirements)}
    if root is not None and upload is not None:
        try:
            runtime_env["working_dir"] = upload(root)
        except Exception as exc:  # Ray's ValueError (too large), RuntimeError (the upload failed), OSError
            raise BackendError(
                f"cannot ship the app's folder {root} to the Ray cluster: {exc}. Leave large files out with a "
                ".rayignore (or .gitignore) there, or install the app on every node"
            ) from None
    worker_env = dict(env)
    if "PYTHONPATH" in worker_env and (requirements or root is not None):
        entries = worker_env["PYTHONPATH"].split(os.pathsep)
        drop = os.path.realpath(root) if root is not None else None
        worker_env["PYTHONPATH"] = os.pathsep.join(_pythonpath(entries, drop_site=bool(requirements), drop_root=drop))
    if runtime_env:
        runtime_env["config"] = {"setup_timeout_seconds": max(1, round(setup_timeout_s))}
    return Shipment(
        runtime_env=runtime_env or None,
        code=code,
        app_root=root,
        requirements=requirements,
        env=worker_env,
    )


@dataclass(frozen=True, slots=True)
class Unpacked:
    """A worker's command, environment and folder on its node, and the private folder holding its code (if any)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    code_dir: str | None = None


def unpack(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    *,
    plane_python: str,
    code: bytes | None = None,
    working_dir: bool = False,
) -> Unpacked:
    """Inside the actor: the worker's command with this node's interpreter (the runtime_env's, when the actor has one)
    in place of the plane's, the code the plane sent in a file of its own (0600, in a 0700 folder) in place of the
    plane's file, and the actor's working directory (the shipped app folder) as the worker's folder and first import
    path entry."""
    command = list(argv)
    here = sys.executable
    if command and command[0] == plane_python:  # the plane's interpreter means this node's (or this environment's)
        command[0] = here
    if "flashpoint.worker.launch" in command[:3] and "--" in command:  # a user's command run with "python"
        inner = command.index("--") + 1
        if inner < len(command) and command[inner] == plane_python:
            command[inner] = here
    code_dir = None
    if code is not None:
        if "--pickle" not in command[:-1]:
            raise BackendError("code was sent for a worker command that loads none (no --pickle)")
        code_dir = tempfile.mkdtemp(prefix="flashpoint-code-")
        path = os.path.join(code_dir, "target.pkl")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(code)
        command[command.index("--pickle") + 1] = path
    worker_env = dict(env)
    if working_dir:
        cwd = os.getcwd()  # Ray unpacked the app's folder here and made it the actor's working directory
        rest = [e for e in worker_env.get("PYTHONPATH", "").split(os.pathsep) if e]
        worker_env["PYTHONPATH"] = os.pathsep.join([cwd, *rest])
    return Unpacked(command, worker_env, cwd, code_dir)


def remove_code(code_dir: str | None) -> None:
    """Remove the private folder a worker's code was written to (the worker has exited)."""
    if code_dir is not None:
        shutil.rmtree(code_dir, ignore_errors=True)


def installer_error(text: str) -> str:
    """The installer's own words in Ray's runtime_env error: pip's ``ERROR:`` lines (or, without any, the last lines
    of the message), joined on one line each, bounded."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    timed_out = [line for line in lines if "within the timeout" in line]
    chosen = (errors or timed_out or lines)[-_ERROR_LINES:]
    joined = "\n".join(chosen)
    return joined if len(joined) <= _ERROR_CHARS else "..." + joined[-_ERROR_CHARS:]
