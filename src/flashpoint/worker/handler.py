"""Inside a worker process: load the endpoint's code (its function, its class, or the several of a shared
endpoint), and call it with a job's input; Runpod's error body for a job that raised.

A class endpoint's worker keeps one instance per distinct constructor arguments (the caller chooses them), at most
``FLASHPOINT_MAX_INSTANCES`` (default ``MAX_INSTANCES``, 4) at once: a new one drops the least recently used
(``Instances``), so callers naming many arguments cost the worker a few instances' memory, not one per value.

Never imports ``flashpoint.store`` or ``scheduler``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import sys
import time
import traceback
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from flashpoint.flash import alias
from flashpoint.jobs import Reason
from flashpoint.runpodapps.handles import ApiHandle, FunctionHandle
from flashpoint.runpodapps.serving import worker_init
from flashpoint.wire import codec, protocol

#: this process's cold-start phases as ``load_target`` measured them (``imports``, ``init``; ``wire/coldstart.py``),
#: and a class endpoint's ``init`` (its first instance's constructor, which runs in its first job) once measured
LOAD_PHASES: dict[str, float] = {}


def load_target(import_path: str | None = None, pickle_file: str | None = None) -> Any:
    """The decorated function or class itself, from ``module:qualname``, ``file.py:qualname`` or a pickle file.

    ``runpod_flash`` is flashpoint while the code imports or unpickles (``flash.alias``), as it was where the plane
    loaded it: a Flash app's module imports it, and cloudpickle names it in code shipped from such a module.
    """
    with alias.installed():
        return _load(import_path, pickle_file)


def _load(import_path: str | None, pickle_file: str | None) -> Any:
    began = time.perf_counter()
    if pickle_file is not None:
        import pickle

        obj = pickle.loads(Path(pickle_file).read_bytes())
    elif import_path is not None:
        module_name, _, qualname = import_path.partition(":")
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
        obj = module
        for part in qualname.split("."):
            obj = getattr(obj, part)
    else:
        raise ValueError("a worker needs --import PATH or --pickle FILE")
    if isinstance(obj, ApiHandle):
        return obj  # Runpod SDK 2.x's @app.api: the route worker serves its app (routeserver, runpodapps.serving)
    imported = time.perf_counter()
    LOAD_PHASES.setdefault("imports", imported - began)  # the first load is the start's (a shared table loads more)
    if isinstance(obj, FunctionHandle):
        worker_init(obj)  # Runpod SDK 2.x's @fn.init: once, before the worker takes a job
        LOAD_PHASES.setdefault("init", time.perf_counter() - imported)
    return getattr(obj, "__wrapped__", obj)


def missing_dependencies(requirements: list[str]) -> list[str]:
    """Requirements whose distribution is not installed in this interpreter."""
    missing = []
    for requirement in requirements:
        name = re.split(r"[\s<>=!~;\[@]", requirement.strip(), maxsplit=1)[0]
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(requirement)
    return missing


def dependency_problem(requirements: list[str], system: list[str]) -> str | None:
    """What this worker lacks of its endpoint's ``dependencies`` (not installed in this interpreter) and
    ``system_dependencies`` (not installed on this node), with what installs them; None when nothing is missing."""
    problems = []
    missing = missing_dependencies(requirements)
    if missing:
        problems.append(
            f"dependencies not installed in the worker's environment ({sys.executable}): {', '.join(missing)}; "
            "install them there, e.g. pip install " + " ".join(repr(r) for r in missing)
        )
    if system:
        from flashpoint.environments.system import install_command, missing_system_dependencies

        absent = missing_system_dependencies(system)
        if absent:
            problems.append(
                f"system dependencies not installed on this node: {', '.join(absent)}; install them with: "
                + install_command(absent)
            )
    return "; and ".join(problems) or None


class HandlerError(Exception):
    """An error the runtime reports with a specific reason code."""

    def __init__(self, message: str, reason: Reason) -> None:
        super().__init__(message)
        self.reason = reason


#: the key of the table a shared endpoint's worker loads (flashpoint.spec.TARGETS_KEY; the worker never imports spec)
TARGETS_KEY = "flashpoint.targets"


def load_targets(target: Any) -> dict[str, Any]:
    """``{target name: function or class}``: the table of a shared endpoint (import paths imported), or the one."""
    if isinstance(target, dict) and TARGETS_KEY in target:
        return {
            name: load_target(import_path=obj) if isinstance(obj, str) else getattr(obj, "__wrapped__", obj)
            for name, obj in target[TARGETS_KEY].items()
        }
    return {str(getattr(target, "__name__", type(target).__name__)): target}


#: the variable that bounds a class endpoint's instances per worker, and its default
MAX_INSTANCES_ENV = "FLASHPOINT_MAX_INSTANCES"
MAX_INSTANCES = 4


def max_instances(env: Mapping[str, str]) -> int:
    """``FLASHPOINT_MAX_INSTANCES`` from ``env`` (``MAX_INSTANCES`` when unset or empty).

    Raises:
        ValueError: not a whole number of at least 1 (the message says what to set).
    """
    text = env.get(MAX_INSTANCES_ENV, "").strip()
    if not text:
        return MAX_INSTANCES
    if not text.isdigit() or int(text) < 1:
        raise ValueError(
            f"{MAX_INSTANCES_ENV} is how many instances of a class endpoint (one per distinct constructor arguments) "
            f"a worker keeps, a whole number of at least 1 (default {MAX_INSTANCES}); got {text!r}"
        )
    return int(text)


class Instances:
    """A class's instances by constructor arguments (as the futures of their construction), at most ``limit``; the
    least recently used goes when one more is added. A dropped instance is only forgotten: a job still using it (or
    waiting for its construction) keeps it until it ends, and nothing else is called on it."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"an instance limit is at least 1, got {limit}")
        self.limit = limit
        self._by_key: OrderedDict[str, asyncio.Future[Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_key)

    def keys(self) -> list[str]:
        """The keys kept, least recently used first."""
        return list(self._by_key)

    def get(self, key: str) -> asyncio.Future[Any] | None:
        """The instance for ``key``, now the most recently used; None when none is kept."""
        built = self._by_key.get(key)
        if built is not None:
            self._by_key.move_to_end(key)
        return built

    def put(self, key: str, built: asyncio.Future[Any]) -> list[str]:
        """Keep ``built`` for ``key`` as the most recently used; the keys dropped to stay within the limit."""
        self._by_key[key] = built
        self._by_key.move_to_end(key)
        dropped = []
        while len(self._by_key) > self.limit:
            dropped.append(self._by_key.popitem(last=False)[0])
        return dropped

    def forget(self, key: str, built: asyncio.Future[Any]) -> None:
        """Forget ``key`` if ``built`` is still what it holds (a constructor that raised is tried again)."""
        if self._by_key.get(key) is built:
            del self._by_key[key]


class Handler:
    """Runs a job on the function or class it names (``flashpoint.target``) among those its endpoint serves; a job
    naming none goes to the only one. A job naming a target the worker does not have fails and runs nothing."""

    def __init__(
        self,
        target: Any,
        dependencies: list[str] | None = None,
        system_dependencies: list[str] | None = None,
        *,
        instances: int = MAX_INSTANCES,
    ) -> None:
        self.targets = {name: Target(obj, instances) for name, obj in load_targets(target).items()}
        self._missing = dependency_problem(dependencies or [], system_dependencies or [])

    def _target(self, meta: dict[str, Any]) -> Target:
        name = meta.get("target")
        if name is None:
            if len(self.targets) == 1:
                return next(iter(self.targets.values()))
            names = ", ".join(self.targets)
            raise HandlerError(
                f"this endpoint serves several functions or classes ({names}); a job names the one it calls in "
                f'"flashpoint": {{"target": NAME}} beside its input (the SDK handles do so)',
                Reason.USER_ERROR,
            )
        target = self.targets.get(name) if isinstance(name, str) else None
        if target is None:
            raise HandlerError(
                f"this endpoint serves no function or class {name!r} (it serves {', '.join(self.targets)}); the "
                "caller's code may be newer than this worker's: redeclare and call again",
                Reason.USER_ERROR,
            )
        return target

    async def __call__(self, job: dict[str, Any], emit: Emit | None = None) -> Any:
        if self._missing:
            raise HandlerError(self._missing, Reason.DEPENDENCY_MISSING)
        meta = job.get("flashpoint") or {}
        return await self._target(meta)(job, meta, emit)


class Target:
    """Calls one function, or a method of a per-worker instance of one class, with a job's input."""

    def __init__(self, target: Any, instances: int = MAX_INSTANCES) -> None:
        self.target = target
        self.is_class = inspect.isclass(target)
        self.methods = (
            [n for n, v in vars(target).items() if not n.startswith("_") and inspect.isfunction(v)]
            if self.is_class
            else []
        )
        #: one instance per distinct constructor arguments, the most recently used ones
        self.instances = Instances(instances)

    def _construct(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A new instance; the first one this process builds is its cold start's ``init`` (the model load), unless
        an init hook measured it already."""
        began = time.perf_counter()
        instance = self.target(*args, **kwargs)
        LOAD_PHASES.setdefault("init", time.perf_counter() - began)
        return instance

    async def _instance(self, init: Any) -> Any:
        key = json.dumps(init, sort_keys=True)
        built = self.instances.get(key)
        if built is None:
            args, kwargs = codec.decode_call(init) if init is not None else ((), {})
            # the constructor may load a model for seconds: keep the event loop (and the stop channel) responsive;
            # jobs that arrive meanwhile (max_concurrency > 1) wait for this one instead of building another
            built = asyncio.ensure_future(asyncio.to_thread(self._construct, args, kwargs))
            if self.instances.put(key, built):
                name = getattr(self.target, "__qualname__", "the class")
                print(
                    f"flashpoint: dropped the least recently used instance of {name} to build one for other "
                    f"constructor arguments ({self.instances.limit} kept per worker: {MAX_INSTANCES_ENV})",
                    file=sys.stderr,
                    flush=True,
                )
        try:
            # shielded: a job cancelled while it waits leaves the construction to the others
            return await asyncio.shield(built)
        except BaseException:
            if built.done():
                self.instances.forget(key, built)  # a constructor that raised is tried again by the next job
            raise

    async def __call__(self, job: dict[str, Any], meta: dict[str, Any], emit: Emit | None = None) -> Any:
        payload = job.get("input")
        fn: Callable[..., Any] = self.target
        if self.is_class:
            method = payload.pop("method", None) if isinstance(payload, dict) else None
            if method is None:
                if len(self.methods) != 1:
                    raise TypeError(
                        f"this endpoint has several methods ({', '.join(self.methods)}); name one in "
                        '"method", e.g. {"method": "%s", ...}' % self.methods[0]
                    )
                method = self.methods[0]
            if method not in self.methods:
                raise TypeError(f"unknown method {method!r}; methods: {', '.join(self.methods)}")
            fn = getattr(await self._instance(meta.get("init")), method)
        args, kwargs = codec.decode_call(payload)
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        if inspect.isasyncgenfunction(fn):
            return await _drain(fn(*args, **kwargs), emit)
        result = await asyncio.to_thread(fn, *args, **kwargs)
        if inspect.isgenerator(result):
            return await _drain(_in_thread(result), emit)
        if inspect.isawaitable(result):
            return await result
        return result


#: posts one streamed chunk; generator endpoints call it for every value they yield
Emit = Callable[[Any], Awaitable[None]]


async def _in_thread(generator: Iterator[Any]) -> AsyncIterator[Any]:
    """A sync generator stepped in a thread, so a slow step never blocks the worker's event loop."""
    done = object()
    while (item := await asyncio.to_thread(next, generator, done)) is not done:
        yield item


async def _drain(chunks: AsyncIterator[Any], emit: Emit | None) -> list[Any]:
    """Stream every chunk as it is produced; the job's output is all of them (Runpod's return_aggregate_stream)."""
    collected = []
    async for chunk in chunks:
        collected.append(chunk)
        if emit is not None:
            await emit(chunk)
    return collected


def error_body(exc: BaseException, reason: Reason = Reason.USER_ERROR) -> dict[str, Any]:
    """Runpod's error body: ``error`` is a JSON *string* of the traceback record; flashpoint adds ``reason``."""
    if isinstance(exc, HandlerError):
        reason = exc.reason
    kind = (
        type(exc).__qualname__
        if type(exc).__module__ == "builtins"
        else f"{type(exc).__module__}.{type(exc).__qualname__}"
    )
    return protocol.error_record(
        f"<class '{kind}'>",
        str(exc),
        "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        reason,
        hostname=os.environ.get("RUNPOD_POD_HOSTNAME", "unknown"),
        worker_id=os.environ.get("RUNPOD_POD_ID", "unknown"),
    )
