"""``flashpoint dev``'s URL layout of a project (as Runpod Flash's ``flash dev`` builds it), and what a reload
changes. Pure: the project itself (its files, what each declares) is loaded by ``hosting.project``, shared with
``serve DIR``.

The layout: a file's prefix is its path below the folder without ``.py`` (``/gpu_worker``,
``/01_getting_started/03_mixed_workers/cpu_worker``). A file with one queue callable (a function, or one method of a
class) answers ``POST <prefix>/runsync``; with several, each answers ``POST <prefix>/<name>/runsync`` (a function by
its name, a class's public methods by theirs). A route endpoint's routes are ``METHOD <prefix><path>``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from flashpoint.hosting.discovery import AnyEndpoint
from flashpoint.hosting.project import Project, SourceFile, same_endpoint
from flashpoint.runpodapps.serving import ApiEndpoint
from flashpoint.sdk.endpoint import EndpointClass, EndpointCommand
from flashpoint.sdk.routes import is_route_endpoint, route_table
from flashpoint.spec import EndpointSpec, WorkerTarget

__all__ = [
    "Call",
    "Changes",
    "Layout",
    "RouteEntry",
    "build_layout",
    "changes",
    "spec_of",
]

#: first prefix segments the server keeps for itself: Runpod's API and the worker protocol (/v2), the native API (/v1)
RESERVED_PREFIXES = frozenset({"v1", "v2"})
#: files that are never an app's
_NOT_APPS = frozenset({"__init__.py", "conftest.py"})
#: a path parameter of a route template, named or typed (``{id}``, ``{id:int}``): two templates differing only in the
#: names are one route
_PARAM = re.compile(r"\{[^{}]*\}")


def _module_of(value: Any) -> str | None:
    if isinstance(value, ModuleType):
        return value.__name__
    try:
        name = getattr(value, "__module__", None)
    except Exception:  # a lazy object's attribute access may run anything
        return None
    return name if isinstance(name, str) else None


# --------------------------------------------------------------------------------------------------------------------
# The layout


@dataclass(frozen=True, slots=True)
class Call:
    """``POST <path>``: one queue callable, a function or one method of a class endpoint."""

    path: str
    endpoint: str
    #: the function's or method's name
    name: str
    file: str
    #: the member of a shared endpoint name this calls (the job names it in ``flashpoint.target``), else None
    target: str | None = None
    #: the class method this calls (the job names it in its input's ``method``), else None
    method: str | None = None
    #: False when the callable takes no parameters: the body is then ignored, as Flash's dev server does
    takes_input: bool = True
    #: an input that fits the signature, for the docs page
    example: Mapping[str, Any] = field(default_factory=dict)
    doc: str = ""

    def job_input(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The job's input for the body's ``input``: a method's name joins its arguments."""
        return {**given, "method": self.method} if self.method is not None else dict(given)


@dataclass(frozen=True, slots=True)
class RouteEntry:
    """``METHOD <path>``: one route of a route endpoint, under its file's prefix."""

    method: str
    #: the layout's path template: the file's prefix and the route's path (``/lb_worker/items/{item_id}``)
    path: str
    endpoint: str
    #: the file's prefix, which the server replaces with ``/<endpoint>`` before its route proxy
    prefix: str
    #: the function serving it
    name: str
    file: str
    example: Mapping[str, Any] = field(default_factory=dict)
    doc: str = ""


@dataclass(frozen=True)
class Layout:
    """The URLs of a project, and the endpoints they reach."""

    #: queue callables by their exact path
    calls: Mapping[str, Call]
    #: route endpoints' routes, in file order
    routes: tuple[RouteEntry, ...]
    #: every endpoint served, by name, in file order
    endpoints: Mapping[str, AnyEndpoint]
    #: the files each endpoint's callables and routes are listed under (its code's files)
    homes: Mapping[str, tuple[str, ...]]
    #: how a worker loads each endpoint
    targets: Mapping[str, WorkerTarget] = field(default_factory=dict)
    #: what was left out, and why (name collisions, reserved prefixes), in words
    problems: tuple[str, ...] = ()

    def rows(self) -> list[tuple[str, str, str, str]]:
        """``(method, path, callable, endpoint)`` per URL, calls first, for the startup table and the docs page."""
        rows = [("POST", c.path, c.name, c.endpoint) for c in self.calls.values()]
        return rows + [(r.method, r.path, r.name, r.endpoint) for r in self.routes]


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


