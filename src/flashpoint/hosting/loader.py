"""The isolated loader: a deployed project folder loaded in a process of its own, its endpoints sent back as data.

A deploy ships code the server must never import: a deploy key would become code in the server's process (its keys,
other apps' secrets), and two apps' modules of one name would meet in one ``sys.modules``. So ``load_isolated`` runs
``python -m flashpoint.hosting.loader ROOT``, which loads the folder exactly as ``flashpoint serve DIR`` does
(``hosting.project``) and writes one pickle of plain data to its stdout: per endpoint its ``EndpointSpec``, its
``WorkerTarget`` (a pickled table stays bytes the server never unpickles), its call shapes (``hosting.shapes``) and
its kind; or the project's error, with the tail of its traceback. The server reads that pickle with a restricted
unpickler that builds only containers, strings, numbers and the value classes of ``spec``, ``gpus`` and
``flashtypes``: an answer naming anything else (``os.system``, a class of the project's) is refused.

The child runs as the server's user, without the server's credentials in its environment: it keeps code out of the
server's memory, it is no sandbox.
"""

from __future__ import annotations

import builtins
import importlib
import io
import logging
import os
import pickle
import selectors
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashpoint.errors import ConfigError, Error
from flashpoint.hosting.shapes import CallShape
from flashpoint.spec import EndpointSpec, WorkerTarget

__all__ = [
    "LOAD_TIMEOUT_S",
    "MAX_ANSWER_BYTES",
    "LoadedEndpoint",
    "LoadedProject",
    "ProjectUnpickler",
    "load_isolated",
    "main",
]

log = logging.getLogger("flashpoint.loader")

#: how long loading a project may take by default (imports of heavy libraries included)
LOAD_TIMEOUT_S = 120.0
#: the largest answer read from the child (pickled targets may hold cloudpickle bytes)
MAX_ANSWER_BYTES = 64 * 2**20
#: how much of the child's stderr is kept, and of an error's traceback quoted
_STDERR_TAIL = 64 * 1024
_QUOTE = 4000
#: the answer's format; a child of another flashpoint would be refused rather than misread
_VERSION = 1
#: variables the child never gets, whatever ``env`` holds: the server's own keys (and the plane's, below)
_CREDENTIALS = ("FLASHPOINT_API_KEY", "FLASHPOINT_URL", "RUNPOD_API_KEY")
#: an endpoint's kind: a queue endpoint (function, class, command) takes jobs, a route endpoint HTTP requests
KINDS = ("queue", "route")


@dataclass(frozen=True, slots=True)
class LoadedEndpoint:
    """One endpoint of a project loaded in another process: what the server needs to register and check it."""

    spec: EndpointSpec
    target: WorkerTarget
    #: the call shape of each function and class it serves, by target name; empty for a command or route endpoint
    shapes: Mapping[str, CallShape]
    #: "queue" (function, class, command) or "route" (``spec.serves_routes``)
    kind: str


@dataclass(frozen=True, slots=True)
class LoadedProject:
    """A project folder as its loader process saw it: its endpoints by name, in file order, and the files it did not
    import because their top level runs work (``(file, reason)``). A Runpod SDK 2.x resource is keyed by its id
    ``app.env.name`` (its own App's) until ``for_app`` picks the App a deploy is for."""

    root: Path
    endpoints: dict[str, LoadedEndpoint]
    skipped: list[tuple[str, str]]

    @property
    def apps(self) -> list[str]:
        """The Runpod SDK 2.x Apps the project declares, by name, in file order."""
        return list(dict.fromkeys(ep.spec.app for ep in self.endpoints.values() if ep.spec.app is not None))

    def for_app(self, app: str) -> LoadedProject:
        """What a deploy to ``app`` serves (decision 0108): the resources of the App named ``app`` and the endpoints
        of no App (Flash 1.x's), keyed by name.

        Raises:
            ConfigError: the project declares Apps, none named ``app``, and no endpoint of its own.
        """
        kept = {ep.spec.name: ep for ep in self.endpoints.values() if ep.spec.app in (None, app)}
        if not kept and self.apps:
            raise ConfigError(
                f"the project declares no endpoint for app {app!r}: its runpod.App apps are "
                f"{', '.join(repr(a) for a in self.apps)}; deploy with --app {self.apps[0]} (or without --app: "
                "`flashpoint deploy` deploys each App of the project)"
            )
        return LoadedProject(self.root, kept, self.skipped)


