"""Building one environment with uv in a given directory: venv, install, inherit flashpoint's runtime, check it.

The caller (``cache.py``) owns where and when: it holds the key's lock and gives a temporary directory that it renames
into place once this returns. The venv is made ``--relocatable`` so that rename is safe: its scripts find their
interpreter relative to themselves instead of embedding the temporary path.

uv is the ``uv`` PyPI package's binary (``uv.find_uv_bin()``), a dependency of flashpoint: nothing is downloaded at
run time, neither uv nor a Python (``--no-python-downloads``).

Every process a build starts runs under the build's ``Interrupt`` (``interrupt.py``): setting it kills the one running
and keeps the next from starting, and the build then raises ``BuildStopped`` with the interrupt's reason.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from flashpoint.environments.interrupt import Interrupt
from flashpoint.environments.pipconfig import UvOptions
from flashpoint.errors import ConfigError

__all__ = [
    "BuildFailed",
    "BuildStopped",
    "PTH_NAME",
    "build_environment",
    "env_python",
    "inherited_paths",
    "uv_binary",
]

#: the ``.pth`` file that appends the host's site-packages after the environment's own
PTH_NAME = "_flashpoint_host.pth"
#: output lines kept for an error message
_TAIL_LINES = 40
#: seconds a check script in the new environment may run
_CHECK_TIMEOUT_S = 120.0

#: the directory the running flashpoint package is imported from (found without importing the SDK surface)
_FLASHPOINT_HOME = Path(__file__).resolve().parents[2]

#: run by the new environment's interpreter, without PYTHONPATH: where its site-packages is, and its import path
_PATHS = """
import json, sys, sysconfig
print(json.dumps({"purelib": sysconfig.get_paths()["purelib"], "path": sys.path}))
"""
#: the same, once the host's directories are inherited: proves a worker can start there
_RUNTIME = "import flashpoint.worker.runtime\n" + _PATHS


class BuildFailed(Exception):
    """A step of the build failed; ``cache.py`` turns it into a recorded ``EnvironmentBuildError``."""

    def __init__(self, message: str, *, returncode: int | None, tail: Sequence[str]) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.tail = tuple(tail)


class BuildStopped(Exception):
    """The build's ``Interrupt`` was set (``reason``: its time limit, or the caller); ``cache.py`` decides whether
    that is a failure to record."""

    def __init__(self, reason: str, *, tail: Sequence[str]) -> None:
        super().__init__(f"the build was stopped ({reason})")
        self.reason = reason
        self.tail = tuple(tail)


def uv_binary() -> str:
    """The uv executable installed with flashpoint; ``ConfigError`` when it is missing (a broken install, not a
    problem of the requirements, so it is not recorded as the environment's failure)."""
    try:
        import uv  # the uv package is a thin locator of the binary it ships

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError) as exc:
        raise ConfigError(
            f"per-endpoint environments need uv, a dependency of flashpoint, and it is missing ({exc}): "
            "pip install 'uv>=0.5' into flashpoint's environment"
        ) from None


def env_python(path: Path) -> Path:
    """The interpreter of the virtual environment at ``path``."""
    return path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def inherited_paths() -> list[str]:
    """The host's import directories an environment appends after its own site-packages.

    The host environment's site-packages (``site.getsitepackages()``; the user site too when this interpreter uses
    it), then the directory flashpoint itself is imported from when that is none of them (an editable or ``src``
    install, whose own ``.pth`` the environment would not read: only the directories are inherited, never the host's
    ``.pth`` files, so nothing of the host runs at the environment's start).
    """
    paths = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        paths.append(site.getusersitepackages())
    paths.append(str(_FLASHPOINT_HOME))
    seen: dict[str, None] = {}
    for path in paths:
        if os.path.isdir(path):
            seen.setdefault(os.path.realpath(path), None)
    return list(seen)


def _run(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    on_line: Callable[[str], None],
    tail: deque[str],
    stop: Interrupt,
) -> int:
    """Run ``command``, passing each output line (stdout and stderr, merged) to ``on_line``; its exit status. Raises
    ``BuildStopped`` when ``stop`` is set, before or while it runs (it kills the process, which ends the read)."""
    _stopped(stop, tail)
    with (
        subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            text=True,
            errors="replace",
            bufsize=1,
        ) as proc,
        stop.watching(proc),
    ):
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.rstrip("\r\n")[:2000]
                tail.append(line)
                on_line(line)
            code = proc.wait()
        finally:
            if proc.poll() is None:  # on_line raised, or we were interrupted: the installer must not run unattended
                proc.kill()
                proc.wait()
    _stopped(stop, tail)
    return code