#: an example value by the start of an annotation's name
_PLACEHOLDERS: tuple[tuple[str, Any], ...] = (
    ("str", "text"), ("int", 0), ("float", 0.0), ("bool", False), ("dict", {}), ("list", [])
)  # fmt: skip


def _example(fn: Any, *, skip_self: bool) -> tuple[bool, dict[str, Any]]:
    """Whether ``fn`` takes parameters (``*args``/``**kwargs`` aside, as Flash counts them), and an input fitting them:
    each default when JSON can carry it, else a placeholder by the annotation's name."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True, {}
    if skip_self and params:
        params = params[1:]
    kept = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    example: dict[str, Any] = {}
    for param in kept:
        if param.default is not param.empty and _json(param.default):
            example[param.name] = param.default
            continue
        hint = param.annotation
        lowered = str(hint if isinstance(hint, str) else getattr(hint, "__name__", "")).lower()
        example[param.name] = next((value for name, value in _PLACEHOLDERS if lowered.startswith(name)), None)
    return bool(kept), example


def _json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _routes_of(handle: Any) -> list[tuple[str, str, Any]]:
    """``(method, path, function)`` of a route endpoint's routes: its own, or a Runpod SDK 2.x ``@app.api`` class's
    marked methods (the class's functions, to say which file declares them)."""
    if isinstance(handle, ApiEndpoint):
        cls = handle.rc2_handle._cls
        return [(r.method, r.path, getattr(cls, r.handler_name)) for r in handle.rc2_handle.spec.routes]
    return list(route_table(handle))


def _calls_of(handle: Any) -> Iterator[tuple[str, str | None, str | None, Any, bool]]:
    """``(name, target, method, callable, is_method)`` for each queue callable an endpoint offers."""
    if isinstance(handle, EndpointCommand):  # a command's handler takes any input: known by the endpoint's name
        yield handle.spec.name, None, None, None, False
        return
    targets = handle.targets()
    for target_name, member in targets.items():
        target = target_name if len(targets) > 1 else None
        if isinstance(member, EndpointClass):
            for method in member.spec.methods:
                yield method, target, method, getattr(member.__wrapped__, method, None), True
        else:
            yield target_name, target, None, getattr(member, "__wrapped__", None), False


def build_layout(project: Project) -> Layout:
    """The URL layout of a loaded project (pure). Each function, class method and route is listed under the file that
    defines it when that file is part of the project (files importing it do not list it again; one endpoint name
    shared by functions of several files lists each under its own), else under the first file holding its endpoint.
    Left out, with a problem saying why: an endpoint of a name another file's endpoint (with other options) has, a
    second callable of one name in a file, a second route with one method and path, a file whose prefix starts with
    /v1 or /v2."""
    problems: list[str] = []
    owners: dict[str, tuple[AnyEndpoint, str]] = {}
    targets: dict[str, WorkerTarget] = {}
    files: dict[str, SourceFile] = {}
    for source in project.files:
        first = source.prefix.split("/")[1]
        if source.endpoints and first in RESERVED_PREFIXES:
            problems.append(
                f"{source.rel}: left out: its URLs would start with /{first}/, which the server keeps for its own API; "
                "rename the file or its folder"
            )
            continue
        files[source.rel] = source
        for name, handle in source.endpoints.items():
            known = owners.get(name)
            if known is None:
                owners[name] = (handle, source.rel)
                targets[name] = source.targets[name]
            elif not same_endpoint(known[0], handle):
                problems.append(
                    f"{source.rel}: endpoint {name!r} left out: {known[1]} declares one of that name with other "
                    "options; give each its own name="
                )
    by_module = {source.module: rel for rel, source in files.items() if source.module}

    def file_of(obj: Any, fallback: str) -> str:
        return by_module.get(_module_of(obj) or "", fallback) if obj is not None else fallback

    found: dict[str, list[Call]] = {rel: [] for rel in files}
    declared: dict[str, list[tuple[str, str, str, Any]]] = {rel: [] for rel in files}
    homes: dict[str, list[str]] = {}
    for name, (handle, first) in owners.items():
        where = homes.setdefault(name, [])
        if isinstance(handle, ApiEndpoint) and handle.rc2_handle._cls is None:
            problems.append(
                f"{first}: api resource {handle.spec.key!r} left out: its ASGI app's routes are not known before it "
                "runs; serve it with `flashpoint serve` and call it at /<endpoint id>/<path>"
            )
            continue
        if is_route_endpoint(handle) or isinstance(handle, ApiEndpoint):
            for method, route_path, fn in _routes_of(handle):
                rel = file_of(fn, first)
                declared[rel].append((name, method, route_path, fn))
                where.append(rel)
            continue
        for label, target, class_method, fn, is_method in _calls_of(handle):
            takes, example = _example(fn, skip_self=is_method) if fn is not None else (True, {})
            rel = file_of(fn, first)
            found[rel].append(Call("", name, label, rel, target, class_method, takes, example, _first_line(fn)))
            where.append(rel)
        where.append(first)
    calls: dict[str, Call] = {}
    routes: list[RouteEntry] = []
    taken: dict[tuple[str, str], str] = {}

    def claim(method: str, path: str, what: str) -> bool:
        key = (method, _PARAM.sub("{}", path))
        if key in taken:
            problems.append(f"{what} left out: {method} {path} is taken by {taken[key]}")
            return False
        taken[key] = what
        return True

    for rel, source in files.items():
        names: set[str] = set()
        unique: list[Call] = []
        for call in found[rel]:
            if call.name in names:
                problems.append(
                    f"{rel}: {call.name} of endpoint {call.endpoint!r} left out: the file has another callable named "
                    f"{call.name}, and both would answer {source.prefix}/{call.name}/runsync"
                )
                continue
            names.add(call.name)
            unique.append(call)
        for call in unique:
            path = f"{source.prefix}/runsync" if len(unique) == 1 else f"{source.prefix}/{call.name}/runsync"
            if claim("POST", path, f"{rel}: {call.name}"):
                calls[path] = dataclasses.replace(call, path=path)
        for name, method, route_path, fn in declared[rel]:
            path = source.prefix + route_path
            if claim(method, path, f"{rel}: {fn.__name__}"):
                _, example = _example(fn, skip_self=False)
                routes.append(RouteEntry(method, path, name, source.prefix, fn.__name__, rel, example, _first_line(fn)))
    endpoints = {name: handle for name, (handle, _) in owners.items()}
    return Layout(calls, tuple(routes), endpoints, {n: tuple(dict.fromkeys(h)) for n, h in homes.items()}, targets,
                  tuple(problems))  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# What a reload changes


@dataclass(frozen=True, slots=True)
class Changes:
    """What a reload does to the served endpoints, by name."""

    #: new names: registered
    added: tuple[str, ...] = ()
    #: changed code or options: their workers are replaced
    replaced: tuple[str, ...] = ()
    #: gone from the files: their queued jobs are cancelled and their workers stopped
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.replaced or self.removed)