# --------------------------------------------------------------------------------------------------------------------
# The server's side


def load_isolated(
    root: Path,
    *,
    timeout_s: float = LOAD_TIMEOUT_S,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> LoadedProject:
    """Load the project folder ``root`` in a child process, as ``flashpoint serve DIR`` would, and return its
    endpoints as data; nothing of the project is imported here.

    Args:
        root: the project folder (an unpacked deploy).
        timeout_s: how long the child may take; then its process group is killed.
        python: the interpreter to run the child with (one that has flashpoint installed).
        env: the child's environment (default: this process's), always less the server's credentials.
        max_bytes: the largest answer read.

    Returns:
        The project's endpoints (spec, worker target, call shapes, kind) and its skipped files.

    Raises:
        ConfigError: the project did not load (its error quoted, with the tail of its traceback), declares no
            endpoint, took longer than ``timeout_s``, or its loader answered with something the server does not
            accept.
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise ConfigError(f"no project folder at {str(root)!r}")
    # -P: the project's folder is not put before the standard library (a project's json.py must not shadow it);
    # no bytecode: the unpacked deploy stays as it was uploaded
    command = [python, "-P", "-m", "flashpoint.hosting.loader", str(root)]
    proc = subprocess.Popen(
        command,
        cwd=root,
        env=child_env(os.environ if env is None else env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, so a timeout ends what it started too
    )
    try:
        answer, stderr, code = _collect(proc, timeout_s, max_bytes)
    finally:
        _end_group(proc)
    if stderr:
        log.debug("the loader of %s said: %s", root, stderr[-_QUOTE:])
    if not answer:
        said = f"; it said:\n{stderr[-_QUOTE:]}" if stderr.strip() else ""
        raise ConfigError(f"loading the project failed: its loader exited with code {code} without answering{said}")
    return _project(root, read_answer(answer))


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The loader's environment: ``env`` less the server's credentials (``FLASHPOINT_API_KEY``, ``FLASHPOINT_URL``,
    ``RUNPOD_API_KEY``, the plane's), writing no bytecode."""
    from flashpoint.scheduler.supervision import PLANE_CREDENTIALS

    dropped = {*_CREDENTIALS, *PLANE_CREDENTIALS}
    clean = {name: value for name, value in env.items() if name not in dropped}
    clean["PYTHONDONTWRITEBYTECODE"] = "1"
    return clean


def _collect(proc: subprocess.Popen[bytes], timeout_s: float, max_bytes: int) -> tuple[bytes, str, int | None]:
    """The child's stdout (whole, bounded) and stderr (its tail) until it exits; its exit code."""
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    answer = bytearray()
    stderr = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ConfigError(
                    f"loading the project took longer than {timeout_s:g} s; does a module's top level wait on "
                    "something (a server, a download, input)?"
                )
            stdout_open = any(key.fileobj is proc.stdout for key in selector.get_map().values())
            # answered and gone: what its stderr holds is read, but a process it started may hold it open for ever
            gone = not stdout_open and proc.poll() is not None
            # once stdout is closed, look at the child now and then
            ready = selector.select(0 if gone else remaining if stdout_open else min(remaining, 0.05))
            for key, _ in ready:
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                elif key.fileobj is proc.stdout:
                    answer += data
                    if len(answer) > max_bytes:
                        raise ConfigError(
                            f"the project's loader answered with more than {max_bytes} bytes; is code pickled by "
                            "value carrying large data (a model, an array) at module level?"
                        )
                else:
                    stderr += data
                    del stderr[:-_STDERR_TAIL]
            if gone:
                break
    code = proc.wait(max(0.0, deadline - time.monotonic()) + 1.0)
    return bytes(answer), stderr.decode("utf-8", "replace"), code


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child's process group (whatever the project left running, or the child on a timeout) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    try:
        proc.wait(5.0)
    except subprocess.TimeoutExpired:  # pragma: no cover - a SIGKILLed child is reaped at once
        log.warning("the project's loader (pid %d) did not end after SIGKILL", proc.pid)


#: the builtins an answer may name: containers, strings, numbers (what pickle has no opcode for)
_BUILTINS = frozenset({"bool", "bytes", "complex", "dict", "float", "frozenset", "int", "list", "set", "str", "tuple"})
#: the modules whose value classes (and instances of them, such as ``gpus.ANY_GPU``) an answer may name
_VALUE_MODULES = ("flashpoint.spec", "flashpoint.gpus", "flashpoint.flashtypes", "flashpoint.scaling")


class ProjectUnpickler(pickle.Unpickler):
    """Reads a loader's answer: builds containers, strings, numbers and the classes (enums, dataclasses) defined in
    ``flashpoint.spec``, ``flashpoint.gpus`` and ``flashpoint.flashtypes`` (not their exceptions, functions or
    imports); any other global is refused with a ``ConfigError``, before anything is called."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _BUILTINS:
            return getattr(builtins, name)
        if module in _VALUE_MODULES and name.isidentifier():
            found = getattr(importlib.import_module(module), name, None)
            if _value_class(found, module) or _value_class(type(found), module):
                return found
        raise ConfigError(f"the project's loader answered with a {module}.{name}, which the server does not accept")

    def persistent_load(self, pid: Any) -> Any:
        raise ConfigError("the project's loader answered with a persistent reference, which the server does not accept")


def _value_class(obj: Any, module: str) -> bool:
    return isinstance(obj, type) and obj.__module__ == module and not issubclass(obj, BaseException)


def read_answer(data: bytes) -> Any:
    """Unpickle a loader's answer with ``ProjectUnpickler``.

    Raises:
        ConfigError: the answer names a global the server does not accept, or is no pickle.
    """
    try:
        return ProjectUnpickler(io.BytesIO(data)).load()
    except ConfigError:
        raise
    except Exception as exc:  # a truncated or garbled answer: UnpicklingError, EOFError, ValueError, TypeError...
        raise ConfigError(f"the project's loader answered with something that is no answer: {type(exc).__name__}: "
                          f"{exc}"[:_QUOTE]) from None  # fmt: skip


def _bad(what: str) -> ConfigError:
    return ConfigError(f"the project's loader answered with {what}, which the server does not accept")


def _project(root: Path, record: Any) -> LoadedProject:
    """The answer checked, part by part: its types are what the child sends, never trusted."""
    if not isinstance(record, dict) or record.get("version") != _VERSION:
        raise _bad("an answer of another format")
    if "error" in record:
        error = record["error"]
        raise ConfigError(error if isinstance(error, str) else "the project did not load")
    endpoints, skipped = record.get("endpoints"), record.get("skipped")
    if not isinstance(endpoints, dict) or not isinstance(skipped, list):
        raise _bad("an answer without endpoints")
    found: dict[str, LoadedEndpoint] = {}
    for name, entry in endpoints.items():
        if not isinstance(name, str) or not isinstance(entry, dict):
            raise _bad("an endpoint that is not a dict by name")
        spec, target, shapes, kind = (entry.get(k) for k in ("spec", "target", "shapes", "kind"))
        if not isinstance(spec, EndpointSpec) or spec.key != name:
            raise _bad(f"an endpoint {name!r:.100} without its spec")
        if not isinstance(target, WorkerTarget) or not _target_ok(target):
            raise _bad(f"an endpoint {name!r:.100} without a worker target")
        if kind not in KINDS or (kind == "route") != spec.serves_routes:
            raise _bad(f"an endpoint {name!r:.100} of kind {kind!r:.100}")
        if not isinstance(shapes, dict) or not all(isinstance(t, str) for t in shapes):
            raise _bad(f"an endpoint {name!r:.100} without call shapes")
        found[name] = LoadedEndpoint(spec, target, {t: CallShape.from_data(s) for t, s in shapes.items()}, kind)
    kept: list[tuple[str, str]] = []
    for item in skipped:
        if not (isinstance(item, tuple | list) and len(item) == 2 and all(isinstance(s, str) for s in item)):
            raise _bad("a skipped file that is not (file, reason)")
        kept.append((item[0], item[1]))
    return LoadedProject(root, found, kept)


def _target_ok(target: WorkerTarget) -> bool:
    # built without __init__ by the unpickler: each field is checked for its type here
    command = target.command
    return (
        isinstance(target.import_path, str | None)
        and isinstance(target.pickled, bytes | None)
        and isinstance(target.cwd, str | None)
        and (command is None or (isinstance(command, tuple) and all(isinstance(part, str) for part in command)))
    )


# --------------------------------------------------------------------------------------------------------------------
# The child's side: ``python -m flashpoint.hosting.loader ROOT``


def _tail(text: str, limit: int = _QUOTE) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def _load(root: Path) -> dict[str, Any]:
    """Load the project (in this process: the child's) and describe it as plain data."""
    from flashpoint.hosting import project
    from flashpoint.hosting.shapes import shape_of

    failures: dict[str, str] = {}
    failed = getattr(project, "_failed", None)

    def keep_traceback(rel: str, kept: Any, exc: BaseException) -> Any:
        # load_project keeps only a failed file's message; its traceback (the user's frames) is what helps most,
        # and this throwaway process can take it at the one place load_project holds the exception
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        failures[rel] = "".join(traceback.format_exception(cause))
        return failed(rel, kept, exc) if failed is not None else None

    if failed is not None:
        setattr(project, "_failed", keep_traceback)  # noqa: B010 - a function of ours, in a throwaway process
    try:
        loaded = project.load_project(root)
        try:
            found = loaded.endpoints()
        except ConfigError as exc:
            told = "\n".join(f"{rel}:\n{_tail(text)}" for rel, text in failures.items())
            raise ConfigError(f"{exc}\n\ntraceback (the end):\n{told}" if told else str(exc)) from None
    finally:
        if failed is not None:
            setattr(project, "_failed", failed)  # noqa: B010
    if not found:
        raise ConfigError(
            "no endpoints found in the project: declare one at module level in a .py file of it, e.g. "
            "@Endpoint(name='worker', gpu=GpuGroup.ANY) (files its .gitignore or .flashignore leave out, tests and "
            "files whose top level runs work are not read)"
            + (f"; not read: {', '.join(rel for rel, _ in loaded.skipped)}" if loaded.skipped else "")
        )
    for name, (handle, _) in found.items():
        if handle.spec.scaling.scaler is not None:  # a function the server would have to run in its own process
            raise ConfigError(
                f"endpoint {name!r}: scaler= runs a function in the plane's process, which a server does not do for "
                "deployed code; use target_latency_ms, target_concurrency, workers_schedule or scaler_type"
            )
    endpoints = {
        name: {
            "spec": handle.spec,
            "target": target,
            "shapes": {t: shape.to_data() for t, shape in shape_of(handle).items()},
            "kind": "route" if handle.spec.serves_routes else "queue",
        }
        for name, (handle, target) in found.items()
    }
    return {"version": _VERSION, "endpoints": endpoints, "skipped": [tuple(s) for s in loaded.skipped]}


def main(argv: list[str] | None = None) -> int:
    """The child: load ``argv[0]`` and write one pickle (the project, or its error) to the stdout it was given;
    everything the project prints goes to stderr."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m flashpoint.hosting.loader PROJECT_DIR", file=sys.stderr)
        return 2
    root = Path(args[0]).resolve()
    sys.stdout.flush()
    answer = os.fdopen(os.dup(1), "wb")  # the answer's channel, not inherited by what the project starts
    os.dup2(2, 1)  # prints, C extensions and subprocesses of the project all write to stderr
    try:
        record = _load(root)
    except Error as exc:
        record = {"version": _VERSION, "error": _clean(str(exc), root)}
    except BaseException as exc:  # anything else the project raised while it loaded (SystemExit too)
        text = _tail("".join(traceback.format_exception(exc)))
        record = {"version": _VERSION, "error": _clean(f"loading the project failed:\n{text}", root)}
    try:
        data = pickle.dumps(record, protocol=5)
    except Exception as exc:  # a spec holding something that does not pickle
        text = f"the project's endpoints could not be sent to the server: {type(exc).__name__}: {exc}"
        data = pickle.dumps({"version": _VERSION, "error": _tail(text)}, protocol=5)
    answer.write(data)
    answer.flush()
    sys.stderr.flush()
    # threads the project started would keep the process alive, and atexit hooks could write more: leave now
    os._exit(0)


def _clean(message: str, root: Path) -> str:
    """The error with the project's paths relative (the server's folders are none of the deployer's business)."""
    return message.replace(str(root) + os.sep, "").replace(str(root), ".")


if __name__ == "__main__":
    sys.exit(main())