def _stopped(stop: Interrupt, tail: Sequence[str]) -> None:
    """Raise ``BuildStopped`` when ``stop`` is set."""
    reason = stop.reason
    if reason is not None:
        raise BuildStopped(reason, tail=tail)


def build_environment(
    target: Path,
    requirements: Sequence[str],
    *,
    python: str,
    uv: str,
    options: UvOptions,
    inherit: Sequence[str],
    on_line: Callable[[str], None],
    cwd: Path,
    stop: Interrupt | None = None,
) -> Path:
    """Create a virtual environment at ``target`` holding ``requirements``; its site-packages directory.

    ``requirements`` must already be normalised (``keys.normalize_requirements``); they follow ``--``, so even so
    none could be read as an option. Raises ``BuildFailed`` with the output's tail when a step fails, and
    ``BuildStopped`` when ``stop`` is set (the process running then is killed; the caller removes ``target``).
    """
    stop = stop if stop is not None else Interrupt()
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    # uv reads its own configuration from the working directory upwards: run it where no project's pyproject.toml is
    env = {**os.environ, **options.env, "NO_COLOR": "1"}
    env.pop("VIRTUAL_ENV", None)

    def step(command: list[str], failure: str) -> None:
        code = _run(command, env=env, cwd=cwd, on_line=on_line, tail=tail, stop=stop)
        if code != 0:
            raise BuildFailed(failure, returncode=code, tail=tail)

    step(
        [uv, "venv", "--quiet", "--relocatable", "--no-python-downloads", "--python", python, str(target)],
        f"uv could not create a virtual environment for {python}",
    )
    interpreter = env_python(target)
    if requirements:
        install = [uv, "pip", "install", "--python", str(interpreter), "--no-progress", "--color", "never"]
        step(
            [*install, "--no-python-downloads", *options.args, "--", *requirements],
            "uv could not install the requirements",
        )
    purelib, _ = _check(interpreter, env, cwd, stop)
    # lines of a .pth are appended to sys.path after the directory holding it: the environment's pins win
    (Path(purelib) / PTH_NAME).write_text("".join(f"{path}\n" for path in inherit), encoding="utf-8")
    purelib, path = _check(interpreter, env, cwd, stop, runtime=True)
    own = path.index(purelib) if purelib in path else -1
    early = [p for p in inherit if p in path and path.index(p) < own]
    if own < 0 or early:
        raise BuildFailed(
            f"the environment's site-packages ({purelib}) does not come before the inherited {early}",
            returncode=None,
            tail=[os.pathsep.join(path)],
        )
    return Path(purelib)


def _check(
    interpreter: Path, env: Mapping[str, str], cwd: Path, stop: Interrupt, *, runtime: bool = False
) -> tuple[str, list[str]]:
    """Run a check script in the new environment (importing flashpoint's runtime when ``runtime``): its
    site-packages directory and ``sys.path``."""
    script = _RUNTIME if runtime else _PATHS
    clean = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")}
    _stopped(stop, ())
    try:
        with (
            subprocess.Popen(
                [str(interpreter), "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                env=clean,
                cwd=cwd,
            ) as proc,
            stop.watching(proc),
        ):
            try:
                stdout, stderr = proc.communicate(timeout=_CHECK_TIMEOUT_S)
            finally:
                if proc.poll() is None:  # timed out, or interrupted from this thread: do not leave it running
                    proc.kill()
                    proc.wait()
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildFailed(f"the new environment's interpreter did not run: {exc}", returncode=None, tail=()) from None
    _stopped(stop, ())
    if proc.returncode != 0:
        what = "flashpoint's worker runtime does not import" if runtime else "the interpreter failed"
        raise BuildFailed(
            f"{what} in the new environment (does a requirement pin one of flashpoint's own dependencies to a "
            "version it cannot use?)",
            returncode=None,
            tail=(stdout + stderr).splitlines()[-_TAIL_LINES:],
        )
    result = json.loads(stdout.strip().splitlines()[-1])
    return str(result["purelib"]), [str(p) for p in result["path"]]