def spec_of(handle: Any) -> EndpointSpec:
    spec: EndpointSpec = handle.spec
    return spec


def changes(old: Project, old_layout: Layout, new: Project, new_layout: Layout) -> Changes:
    """Compare two loads of a project (pure). An endpoint is replaced when its options or its worker's target
    changed, or the source of one of its files, or of a project file they refer to at module level (through others
    too), changed; never while one of its files fails to load (its workers could not load the new code)."""
    before = {f.rel: f.digest for f in old.files}
    now = {f.rel: f for f in new.files}
    changed = {rel for rel, f in now.items() if before.get(rel) != f.digest} | (before.keys() - now.keys())
    added: list[str] = []
    replaced: list[str] = []
    for name, handle in new_layout.endpoints.items():
        previous = old_layout.endpoints.get(name)
        if previous is None:
            added.append(name)
            continue
        homes = new_layout.homes[name]
        if any(rel in now and now[rel].error is not None for rel in homes):
            continue
        if (
            spec_of(previous) != spec_of(handle)
            or old_layout.targets.get(name) != new_layout.targets.get(name)
            or set().union(*(_reach(rel, now) for rel in homes)) & changed
        ):
            replaced.append(name)
    removed = tuple(name for name in old_layout.endpoints if name not in new_layout.endpoints)
    return Changes(tuple(added), tuple(replaced), removed)


def _reach(rel: str, files: Mapping[str, SourceFile]) -> set[str]:
    """``rel`` and every project file it refers to, directly or through others."""
    seen = {rel}
    todo = [rel]
    while todo:
        source = files.get(todo.pop())
        for used in source.uses if source is not None else ():
            if used not in seen:
                seen.add(used)
                todo.append(used)
    return seen
